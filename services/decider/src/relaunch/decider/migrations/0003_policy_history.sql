-- What the policy rules read (docs/policy.md): each job's effective policy, each attempt's timeline
-- and highest step, and the failure class of every restart (per-class budgets, restart storms).
-- Additive only: older readers (the API selects *) see extra columns and nothing else changes.

ALTER TABLE jobs
    ADD COLUMN policy_name text NOT NULL DEFAULT '',          -- the operator policy the comment names
    ADD COLUMN policy      jsonb NOT NULL DEFAULT '{}';       -- the job's effective policy (flat)

ALTER TABLE attempts
    ADD COLUMN high_step bigint,                              -- highest training step reached; NULL: unknown
    ADD COLUMN ended_at  timestamptz;                         -- first observed in a final state

ALTER TABLE anomalies
    ADD COLUMN last_step bigint,                              -- AnomalyDetected.last_step
    ADD COLUMN exit_code integer;                             -- AnomalyDetected.exit_code

-- hardware | infrastructure | application | resource | scheduler | unknown | hang | straggler
ALTER TABLE advice ADD COLUMN fault_class text NOT NULL DEFAULT 'unknown';

-- Advice issued before this migration: the class of the anomaly it answered (the first of its attempt).
UPDATE advice SET fault_class = COALESCE((
    SELECT CASE WHEN an.kind IN ('hang', 'straggler') THEN an.kind ELSE an.fault_domain END
    FROM anomalies an
    WHERE an.cluster = advice.cluster AND an.job_id = advice.job_id AND an.attempt = advice.attempt
    ORDER BY an.detected_at LIMIT 1), 'unknown');

CREATE INDEX advice_job_class ON advice (cluster, job_id, fault_class);
