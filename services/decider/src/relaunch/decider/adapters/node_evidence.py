"""What the ledger knows of a decision's nodes beyond the job itself: their gpu-probe readings and their
exclusions by other jobs (docs/policy.md, "Node history"), as two columns of a decision's read.

Part of the Postgres ledger adapter (ledger.py composes these fragments into its statements and parses
their rows here). Each exclusion read says whose job it was (jobs.user_id, migration 0012) and whether
evidence the job's owner does not control stood behind it: an evidence ref of the node whose reason
begins with one of reputation.CORROBORATING (a gpu-probe "failed" reading, a lost node, Slurm's word).
The domain (reputation.standing) decides what they weigh; nothing here counts users or jobs.
"""

from __future__ import annotations

import json

from ..domain.attribution import NodeEvent
from ..domain.reputation import CORROBORATING, HISTORY_REASON, Exclusion


def _like_prefixes(prefixes: tuple[str, ...]) -> str:
    """ARRAY['p1%', ...] for LIKE ANY: the prefixes are this module's constants (checked: no quote or
    LIKE wildcard in them), so they are written into the statement's text, which never changes."""
    for p in prefixes:
        if any(c in p for c in "'%_\\"):
            raise ValueError(f"a reason prefix may not hold ', %, _ or \\: {p!r}")
    return "ARRAY[" + ", ".join(f"'{p}%'" for p in prefixes) + "]"


_REASON = "substring(r FROM '^node:[^:]*:[^:]*:(.*)$')"
"""The reason of an evidence ref node:<node>:<confidence>:<reason> (a node name holds no colon)."""

_NODE_REF = "split_part(r, ':', 1) = 'node' AND split_part(r, ':', 2) = n"

EVIDENCE = f"""ARRAY(SELECT ROW(node, verdict, reasons, at) FROM node_events e
          WHERE cluster=$1 AND node = ANY(:nodes) AND at >= :events_since
            AND at > COALESCE((SELECT max(c.at) FROM node_clearances c WHERE c.cluster=$1 AND c.node=e.node),
                              '-infinity')
          ORDER BY at) AS events,
    ARRAY(SELECT ROW(n, a.job_id, max(a.issued_at), max(j.user_id), bool_or(EXISTS (
                 SELECT 1 FROM jsonb_array_elements_text(a.evidence_refs) r
                 WHERE {_NODE_REF} AND {_REASON} LIKE ANY ({_like_prefixes(CORROBORATING)}))))
          FROM advice a JOIN jobs j ON j.cluster = a.cluster AND j.job_id = a.job_id, unnest(a.exclude_nodes) AS n
          WHERE a.cluster=$1 AND a.job_id <> $2 AND a.issued_at >= :history_since AND a.exclude_nodes && :nodes
            AND n = ANY(:nodes)
            AND a.issued_at > COALESCE((SELECT max(c.at) FROM node_clearances c
                                        WHERE c.cluster=$1 AND c.node=n), '-infinity')
            AND NOT (
              EXISTS (SELECT 1 FROM jsonb_array_elements_text(a.evidence_refs) r
                      WHERE {_NODE_REF} AND split_part(r, ':', 4) LIKE '{HISTORY_REASON}%')
              AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements_text(a.evidence_refs) r
                              WHERE {_NODE_REF} AND split_part(r, ':', 4) NOT LIKE '{HISTORY_REASON}%'))
          GROUP BY n, a.job_id) AS history"""
"""The nodes' health events and their exclusions by other jobs (`JobTx.node_evidence`), as two columns;
:nodes, :events_since and :history_since are filled in by the statement that uses them (`evidence`).
An exclusion made on history alone (the node's only refs are the history rule's "excluded for N other
jobs") is not read: otherwise a node, once over the threshold, would be excluded by every later failing
job and each of those exclusions would keep it there. The overlap test (&&) lets the GIN index of
migration 0008 find the rows instead of scanning every recent Advice; exclusions and readings before the
node's newest clearance (migration 0009) are forgotten."""


def evidence(nodes: str, events_since: str, history_since: str) -> str:
    """`EVIDENCE` with its placeholders filled in (SQL expressions of the statement that uses it)."""
    return (EVIDENCE.replace(":nodes", nodes).replace(":events_since", events_since)
            .replace(":history_since", history_since))


def evidence_of(row) -> tuple[list[NodeEvent], dict[str, tuple[Exclusion, ...]]]:
    """The events and node -> exclusions by other jobs of a row read with `EVIDENCE`'s columns."""
    events = [NodeEvent(node, verdict, tuple(json.loads(reasons)), at) for node, verdict, reasons, at in row["events"]]
    out: dict[str, tuple[Exclusion, ...]] = {}
    for node, job_id, at, owner, corroborated in row["history"]:
        out[node] = out.get(node, ()) + (Exclusion(job_id, at, owner, bool(corroborated)),)
    return events, out
