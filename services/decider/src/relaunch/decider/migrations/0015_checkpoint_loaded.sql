-- Checkpoint facts of kind 'loaded' (docs/goodput.md): an attempt's checkpoint load line, kept once per
-- attempt like its first step (every rank prints the line). Additive only.

CREATE UNIQUE INDEX checkpoint_facts_loaded ON checkpoint_facts (cluster, job_id, attempt, kind)
    WHERE kind = 'loaded';
