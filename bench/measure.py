"""What the benches measure with, beside the code they time: processes' CPU and memory, the machine, the code's
commit, a running stack's settings and a service's metrics (bench/load.py, failure_cpu.py, ingest_cpu.py)."""

from __future__ import annotations

import os
import platform
import subprocess
import time
import urllib.request
from pathlib import Path




def say(text: str) -> None:
    print(f"[load {time.strftime('%H:%M:%S')}] {text}", flush=True)


# -- the machine and its processes ---------------------------------------------------------------

def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_ticks(pid: int, kernel_only: bool = False) -> int:
    """CPU ticks of a process (user and system; `kernel_only`: system alone); for Postgres' postmaster,
    of it and its backends."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        own = int(fields[12]) if kernel_only else int(fields[11]) + int(fields[12])
    except (OSError, IndexError):
        return 0
    if pid == POSTMASTER["pid"]:
        own += sum(cpu_ticks(child) for child in _children(pid))
    return own


POSTMASTER = {"pid": None}


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def postgres_pid(database_url: str) -> int | None:
    """The postmaster listening on the ledger's port (backends' CPU is counted with it)."""
    port = database_url.rsplit(":", 1)[1].split("/", 1)[0]
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"postgres") and f"-p {port}".encode() in b" ".join(args):
            POSTMASTER["pid"] = int(cmdline.parent.name)
            return POSTMASTER["pid"]
    return None


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + parts[4]
    return sum(parts) - idle, sum(parts)


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    mem = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
               if line.startswith("MemTotal"))
    return {"cpus": os.cpu_count(), "cpu_model": model, "memory_gib": round(mem / 2**20, 1),
            "python": platform.python_version(), "kernel": platform.release(),
            "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3]}


def code() -> dict:
    """The relaunch code measured: the checkout the detector's package is imported from (PYTHONPATH may
    point at another one, as for a run of an earlier commit beside this one) and its commit."""
    import relaunch.detector

    here = Path(relaunch.detector.__file__).resolve()
    root = next((p for p in here.parents if (p / ".git").exists()), here.parent)
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    return {"checkout": str(root), "commit": commit, "uncommitted_changes": dirty}


class CpuMeter:
    """CPU used per process (in cores) between two readings, and by the whole machine."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids, self.hz = pids, os.sysconf("SC_CLK_TCK")
        self.reset()

    def reset(self) -> None:
        self.t0, self.ticks0, self.machine0 = time.monotonic(), {n: cpu_ticks(p) for n, p in self.pids.items()}, \
            machine_busy()

    def read(self) -> dict:
        elapsed = max(time.monotonic() - self.t0, 1e-6)
        out = {n: round((cpu_ticks(p) - self.ticks0[n]) / self.hz / elapsed, 2) for n, p in self.pids.items()}
        busy, total = machine_busy()
        out["machine_busy_cores"] = round((busy - self.machine0[0]) / max(total - self.machine0[1], 1)
                                          * (os.cpu_count() or 1), 2)
        out["others"] = round(out["machine_busy_cores"] - sum(v for k, v in out.items()
                                                              if k != "machine_busy_cores"), 2)
        return out


def pid_of(run: Path, name: str) -> int | None:
    try:
        pid = int((run / "pids" / f"{name}.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if Path(f"/proc/{pid}").exists() else None


def load_env(run: Path) -> dict[str, str]:
    env = {}
    for line in (run / "env").read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line[len("export "):].split("=", 1)
            if key.startswith("RELAUNCH_") or key == "SLURM_CONF":
                env[key] = value
    return env


def metric(port: int, name: str, labels: dict[str, str]) -> float:
    """Sum of a Prometheus counter over the series that carry `labels`."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


# -- the run ---------------------------------------------------------------------------------------
