"""Training progress and numerics from log lines and SDK reports (pure): parsing (one frame -> a
point), reading (a file -> frames, the way the detector's follower reads), divergence and rhythm
(the hang timeout calibrated from the job's own steps). docs/user-guide.md, "Progress"."""
