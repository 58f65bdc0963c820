"""What a hung job's rank processes were doing, read from outside the job (py-spy dumps, /proc/<pid>/stat)
and what that says about who stopped the collective (docs/architecture.md, "Hang evidence"). Pure."""
