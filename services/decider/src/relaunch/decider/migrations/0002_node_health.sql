-- Node health from gpu-probe: the latest reading per node, and every non-healthy reading as history
-- (what attribution reads, and what the API shows across jobs).

CREATE TABLE node_health (
    cluster    text NOT NULL,
    node       text NOT NULL,
    verdict    text NOT NULL,
    reasons    jsonb NOT NULL DEFAULT '[]',
    xids       jsonb NOT NULL DEFAULT '[]',
    at         timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, node)
);

CREATE TABLE node_events (
    id      bigserial PRIMARY KEY,
    cluster text NOT NULL,
    node    text NOT NULL,
    verdict text NOT NULL,
    reasons jsonb NOT NULL DEFAULT '[]',
    xids    jsonb NOT NULL DEFAULT '[]',
    at      timestamptz NOT NULL,
    UNIQUE (cluster, node, at)
);
CREATE INDEX node_events_recent ON node_events (cluster, node, at DESC);
