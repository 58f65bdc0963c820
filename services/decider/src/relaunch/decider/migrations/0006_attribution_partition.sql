-- Attribution across attempts and the unschedulable guard (docs/policy.md):
-- each job's partition size as the observer last saw it, and what attribution said of each attempt's
-- nodes (the "same node in consecutive attempts" rule reads the previous attempt's suspects; people
-- read why a node was or was not left out). Additive only.

ALTER TABLE jobs
    ADD COLUMN partition_nodes integer;        -- JobObserved.partition_nodes (last known); NULL: never known

CREATE TABLE suspects (
    cluster    text NOT NULL,
    job_id     text NOT NULL,
    attempt    integer NOT NULL,
    node       text NOT NULL,
    confidence real NOT NULL,
    reasons    jsonb NOT NULL DEFAULT '[]',
    excluded   boolean NOT NULL DEFAULT false, -- left out of the restart the attempt's Advice asked for
    anomaly_id text NOT NULL,                  -- the anomaly whose attribution gave the highest confidence
    at         timestamptz NOT NULL,
    PRIMARY KEY (cluster, job_id, attempt, node),
    FOREIGN KEY (cluster, job_id) REFERENCES jobs (cluster, job_id)
);
CREATE INDEX suspects_node ON suspects (cluster, node, at DESC);
