-- One round trip to begin a decision (docs/architecture.md, "Decision"): the job's row locked (made first
-- for a job never seen), the anomaly recorded with its attempt's step and exit code, and both the
-- locked row and whether the anomaly was new returned. PL/pgSQL functions because the order matters:
-- the row lock is taken before anything is written, and each statement after it sees what the
-- transactions it waited for committed (one SQL statement would read from the snapshot it began with).
-- Additive only.

-- The job's row, locked (FOR UPDATE) for the rest of the caller's transaction; made first for a job
-- never seen (a concurrent insert of the same job waits for the other's commit, then finds the row).
-- Every decision and observation takes it first (Ledger.job_tx, take_anomaly, observe_job).
CREATE FUNCTION lock_job(p_cluster text, p_job_id text) RETURNS jobs
LANGUAGE plpgsql AS $$
DECLARE
    job jobs;
BEGIN
    SELECT * INTO job FROM jobs WHERE cluster = p_cluster AND job_id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO jobs (cluster, job_id) VALUES (p_cluster, p_job_id) ON CONFLICT DO NOTHING;
        SELECT * INTO job FROM jobs WHERE cluster = p_cluster AND job_id = p_job_id FOR UPDATE;
    END IF;
    RETURN job;
END $$;

CREATE FUNCTION take_anomaly(
    p_anomaly_id text, p_cluster text, p_job_id text, p_attempt integer, p_kind text, p_source text,
    p_signature_id text, p_category text, p_fault_domain text, p_action text, p_summary text,
    p_nodes text[], p_evidence jsonb, p_detected_at timestamptz, p_last_step bigint, p_exit_code integer,
    OUT job jobs, OUT inserted boolean)
LANGUAGE plpgsql AS $$
DECLARE
    new_id text;
BEGIN
    job := lock_job(p_cluster, p_job_id);
    -- The attempt keeps the highest step any report gave (GREATEST skips NULL); the scheduler's own
    -- exit code, when the observer recorded one, wins over the anomaly's copy.
    IF p_last_step IS NOT NULL OR p_exit_code IS NOT NULL THEN
        INSERT INTO attempts (cluster, job_id, idx, high_step, exit_code)
        VALUES (p_cluster, p_job_id, p_attempt, p_last_step, p_exit_code)
        ON CONFLICT (cluster, job_id, idx) DO UPDATE SET
            high_step = GREATEST(attempts.high_step, EXCLUDED.high_step),
            exit_code = COALESCE(attempts.exit_code, EXCLUDED.exit_code), updated_at = now();
    END IF;
    INSERT INTO anomalies (anomaly_id, cluster, job_id, attempt, kind, source, signature_id, category,
        fault_domain, action, summary, nodes, evidence, detected_at, last_step, exit_code)
    VALUES (p_anomaly_id, p_cluster, p_job_id, p_attempt, p_kind, p_source, p_signature_id, p_category,
        p_fault_domain, p_action, p_summary, p_nodes, p_evidence, p_detected_at, p_last_step, p_exit_code)
    ON CONFLICT (anomaly_id) DO NOTHING
    RETURNING anomaly_id INTO new_id;
    inserted := new_id IS NOT NULL;
END $$;
