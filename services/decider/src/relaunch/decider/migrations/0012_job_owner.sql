-- The job's owner (docs/policy.md, "Node history"): a node's history across jobs counts different users,
-- not jobs, so that one user's jobs cannot get a healthy node excluded for everyone. JobObserved.user_id
-- (Slurm's user id of the job) is kept in jobs.user_id; NULL: not known (an actuator of an older release,
-- or a job not observed yet), and an unknown owner never counts as an independent user. A known owner is
-- never forgotten by a later observation that does not say it. Retired jobs keep theirs (retire_job,
-- migration 0007, copies every column). Additive only.

ALTER TABLE jobs
    ADD COLUMN user_id integer;                -- JobObserved.user_id; NULL: not known

-- observe_job (migration 0011) with the owner as a 21st argument.
CREATE FUNCTION observe_job(
    p_cluster text, p_job_id text, p_restarts integer, p_state text, p_nodes text[], p_exit_code integer,
    p_ended_at timestamptz, p_name text, p_comment text, p_partition text, p_options jsonb,
    p_option_errors jsonb, p_mode text, p_reason text, p_policy_name text, p_policy jsonb,
    p_partition_nodes integer, p_observed_at timestamptz, p_submit_time timestamptz, p_slack_s double precision,
    p_user_id integer)
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
        submit_time = COALESCE(submit_time, p_submit_time), user_id = COALESCE(p_user_id, user_id),
        updated_at = now()
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

-- The 20-argument form, for a decider of the release before during an upgrade: the same, owner unknown
-- (one body to keep).
CREATE OR REPLACE FUNCTION observe_job(
    p_cluster text, p_job_id text, p_restarts integer, p_state text, p_nodes text[], p_exit_code integer,
    p_ended_at timestamptz, p_name text, p_comment text, p_partition text, p_options jsonb,
    p_option_errors jsonb, p_mode text, p_reason text, p_policy_name text, p_policy jsonb,
    p_partition_nodes integer, p_observed_at timestamptz, p_submit_time timestamptz, p_slack_s double precision)
RETURNS boolean
LANGUAGE sql AS $$
    SELECT observe_job(p_cluster, p_job_id, p_restarts, p_state, p_nodes, p_exit_code, p_ended_at, p_name,
                       p_comment, p_partition, p_options, p_option_errors, p_mode, p_reason, p_policy_name,
                       p_policy, p_partition_nodes, p_observed_at, p_submit_time, p_slack_s, NULL::integer)
$$;
