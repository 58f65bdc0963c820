"""The fail-open watchdog: a process of its own beside the actuator (`python -m relaunch.actuator.watchdog`),
with its own settings (RELAUNCH_WATCHDOG_*, settings.py). It releases jobs relaunch put on hold when
no live actuator has advanced their Advice for a bounded time (docs/architecture.md, "Actuator
safety"). It shares the actuator's Slurm and hold-registry adapters, and nothing else.
"""
