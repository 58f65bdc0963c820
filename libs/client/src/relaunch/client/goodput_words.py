"""`relaunch jobs show`'s goodput lines, in words (docs/goodput.md): the job's ETTR, the checkpoints seen
and, per failure, its lost time by part. Pure: the API's `goodput` object in, lines of text out."""

from __future__ import annotations

PART_WORDS = {"recomputation": "recomputation", "detection": "detection", "recovery": "recovery",
              "startup": "start-up", "warmup": "warm-up"}
CHECKPOINTS_SHOWN = 5


def duration(seconds: float | None) -> str:
    """`47 min 3 s`, `2 h 5 min`, `0.4 s`; `?` when not known."""
    if seconds is None:
        return "?"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def goodput_lines(figures: dict | None) -> list[str]:
    if not figures:
        return []
    failures = figures.get("failures") or []
    ettr = figures.get("ettr")
    head = (f"ETTR {ettr:.1%} (productive {duration(figures.get('productive_s'))} of "
            f"{duration(figures.get('wall_s'))} since the first start)" if ettr is not None
            else "ETTR not known (no step seen)")
    lines = [f"goodput: {head}; lost {duration(figures.get('lost_s') or 0.0)} in {len(failures)} "
             f"failure{'s' if len(failures) != 1 else ''}"]
    saves = figures.get("checkpoints") or []
    if saves:
        shown = ", ".join(f"step {s['step']} (attempt {s['attempt']}, {str(s['at'])[11:19]})"
                          for s in saves[-CHECKPOINTS_SHOWN:])
        more = f"{len(saves) - CHECKPOINTS_SHOWN} earlier, then " if len(saves) > CHECKPOINTS_SHOWN else ""
        lines.append(f"checkpoints saved: {more}{shown}")
    else:
        lines.append("checkpoints saved: none seen")
    for f in failures:
        parts = f.get("parts_s") or {}
        words = []
        for part, label in PART_WORDS.items():
            value = parts.get(part)
            if part == "recomputation" and value is not None:
                since = (f"since the checkpoint at step {f['checkpoint_step']}" if f.get("checkpoint_step") is not None
                         else "since the start (no checkpoint)")
                at = f", failed at step {f['failed_step']}" if f.get("failed_step") is not None else ""
                words.append(f"{label} {duration(value)} {since}{at}")
            else:
                words.append(f"{label} {duration(value)}")
        line = (f"failure of attempt {f['attempt']} ({f['fault_class']}): lost {duration(f.get('lost_s'))}: "
                + ", ".join(words))
        want, resumed = f.get("expected_resume_step"), f.get("resumed_step")
        if want is not None:
            if f.get("resumed_as_expected") is True:
                line += f"; resumed from the checkpoint at step {resumed}, as expected"
            elif f.get("resumed_as_expected") is False:
                line += f"; expected to resume from step {want}, but began at step {resumed} (an older checkpoint?)"
            else:
                line += f"; expected to resume from step {want}"
        elif resumed is not None:
            line += f"; resumed at step {resumed}"
        lines.append(line)
    return lines
