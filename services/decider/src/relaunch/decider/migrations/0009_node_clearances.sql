-- Node clearances: an operator saying "this node was repaired, forget its record"
-- (POST /v1/nodes/{cluster}/{node}/clear, bearer token; `relaunch nodes clear NODE`).
-- Rows are only added, never changed: each is its own audit record (who, why, when). The decider
-- reads a node's exclusions and gpu-probe readings only after its newest clearance (docs/policy.md
-- "node history"); the Advice and readings before it stay in the ledger, as history.

CREATE TABLE node_clearances (
    id      bigserial PRIMARY KEY,
    cluster text NOT NULL,
    node    text NOT NULL,
    reason  text NOT NULL DEFAULT '',
    actor   text NOT NULL DEFAULT '',          -- who asked, as the caller said (the token is shared)
    at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX node_clearances_node ON node_clearances (cluster, node, at DESC);
