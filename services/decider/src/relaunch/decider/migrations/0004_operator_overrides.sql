-- Operator overrides: a person switching one job between observe (plan and record, never touch
-- Slurm) and act, through the API (POST /v1/jobs/{cluster}/{job_id}/mode, bearer token).
-- Rows are only added: the newest row per job is the override in force, the older ones are its
-- history. The API writes them; the decider is to read the newest one when it decides (follow-up).

CREATE TABLE operator_overrides (
    id      bigserial PRIMARY KEY,
    cluster text NOT NULL,
    job_id  text NOT NULL,
    mode    text NOT NULL CHECK (mode IN ('observe', 'act')),
    reason  text NOT NULL DEFAULT '',
    actor   text NOT NULL DEFAULT '',          -- who asked, as the caller said (the token is shared)
    at      timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (cluster, job_id) REFERENCES jobs (cluster, job_id)
);
CREATE INDEX operator_overrides_job ON operator_overrides (cluster, job_id, at DESC, id DESC);
