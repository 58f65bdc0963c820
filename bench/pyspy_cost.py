"""What reading a rank with py-spy costs the rank (docs/architecture.md, "Hang evidence"): a training-like
loop of steps of known length runs; py-spy dumps it, as the hang collector does (`--nonblocking`, then
`--native`), every --every seconds; each step's wall time is recorded, and the steps during which a dump
ran are compared with the others. (The collector reads a rank once per hang; this reads it far more
often, so that the pause shows.)

    python bench/pyspy_cost.py [--pyspy .venv/bin/py-spy] [--seconds 20] [--every 0.5] [--json FILE]

The loop is plain Python arithmetic (the GIL held, as in a rank's Python); with --torch PYTHON it is a
small torch matmul loop under that interpreter instead (torch's native frames, as in a real rank).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOOP = r'''
import sys, time
steps, out = [], sys.argv[1]
if sys.argv[2] == "torch":
    import torch
    torch.set_num_threads(1)
    a = torch.randn(256, 256)
    def step():
        for _ in range(8):
            a @ a
else:
    def step():
        s = 0
        for i in range(60000):
            s += i * i
end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    t0 = time.monotonic(); step(); steps.append((t0, time.monotonic() - t0))
open(out, "w").write(repr(steps))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pyspy", default=str(Path(sys.executable).with_name("py-spy")))
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--every", type=float, default=0.5)
    ap.add_argument("--torch", default="", help="a Python with torch: a torch loop under it")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "steps"
        python = args.torch or sys.executable
        loop = subprocess.Popen([python, "-c", LOOP, str(out), "torch" if args.torch else "plain", str(args.seconds)])
        time.sleep(min(3.0, args.seconds / 4))  # imports, warm-up
        dumps: list[tuple[str, float, float]] = []
        while loop.poll() is None:
            for mode in ("--nonblocking", "--native"):
                t0 = time.monotonic()
                rc = subprocess.run([args.pyspy, "dump", "--full-filenames", mode, "--pid", str(loop.pid)],
                                    capture_output=True, timeout=10).returncode
                if rc == 0:
                    dumps.append((mode, t0, time.monotonic()))
            time.sleep(args.every)
        loop.wait()
        steps = eval(out.read_text())  # noqa: S307 - our own loop's repr of floats
    def hit(t0: float, took: float, mode: str) -> bool:
        return any(m == mode and a < t0 + took and b > t0 for m, a, b in dumps)
    result = {"steps": len(steps), "dumps": {m: sum(1 for d in dumps if d[0] == m) for m in ("--nonblocking", "--native")}}
    clean = [took for t0, took in steps if not hit(t0, took, "--nonblocking") and not hit(t0, took, "--native")]
    result["step_ms_median_without_dump"] = round(statistics.median(clean) * 1000, 2)
    result["step_ms_p99_without_dump"] = round(sorted(clean)[int(len(clean) * 0.99)] * 1000, 2)
    result["step_ms_max_without_dump"] = round(max(clean) * 1000, 2)  # the machine's own noise
    for mode in ("--nonblocking", "--native"):
        during = [took for t0, took in steps if hit(t0, took, mode)]
        if during:
            result[f"step_ms_median_during{mode[1:].replace('-', '_')}"] = round(statistics.median(during) * 1000, 2)
            result[f"step_ms_max_during{mode[1:].replace('-', '_')}"] = round(max(during) * 1000, 2)
        took = [b - a for m, a, b in dumps if m == mode]
        result[f"dump_ms_median{mode[1:].replace('-', '_')}"] = round(statistics.median(took) * 1000, 1) if took else None
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
