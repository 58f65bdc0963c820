-- Attribution reads, for every decision, the Advice of other jobs that excluded one of the failed
-- job's nodes (JobTx.node_history). Without an index that read scans every Advice of the last 24 h:
-- 15 ms a decision with 18,000 of them, and quadratic in a mass failure (1,000 jobs behind one switch
-- each scan the Advice of those decided before them). With it, the overlap test (&&) finds the few
-- rows that name one of the nodes (0.1 ms). Additive only.
CREATE INDEX advice_exclude_nodes ON advice USING gin (exclude_nodes);
