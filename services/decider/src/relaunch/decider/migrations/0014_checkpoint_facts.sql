-- Checkpoint facts (docs/goodput.md): the checkpoint saves the detector saw in each attempt (from the
-- frameworks' save lines or relaunch.client.report_checkpoint), each attempt's first step (where it
-- resumed), its last progress before its anomaly and when it got back to the step the one before failed at: what a failure's lost time and the job's effective
-- training time ratio are computed from, and what the no-checkpoint rule reads (docs/policy.md).
-- And the time each attempt was first recorded RUNNING (the end of recovery, the start of start-up).
-- Additive only.

CREATE TABLE checkpoint_facts (
    id           bigserial PRIMARY KEY,
    cluster      text NOT NULL,
    job_id       text NOT NULL,
    attempt      integer NOT NULL,
    kind         text NOT NULL,                  -- save_started | saved | first_step | last_progress | caught_up
    step         bigint,                         -- NULL: no step named and none seen yet
    at           timestamptz NOT NULL,
    source       text NOT NULL DEFAULT 'log',    -- log | client | detector
    preset       text NOT NULL DEFAULT '',
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX checkpoint_facts_job ON checkpoint_facts (cluster, job_id, attempt);
-- A save once per attempt and step (every rank prints its line; a redelivery repeats it) ...
CREATE UNIQUE INDEX checkpoint_facts_save ON checkpoint_facts (cluster, job_id, attempt, kind, COALESCE(step, -1))
    WHERE kind IN ('save_started', 'saved');
-- ... and an attempt's first step, last progress and catching up once (the first recorded is kept).
CREATE UNIQUE INDEX checkpoint_facts_once ON checkpoint_facts (cluster, job_id, attempt, kind)
    WHERE kind IN ('first_step', 'last_progress', 'caught_up');

ALTER TABLE attempts ADD COLUMN running_at timestamptz;     -- first recorded RUNNING; NULL: not yet (or before 0014)

CREATE FUNCTION attempt_running_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Set once, by whichever write first records the attempt RUNNING (observe_job's, in the decider's
    -- transaction of that observation: within the observer's poll of the real start).
    IF NEW.state = 'RUNNING' AND NEW.running_at IS NULL THEN
        NEW.running_at := now();
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER attempts_running_at BEFORE INSERT OR UPDATE ON attempts
    FOR EACH ROW EXECUTE FUNCTION attempt_running_at();
