"""`relaunch classify` against `grep -E -c -f` of 30 common failure patterns, on a realistic training log.

Writes the log with bench/make_log.py when it is missing (512 MiB by default), converts every
signature of the built-in catalogue to a POSIX ERE line for grep (from the pattern's parse tree; where
a construct has no ERE equivalent, the pattern's required literals stand in for it), then times, each
several times with the page cache warm, whole processes:

- `relaunch classify --json LOG` (the engine it picks by itself, and the pure-Python engine once);
- `grep -E -c -f bench/common_failures.ere LOG` (30 common failure patterns, LC_ALL=C), the target:
  classify must be at least as fast, whole process, median of --runs (wall clock; CPU seconds beside
  it, the figure that a shared machine disturbs least), with the same output as the pure-Python engine;
- `grep -E -i -c -f PATTERNS LOG` over the whole catalogue converted to ERE, for reference only
  (--catalogue-grep; GNU grep's DFA gives up on its bounded repeats and it takes minutes);
- `grep -F -i -c -f LITERALS LOG` over the catalogue's required literals, a stronger reference
  (it finds candidate lines only, as the engine's prefilter does);
- `relaunch classify` on a one-line file: the command's start-up time (target: under 0.2 s).

grep runs with LC_ALL=C by default (byte semantics, its fastest mode; --grep-locale changes it) and
counts matching lines (-c), so it reads the whole file however early the first match comes. A grep
run longer than --grep-timeout is stopped and reported as at least that long; grep is also timed on
the log's first --grep-sample-mib MiB, for a throughput and a projected time for the whole log (GNU
grep's DFA gives up on this many bounded repeats and falls back to a slow matcher). Prints one JSON object;
exits 1 when classify is slower than grep, or did not find the planted failures (--no-target: only
the latter).

    python bench/scan_speed.py [--log /tmp/train-512.log] [--mib 512] [--runs 3] [--python-runs 1]
                               [--catalogue-grep] [--before OTHER/.venv/bin/relaunch] [--no-target]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from re import _constants as _c
from re import _parser as _p

from relaunch.common.diagnosis.pattern_analysis import required_literals
from relaunch.common.diagnosis.signatures import builtin_catalogue

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_log  # noqa: E402

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
COMMON_PATTERNS = Path(__file__).resolve().parent / "common_failures.ere"
PLANTED = {"signature": "gpu_ecc_uncorrectable", "action": "restart_excluding", "rank": 12}

# ---------------------------------------------------------------------------------------------------
# The catalogue as POSIX ERE. Lazy repeats become greedy (the same lines match), named groups plain
# groups, and the case follows grep's -i. `\b` is GNU grep's (it has no POSIX spelling).

_SPECIAL = set(".[]()*+?{}|^$\\")
_CLASSES = {"CATEGORY_DIGIT": "0-9", "CATEGORY_SPACE": "[:space:]", "CATEGORY_WORD": "[:alnum:]_"}
_NEGATED = {"CATEGORY_NOT_DIGIT": "0-9", "CATEGORY_NOT_SPACE": "[:space:]", "CATEGORY_NOT_WORD": "[:alnum:]_"}
_ANCHORS = {"AT_BEGINNING": "^", "AT_BEGINNING_STRING": "^", "AT_END": "$", "AT_END_STRING": "$",
            "AT_BOUNDARY": "\\b", "AT_NON_BOUNDARY": "\\B"}


class NoEquivalent(ValueError):
    pass


def ere(source: str) -> str:
    """The pattern in ERE, or NoEquivalent (lookarounds, back-references, atomic groups...)."""
    return _sequence(list(_p.parse(source)))


def _sequence(items) -> str:
    return "".join(_item(str(op), av) for op, av in items)


def _item(kind: str, av) -> str:
    if kind == "LITERAL":
        if av == ord("\n"):
            raise NoEquivalent("a newline")
        return "\\" + chr(av) if chr(av) in _SPECIAL else chr(av)
    if kind == "NOT_LITERAL":
        return _bracket([(_c.NEGATE, None), (_c.LITERAL, av)])
    if kind == "ANY":
        return "."
    if kind == "IN":
        return _bracket(av)
    if kind in ("MAX_REPEAT", "MIN_REPEAT"):
        low, high, body = av
        inner = _sequence(list(body))
        if len(body) != 1 or str(body[0][0]) not in ("LITERAL", "NOT_LITERAL", "ANY", "IN", "SUBPATTERN", "BRANCH"):
            inner = f"({inner})"
        if high == _c.MAXREPEAT:
            return inner + ("*" if low == 0 else "+" if low == 1 else f"{{{low},}}")
        return inner + ("?" if (low, high) == (0, 1) else f"{{{low}}}" if low == high else f"{{{low},{high}}}")
    if kind == "SUBPATTERN":
        return "(" + _sequence(list(av[3])) + ")"
    if kind == "BRANCH":
        return "(" + "|".join(_sequence(list(alt)) for alt in av[1]) + ")"
    if kind == "AT":
        return _ANCHORS[str(av)]
    raise NoEquivalent(kind)


def _bracket(members) -> str:
    """A bracket expression: `]` first, `^` not first, `-` last; a newline member is left out (grep
    matches lines, which hold none)."""
    negate, parts, close, caret, dash = False, [], "", "", ""
    for op, value in members:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "CATEGORY" and str(value) in _CLASSES:
            parts.append(_CLASSES[str(value)])
        elif name == "CATEGORY" and str(value) in _NEGATED and len(members) == 1:
            return f"[^{_NEGATED[str(value)]}]"
        elif name == "CATEGORY" and str(value) in _NEGATED and len(members) == 2 and str(members[0][0]) == "NEGATE":
            return f"[{_NEGATED[str(value)]}]"
        elif name == "LITERAL":
            ch = chr(value)
            if ch == "\n":
                continue
            if ch == "]":
                close = "]"
            elif ch == "-":
                dash = "-"
            elif ch == "^":
                caret = "^"
            elif ch == "[":
                parts.append("[.[.]")
            else:
                parts.append(ch)
        elif name == "RANGE":
            low, high = chr(value[0]), chr(value[1])
            if set(low + high) & set("]^-["):
                raise NoEquivalent("a range bounded by a bracket metacharacter")
            parts.append(f"{low}-{high}")
        else:
            raise NoEquivalent(f"a class holding {name}")
    body = close + "".join(parts) + caret + dash
    if not body:
        if negate:
            return "."  # [^\n]: any character of a line
        raise NoEquivalent("an empty class")
    if body == "^" and not negate:
        return "\\^"
    return "[" + ("^" if negate else "") + body + "]"


def _escaped(literal: str) -> str:
    return "".join("\\" + ch if ch in _SPECIAL else ch for ch in literal)


def write_pattern_files(folder: Path) -> dict:
    """PATTERNS (ERE, one line per pattern or per required literal) and LITERALS (grep -F)."""
    lines, literals, exact, fallbacks = [], set(), 0, []
    signatures = builtin_catalogue().signatures
    for sig in signatures:
        words = required_literals(sig.pattern.pattern) or frozenset()
        literals |= words
        try:
            lines.append(ere(sig.pattern.pattern))
            exact += 1
        except NoEquivalent as why:
            fallbacks.append({"signature": sig.id, "why": str(why), "literals": len(words)})
            lines += sorted(_escaped(word) for word in words)
    patterns, literal_file = folder / "scan_speed.patterns.ere", folder / "scan_speed.literals.txt"
    patterns.write_text("\n".join(lines) + "\n")
    literal_file.write_text("\n".join(sorted(literals)) + "\n")
    return {"signatures": len(signatures), "converted_exactly": exact, "fell_back_to_literals": fallbacks,
            "ere_lines": len(lines), "file": str(patterns), "literals": len(literals),
            "literal_file": str(literal_file)}


# ---------------------------------------------------------------------------------------------------
# Timing whole processes.

def timed(argv: list[str], env: dict | None = None, timeout: float | None = None) -> dict:
    """Wall clock, CPU (user + system) and peak RSS of one child process, from wait4 (its own usage,
    not the running maximum over all children that RUSAGE_CHILDREN keeps)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=errors, env=env)
        killer = threading.Timer(timeout, child.kill) if timeout else None
        if killer:
            killer.start()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        if killer:
            killer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        if os.WIFSIGNALED(status) and timeout and wall >= timeout:
            return {"wall_s": round(wall, 3), "timed_out": True}
        out.seek(0)
        errors.seek(0)
        return {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
                "rss_mib": round(usage.ru_maxrss / 1024, 1), "rc": child.returncode,
                "stdout": out.read().decode(errors="replace"), "stderr": errors.read().decode(errors="replace")[-2000:]}


def runs(argv: list[str], count: int, size: int, env: dict | None = None, timeout: float | None = None) -> dict:
    results = []
    for _ in range(count):
        results.append(timed(argv, env, timeout))
        if results[-1].get("timed_out"):
            return {"timed_out_after_s": results[-1]["wall_s"], "runs": len(results)}
    return summary(results, size)


def side_by_side(commands: list[tuple[list[str], dict | None]], count: int, size: int,
                 timeout: float | None = None) -> list[dict]:
    """Each command once per round, `count` rounds: on a shared machine, the load that slows one slows
    the others alike, so their ratio holds where their times do not."""
    results: list[list[dict]] = [[] for _ in commands]
    for _ in range(count):
        for done, (argv, env) in zip(results, commands):
            done.append(timed(argv, env, timeout))
    return [summary(done, size) if not any(r.get("timed_out") for r in done) else
            {"timed_out_after_s": max(r["wall_s"] for r in done), "runs": len(done)} for done in results]


def summary(results: list[dict], size: int) -> dict:
    walls = [r["wall_s"] for r in results]
    best = min(walls)
    return {"wall_s": walls, "wall_s_best": best, "wall_s_median": round(statistics.median(walls), 3),
            "cpu_s_median": round(statistics.median(r["cpu_s"] for r in results), 3),
            "peak_rss_mib": max(r["rss_mib"] for r in results), "mb_per_s": round(size / 1e6 / best, 3),
            "rc": results[-1]["rc"], "stdout": results[-1]["stdout"], "stderr": results[-1]["stderr"]}


def engine_in_use() -> str:
    probe = "from relaunch.common.diagnosis.offline import load_scanner; print(load_scanner().engine)"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


def planted_found(stdout: str) -> bool:
    try:
        anomaly = json.loads(stdout.splitlines()[0])["anomaly"]
    except (IndexError, ValueError, KeyError):
        return False
    return bool(anomaly) and anomaly["signature"] == PLANTED["signature"] and \
        anomaly["action"] == PLANTED["action"] and PLANTED["rank"] in anomaly["ranks"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", type=Path, default=Path("/tmp/train-512.log"))
    ap.add_argument("--mib", type=int, default=512, help="size of the log written when it is missing")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--python-runs", type=int, default=1, help="runs of the pure-Python engine (0: none)")
    ap.add_argument("--grep-timeout", type=float, default=60.0)
    ap.add_argument("--grep-locale", default="C")
    ap.add_argument("--grep-sample-mib", type=float, default=0.25)
    ap.add_argument("--patterns", type=Path, default=COMMON_PATTERNS, help="the target grep's ERE file")
    ap.add_argument("--catalogue-grep", action="store_true", help="also time grep over the whole catalogue as ERE")
    ap.add_argument("--before", type=Path, help="another `relaunch` executable (e.g. main's checkout's "
                    ".venv/bin/relaunch) timed in the same rounds: before and after in one run")
    ap.add_argument("--no-target", action="store_true", help="exit 0 even when classify is slower than grep")
    args = ap.parse_args()

    if not args.log.is_file() or args.log.stat().st_size < args.mib * 2**20 * 0.99:
        make_log.write(args.log, args.mib)
    size = args.log.stat().st_size
    with open(args.log, "rb") as warm:  # the page cache warm for everyone: read the whole file once
        while warm.read(16 << 20):
            pass
    patterns = write_pattern_files(args.log.parent)
    relaunch = str(BIN / "relaunch")
    grep = shutil.which("grep") or "grep"
    grep_env = {**os.environ, "LC_ALL": args.grep_locale}
    tiny = args.log.parent / "scan_speed.tiny.log"
    tiny.write_text("step 1 loss 2.3\n")

    # Bytecode compiled as `pip install` compiles it (a checkout run with PYTHONDONTWRITEBYTECODE=1 would
    # otherwise compile relaunch's modules again in every timed start: 20-30 ms of each)
    bytecode = all(compileall.compile_dir(str(REPO / "libs" / lib / "src"), quiet=1) for lib in ("common", "client"))
    runs([relaunch, "classify", "--json", str(tiny)], 1, 1)  # builds the engine's cache if it is cold
    startup = runs([relaunch, "classify", "--json", str(tiny)], args.runs, 1)
    common = [grep, "-E", "-c", "-f", str(args.patterns), str(args.log)]
    rounds = [([relaunch, "classify", "--json", str(args.log)], None), (common, grep_env)]
    if args.before:
        rounds += [([str(args.before), "classify", "--json", str(args.log)], None),
                   ([str(args.before), "classify", "--json", str(tiny)], None)]
    classify, grep_common, *before = side_by_side(rounds, args.runs, size, args.grep_timeout)
    grep_ere = grep_sample = grep_literals = None
    if args.catalogue_grep:
        grep_ere = runs([grep, "-E", "-i", "-c", "-f", patterns["file"], str(args.log)], args.runs, size,
                        grep_env, args.grep_timeout)
        sample = args.log.parent / "scan_speed.sample.log"
        with open(args.log, "rb") as whole:
            head = whole.read(int(args.grep_sample_mib * 2**20))
        sample.write_bytes(head[: head.rfind(b"\n") + 1])
        grep_sample = runs([grep, "-E", "-i", "-c", "-f", patterns["file"], str(sample)], 1,
                           sample.stat().st_size, grep_env, args.grep_timeout)
        if "wall_s_best" in grep_sample:
            grep_sample["projected_whole_log_s"] = round(grep_sample["wall_s_best"] * size / sample.stat().st_size)
            grep_sample["bytes"] = sample.stat().st_size
        grep_literals = runs([grep, "-F", "-i", "-c", "-f", patterns["literal_file"], str(args.log)], args.runs,
                             size, grep_env, args.grep_timeout)
    python_engine = (runs([relaunch, "classify", "--json", "--engine", "python", str(args.log)], args.python_runs,
                          size) if args.python_runs else None)

    found = planted_found(classify["stdout"])
    grep_wall = grep_common.get("wall_s_median") or grep_common["timed_out_after_s"]
    ratio = classify["wall_s_median"] / grep_wall
    target_met = ratio <= 1.0 and (python_engine is None or python_engine["stdout"] == classify["stdout"])
    report = {
        "log": {"path": str(args.log), "bytes": size, "mib": round(size / 2**20, 1)},
        "engine": engine_in_use(), "cpus": len(os.sched_getaffinity(0)), "load_average": os.getloadavg(),
        "grep_locale": args.grep_locale, "bytecode_compiled": bytecode, "patterns": patterns,
        "classify": _public(classify), "classify_startup_tiny_file": _public(startup),
        "classify_python_engine": _public(python_engine) if python_engine else None,
        "grep_common_patterns": {"file": str(args.patterns), **_public(grep_common)},
        "ratio_classify_over_grep": round(ratio, 3),
        "ratio_classify_over_grep_cpu": (round(classify["cpu_s_median"] / grep_common["cpu_s_median"], 3)
                                         if grep_common.get("cpu_s_median") else None),
        "startup_s_median": startup["wall_s_median"], "startup_cpu_s_median": startup["cpu_s_median"],
        "planted_failures_found": found, "target_met": target_met,
        "python_engine_same_output": python_engine["stdout"] == classify["stdout"] if python_engine else None,
    }
    if before:
        whole, start = before
        report["before"] = {
            "relaunch": str(args.before), "classify": _public(whole), "classify_startup_tiny_file": _public(start),
            "same_output": whole["stdout"] == classify["stdout"],
            "ratio_classify_over_grep": round(whole["wall_s_median"] / grep_wall, 3),
            "ratio_classify_over_grep_cpu": round(whole["cpu_s_median"] / grep_common["cpu_s_median"], 3),
            "ratio_after_over_before": round(classify["wall_s_median"] / whole["wall_s_median"], 3),
            "ratio_after_over_before_cpu": round(classify["cpu_s_median"] / whole["cpu_s_median"], 3)}
    if args.catalogue_grep:
        literal_wall = grep_literals.get("wall_s_best") or grep_literals["timed_out_after_s"]
        report.update({
            "grep_catalogue_ere": _public(grep_ere), "grep_catalogue_ere_on_sample": _public(grep_sample),
            "grep_catalogue_literals": _public(grep_literals),
            "ratio_classify_over_grep_catalogue_literals": round(classify["wall_s_best"] / literal_wall, 3)})
    print(json.dumps(report, indent=2))
    return 0 if found and (target_met or args.no_target) else 1


def _public(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("stdout", "stderr") or (k == "stderr" and v)}


if __name__ == "__main__":
    sys.exit(main())
