-- Job identity (docs/architecture.md, "Job identity"): a job is (cluster, job_id, submit time of its first attempt).
-- Slurm reuses job ids (after its state is wiped, or when the id counter wraps). When an observation
-- names a known (cluster, job_id) with a LATER first-attempt submit time, the known job is retired:
-- its rows, in every table keyed by (cluster, job_id), move to the job id '<job_id>@<its submit time>'
-- (e.g. 1234@20261129T175435Z), where they stay as history, and the new job starts with a fresh row.
-- Additive only.

ALTER TABLE jobs
    ADD COLUMN submit_time      timestamptz,                -- JobObserved.submit_time; NULL: not known (yet)
    ADD COLUMN generation_floor integer NOT NULL DEFAULT 0; -- highest Advice generation of retired jobs
                                                            -- with this id: generations go on from there,
                                                            -- so the ADVICE stream's per-subject history
                                                            -- and Msg-Ids never mistake new Advice for old

CREATE FUNCTION retire_job(p_cluster text, p_job_id text, p_as text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t     text;
    floor integer;
BEGIN
    -- The retired copy of the jobs row first (children's foreign keys must find it), column-generic.
    INSERT INTO jobs
    SELECT (jsonb_populate_record(NULL::jobs, to_jsonb(j) || jsonb_build_object('job_id', p_as))).*
      FROM jobs j WHERE j.cluster = p_cluster AND j.job_id = p_job_id;
    -- Every other table with (cluster, job_id) columns, including ones later migrations add.
    FOR t IN
        SELECT c.table_name FROM information_schema.columns c
          JOIN information_schema.tables tb ON tb.table_schema = c.table_schema AND tb.table_name = c.table_name
         WHERE c.table_schema = current_schema() AND c.column_name = 'job_id' AND c.table_name <> 'jobs'
           AND tb.table_type = 'BASE TABLE'
           AND EXISTS (SELECT 1 FROM information_schema.columns c2 WHERE c2.table_schema = c.table_schema
                          AND c2.table_name = c.table_name AND c2.column_name = 'cluster')
    LOOP
        EXECUTE format('UPDATE %I SET job_id = $1 WHERE cluster = $2 AND job_id = $3', t)
            USING p_as, p_cluster, p_job_id;
    END LOOP;
    SELECT GREATEST(j.generation_floor, COALESCE((SELECT max(a.generation) FROM advice a
                                                  WHERE a.cluster = p_cluster AND a.job_id = p_as), 0))
      INTO floor FROM jobs j WHERE j.cluster = p_cluster AND j.job_id = p_job_id;
    -- The new job: a fresh row under the real id (the caller fills it from the observation).
    DELETE FROM jobs WHERE cluster = p_cluster AND job_id = p_job_id;
    INSERT INTO jobs (cluster, job_id, generation_floor) VALUES (p_cluster, p_job_id, floor);
END $$;
