"""bench/load.py's targets and its Markdown report (bench/results/load-*.md)."""

from __future__ import annotations





TARGET_ADVICE_S = 5.0
"""Every one of the simultaneous failures has its Advice within this many seconds of the first."""
TARGET_RATIO_PER_CPU_S = 1.0
"""The detector ingests at least as many progress messages per CPU-second as the bare nats-py consumer."""
TARGET_BYTES_PER_JOB = 5 * 1024
"""The detector's RSS grows by at most this much per tracked job (5 KB), windows full."""


def _code_line(code: dict) -> str:
    commit = code.get("commit") or "unknown commit"
    changed = " with uncommitted changes" if code.get("uncommitted_changes") else ""
    return f"{commit}{changed} ({code.get('checkout', '?')})"


def _shares(shares: dict) -> str:
    return ", ".join(f"{name} {share:.0%}" for name, share in shares.items()) or "not measured"


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (0 with fewer than two points)."""
    if len(points) < 2:
        return 0.0
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def markdown(result: dict) -> str:
    m, p, mem, t = result["machine"], result["phases"], result["memory"], result["targets"]
    s, f, d, tr = p["steady"], p["failures"], p["drain"], p["track"]
    ok = {True: "met", False: "**NOT met**"}
    return "\n".join([
        f"# Load bench ({result['finished_at']})", "",
        f"`python bench/load.py --jobs {result['args']['jobs']} --failures {result['args']['failures']} "
        f"--duration {result['args']['duration']} --rate-hz {result['args']['rate_hz']}`", "",
        f"Machine: {m['cpus']} x {m['cpu_model']}, {m['memory_gib']} GiB, Python {m['python']}; load average "
        f"{' '.join(m['loadavg_at_start'])} at start, {' '.join(m['loadavg_at_end'])} at end. NATS, Redis, "
        "Postgres, the publisher, the bare consumer, the detector and the decider all share these cores "
        "(the CPU columns show who used what; `others` is everything else on the machine). " +
        ("The bare consumer ran in every phase." if result["args"].get("bare_during_load") else
         "The bare consumer ran only in the drain phase (paused before)."), "",
        f"Code: {_code_line(result.get('code') or {})}.", "",
        "| target | measured | |", "|---|---|---|",
        f"| ingest keeps up at {s['offered_per_s']:.0f} msgs/s offered | stored {s['stored_per_s']}/s, detector "
        f"{s['detector_per_s']}/s, pending at end {s['detector_pending_end']}, growth "
        f"{s['detector_pending_growth_per_s_second_half']}/s | {ok[t['ingest_keeps_up_at_offered_rate']]} |",
        f"| all {f['failures']} Advice within {TARGET_ADVICE_S:.0f} s | {f['advice']} Advice, last at {f['last_advice_s']} s "
        f"(median {f['median_advice_s']} s; anomalies last at {f['last_anomaly_s']} s) | "
        f"{ok[t['all_advice_within_5s']]} |",
        f"| detector ingest per CPU-second >= {TARGET_RATIO_PER_CPU_S:g} x bare nats-py (side by side, "
        f"{d['backlog']} backlog) | per CPU-second: detector {d['per_cpu_s'].get('detector')}, bare "
        f"{d['per_cpu_s'].get('bare')}: **{d['detector_vs_bare_per_cpu_s']} x the bare consumer** (wall clock: "
        f"detector {d['per_s'].get('detector')}/s, bare {d['per_s'].get('bare')}/s, ratio {d['detector_vs_bare']}; "
        f"share of the CPU in the kernel: {_shares(d.get('kernel_share') or {})}) | "
        f"{ok[t['detector_per_cpu_s_at_least_bare']]} |",
        f"| detector memory <= {TARGET_BYTES_PER_JOB // 1024} KB per tracked job, windows full | RSS "
        f"{mem['detector_bytes_per_tracked_job']} B/job ({mem['detector_rss_idle_mib']} -> "
        f"{mem['detector_rss_after_steady_mib']} MiB): **{mem['detector_vs_target']} x the target** (after tracking, "
        f"before progress: {mem['detector_bytes_per_tracked_job_after_track']} B/job) | "
        f"{ok[t['detector_memory_per_job_within_5kb']]} |",
        f"| Redis memory per tracked job (reported beside it) | {mem['redis_bytes_per_tracked_job']} B/job tracked, "
        f"{mem['redis_bytes_per_job_after_steady']} B/job after the steady phase (progress state and history) | "
        "reported |", "",
        f"Tracking {tr['jobs']} jobs (JobObserved through detector and decider): {tr['consumed_by_both_s']} s "
        f"({tr['observations_per_s']}/s).", "",
        "CPU (cores) per phase:", "",
        "| phase | " + " | ".join(s["cpu_cores"]) + " |", "|---|" + "---|" * len(s["cpu_cores"]),
        *[f"| {name} | " + " | ".join(str(p[name]["cpu_cores"].get(k)) for k in s["cpu_cores"]) + " |"
          for name in ("track", "steady", "failures", "drain")], "",
    ])
