"""Run on one node of a hung job, inside its allocation (`srun --overlap --jobid=J -w NODE -N1 -n1 python3 -c
<this file's text> J PYSPY`; docs/architecture.md, "Hang evidence"): find the job's rank processes on this
node, sample /proc/<pid>/stat twice, dump each one's main-thread stack with py-spy, and print one JSON
object on stdout. Standard library only: it runs under whatever python3 the node has, not relaunch's.

Which processes are ranks: Python processes whose environment has SLURM_JOB_ID=J and RANK (torchrun,
torch's env://); only where none on the node has RANK, those with SLURM_PROCID (ranks srun launched
itself: torchrun's agents have SLURM_PROCID too, and are not ranks). A process whose parent is a rank of
the same number is not one (a data loader's workers inherit their rank's environment). Only processes of
this node (SLURMD_NODENAME, where both have it): nodes that share a host, as the test stack's do, see
each other's processes, and two py-spy --native on one process fail ("Failed to suspend process").

py-spy: `--nonblocking` first (the rank is never paused), then `--native` (pauses it while py-spy unwinds:
~50 ms for plain Python, up to ~1.4 s with torch's libraries, bench/pyspy_cost.py; it tells a native call
from the user's Python); the native dump is kept when it worked.
Bounded: each py-spy call has a timeout, the dumps are cut to the main thread and to MAX_DUMP characters.
"""

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

MAX_DUMP = 12_000
PYSPY_TIMEOUT_S = 5.0
INTERVAL_S = 0.5


def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            items = f.read().split(b"\0")
    except OSError:
        return None
    out = {}
    for item in items:
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read()
    except OSError:
        return ""


def parent(text):
    try:
        return int(text.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return 0


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def ranks(job_id):
    me, here = os.getpid(), os.environ.get("SLURMD_NODENAME")
    candidates = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        env = environ(pid)
        if not env or env.get("SLURM_JOB_ID") != job_id or "python" not in cmdline(pid).split(" ")[0]:
            continue
        if here and env.get("SLURMD_NODENAME", here) != here:
            continue
        candidates[pid] = env
    key = "RANK" if any("RANK" in env for env in candidates.values()) else "SLURM_PROCID"
    found = {}
    for pid, env in candidates.items():
        rank = env.get(key, "")
        if rank.isdigit():
            found[pid] = (int(rank), env.get("LOCAL_RANK", env.get("SLURM_LOCALID", "")))
    # a data loader's workers (and any child) carry their rank's environment: keep the eldest
    return {pid: r for pid, r in found.items() if found.get(parent(stat(pid)), (None,))[0] != r[0]}


def blocked_threads(pid):
    count = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        text = stat(f"{pid}/task/{tid}")
        if text and text.rsplit(")", 1)[1].split()[0] == "D":
            count += 1
    return count


def main_thread_only(text, pid):
    """The dump's header and the thread whose id is the pid (the main thread), cut to MAX_DUMP."""
    lines, keep, out = text.splitlines(), True, []
    for line in lines:
        if line.startswith("Thread "):
            keep = line.split()[1] in (str(pid), hex(pid))
        if keep:
            out.append(line[:400])
    return "\n".join(out)[:MAX_DUMP]


def dump(pyspy, pid, *mode):
    try:
        out = subprocess.run([pyspy, "dump", "--full-filenames", *mode, "--pid", str(pid)],
                             capture_output=True, text=True, timeout=PYSPY_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"py-spy {' '.join(mode)}: {type(exc).__name__}: {exc}"[:300]
    if out.returncode != 0:
        said = " ".join((out.stderr or out.stdout).split())
        return None, f"py-spy {' '.join(mode)}: {said[:300]}"
    return main_thread_only(out.stdout, pid), ""


def read_rank(pyspy, pid):
    text, error = dump(pyspy, pid, "--nonblocking")
    native, native_error = dump(pyspy, pid, "--native")
    if native:
        return native, "native", ""
    return text, "nonblocking" if text else "", "; ".join(e for e in (error, native_error) if e)


def main():
    job_id, pyspy = sys.argv[1], sys.argv[2]
    started = time.monotonic()
    found = ranks(job_id)
    first = {pid: stat(pid) for pid in found}
    time.sleep(INTERVAL_S)
    second = {pid: stat(pid) for pid in found}
    with ThreadPoolExecutor(max_workers=min(8, len(found) or 1)) as pool:
        dumps = dict(zip(found, pool.map(lambda pid: read_rank(pyspy, pid), found)))
    out = []
    for pid, (rank, local_rank) in sorted(found.items(), key=lambda kv: kv[1][0]):
        text, mode, error = dumps[pid]
        out.append({"rank": rank, "local_rank": local_rank, "pid": pid, "stat": [first[pid], second[pid]],
                    "interval_s": INTERVAL_S, "blocked_threads": blocked_threads(pid), "dump": text,
                    "dump_mode": mode, "error": error})
    print(json.dumps({"node": socket.gethostname(), "ranks": out,
                      "elapsed_s": round(time.monotonic() - started, 3)}))


if __name__ == "__main__":
    main()
