"""Operator policies and how a job's comment resolves against them: the policy file's schema
(policies.toml is the built-in one), resolve() and the Policy it gives. Shared by the decider, which
decides under that Policy, and `relaunch policy check`, which shows it offline, so the two always
agree (docs/policy.md).
"""
