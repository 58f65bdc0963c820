-- Hang evidence (docs/architecture.md, "Hang evidence"): what the actuator read of a hung job's ranks
-- (py-spy, /proc) and who it points at, one row per hang anomaly, kept with the anomaly it answers. The
-- decider reads it for that anomaly's decision (a suspect node left out) and for the next attempt's (the
-- same place in the user's code twice stops the job); `relaunch jobs show` shows it. Additive only.

CREATE TABLE hang_evidence (
    anomaly_id     text PRIMARY KEY,
    cluster        text NOT NULL,
    job_id         text NOT NULL,
    attempt        integer NOT NULL,
    status         text NOT NULL,                 -- collected | unavailable | skipped
    blame          text NOT NULL,                 -- node | user_code | unclear | none
    place          text,                          -- the user-code suspect's file:line (function)
    suspect_nodes  text[] NOT NULL DEFAULT '{}',
    reason         text NOT NULL DEFAULT '',
    body           jsonb NOT NULL,                -- the HangEvidence message as published
    collected_at   timestamptz NOT NULL,
    recorded_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX hang_evidence_job ON hang_evidence (cluster, job_id, attempt);
