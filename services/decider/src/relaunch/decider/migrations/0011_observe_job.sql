-- A job observation in one round trip (docs/architecture.md, "Decision"), with no BEGIN and COMMIT of
-- its own: one function call is one transaction. The job's row is locked first (lock_job, migration
-- 0010); then, when the observation is about the job on record (its first attempt's submit time
-- matches within p_slack_s seconds, or one of the two is not known: the job's is set from it), the
-- job's row, its attempt's, and a requeued job's earlier attempts (which ended with a failure that
-- Slurm no longer reports) are written and true is returned. Otherwise nothing is written and false
-- is returned: the caller decides, with the job locked, whether it is a new job reusing the id or a
-- late report about a retired one (JobTx.same_job), and calls this again. Additive only.

CREATE FUNCTION observe_job(
    p_cluster text, p_job_id text, p_restarts integer, p_state text, p_nodes text[], p_exit_code integer,
    p_ended_at timestamptz, p_name text, p_comment text, p_partition text, p_options jsonb,
    p_option_errors jsonb, p_mode text, p_reason text, p_policy_name text, p_policy jsonb,
    p_partition_nodes integer, p_observed_at timestamptz, p_submit_time timestamptz, p_slack_s double precision)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    known timestamptz;
BEGIN
    known := (lock_job(p_cluster, p_job_id)).submit_time;
    IF p_submit_time IS NOT NULL AND known IS NOT NULL
       AND abs(extract(epoch FROM p_submit_time - known)) > p_slack_s THEN
        RETURN false;
    END IF;
    UPDATE jobs SET name = p_name, comment = p_comment, partition = p_partition, options = p_options,
        option_errors = p_option_errors, mode = p_mode, state = p_state, reason = p_reason,
        restarts = GREATEST(restarts, p_restarts), policy_name = p_policy_name, policy = p_policy,
        partition_nodes = COALESCE(p_partition_nodes, partition_nodes),
        submit_time = COALESCE(submit_time, p_submit_time), updated_at = now()
    WHERE cluster = p_cluster AND job_id = p_job_id;
    INSERT INTO attempts (cluster, job_id, idx, state, nodes, exit_code, ended_at)
    VALUES (p_cluster, p_job_id, p_restarts, p_state, p_nodes, p_exit_code, p_ended_at)
    ON CONFLICT (cluster, job_id, idx) DO UPDATE SET state = EXCLUDED.state,
        nodes = CASE WHEN cardinality(EXCLUDED.nodes) > 0 THEN EXCLUDED.nodes ELSE attempts.nodes END,
        exit_code = COALESCE(EXCLUDED.exit_code, attempts.exit_code),
        ended_at = COALESCE(attempts.ended_at, EXCLUDED.ended_at), updated_at = now();
    UPDATE attempts SET state = 'REQUEUED', ended_at = COALESCE(ended_at, p_observed_at), updated_at = now()
    WHERE cluster = p_cluster AND job_id = p_job_id AND idx < p_restarts AND state NOT IN
        ('FAILED', 'NODE_FAIL', 'TIMEOUT', 'OUT_OF_MEMORY', 'BOOT_FAIL', 'PREEMPTED', 'REQUEUED');
    RETURN true;
END $$;
