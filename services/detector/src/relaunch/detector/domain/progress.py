"""Training progress from log lines: the detector reads it with relaunch.common.progress (the same code
`relaunch progress FILE` runs offline, so the command line and the service always agree)."""

from relaunch.common.progress.parsing import (  # noqa: F401 - re-exported for the detector's modules
    MAX_LINE, PRESETS, CheckpointMark, Health, OverflowMark, ProgressPoint, parse_line,
)
