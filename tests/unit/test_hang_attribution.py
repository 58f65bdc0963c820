"""Hang attribution from outside the job (relaunch.common.hangs): real py-spy dumps of three gloo ranks
(tests/fixtures/pyspy/README.md) read into victims, suspects, the suspect node, and whether the evidence
points at the node or at the user's code."""

from pathlib import Path

import pytest

from relaunch.common.hangs.attribution import attribute
from relaunch.common.hangs.stacks import ProcSample, RankReading, parse_dump, parse_stat, where

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pyspy"
SLEEPING = ProcSample("S", 0, 0.5)


def _dump(name: str) -> tuple[str, int]:
    text = (FIXTURES / name).read_text()
    return text, int(text.split()[1].rstrip(":"))


def _ranks(case: str, proc: dict[int, ProcSample] | None = None, suffix: str = "") -> list[RankReading]:
    out = []
    for rank in range(3):
        text, pid = _dump(f"gloo3-{case}-rank{rank}{suffix if rank == 1 else ''}.txt")
        out.append(RankReading(rank, f"node{rank + 1}", pid, text, (proc or {}).get(rank, SLEEPING)))
    return out


def test_a_rank_sleeping_in_the_training_loop_is_the_users_code():
    verdict = attribute(_ranks("sleep"))
    assert verdict.blame == "user_code"
    assert verdict.suspects == (1,) and verdict.victims == (0, 2)
    assert verdict.suspect_nodes == ()  # the user's code: no node left out
    assert verdict.place == "helper-hangs/gloo_hang.py:18 (train)"
    assert verdict.reason == ("rank 1 on node2 is in `time.sleep` at helper-hangs/gloo_hang.py:18 (train) "
                              "while ranks 0, 2 wait in all_reduce")


def test_a_rank_stuck_in_a_native_call_points_at_its_node():
    verdict = attribute(_ranks("native"))
    assert verdict.blame == "node"
    assert verdict.suspects == (1,) and verdict.suspect_nodes == ("node2",)
    assert "stuck in a native call (clock_nanosleep in libc.so.6 through ctypes)" in verdict.reason
    assert verdict.reason.endswith("while ranks 0, 2 wait in all_reduce")


def test_without_native_frames_the_same_rank_reads_as_the_users_code():
    # --nonblocking has no native frames: nothing says "native", so no node is blamed on it
    verdict = attribute(_ranks("native", suffix="-nonblocking"))
    assert verdict.suspects == (1,) and verdict.blame == "user_code" and verdict.suspect_nodes == ()


def test_uninterruptible_sleep_points_at_the_node_even_in_user_code():
    verdict = attribute(_ranks("sleep", proc={1: ProcSample("D", 0, 0.5)}))
    assert verdict.blame == "node" and verdict.suspect_nodes == ("node2",)
    assert "uninterruptible sleep (D)" in verdict.reason


def test_a_different_collective_is_the_programs_deadlock():
    verdict = attribute(_ranks("barrier"))
    assert verdict.suspects == (1,) and verdict.blame == "user_code" and verdict.suspect_nodes == ()
    assert "rank 1 on node2 is in a different collective (barrier" in verdict.reason


def test_every_rank_waiting_in_the_data_loader_blames_no_one():
    verdict = attribute(_ranks("loader"))
    assert verdict.blame == "none" and verdict.suspects == () and verdict.suspect_nodes == ()
    assert verdict.reason.startswith("no rank blamed: every rank waits in the same place (os.read at")


def test_every_rank_in_the_same_collective_blames_no_one():
    ranks = _ranks("sleep")
    ranks[1] = RankReading(1, "node2", ranks[0].pid, ranks[0].dump, SLEEPING)
    verdict = attribute(ranks)
    assert verdict.blame == "none" and verdict.victims == (0, 1, 2)
    assert "every rank waits in the same place (all_reduce)" in verdict.reason


def test_behind_on_the_collective_sequence_without_a_user_frame_is_the_node():
    ranks = _ranks("sleep")
    same = [RankReading(r, f"node{r + 1}", ranks[0].pid, ranks[0].dump, SLEEPING, 412, 411 if r != 2 else 410)
            for r in range(3)]
    verdict = attribute(same)
    assert verdict.suspects == (2,) and verdict.blame == "node" and verdict.suspect_nodes == ("node3",)
    assert "behind on the collective sequence" in verdict.reason


@pytest.mark.parametrize("unread", [0, 1])
def test_too_few_ranks_read_blames_no_one(unread):
    ranks = _ranks("native")[:2]
    ranks[unread] = RankReading(unread, f"node{unread + 1}", 1, None, None, error="py-spy timed out")
    verdict = attribute(ranks)
    assert verdict.blame == "none" and verdict.suspect_nodes == ()
    assert "only 1 of 2 ranks could be read" in verdict.reason


def test_the_dump_is_parsed_into_threads_and_frames_innermost_first():
    text, pid = _dump("gloo3-sleep-rank1.txt")
    threads = parse_dump(text)
    main = next(t for t in threads if t.tid == pid)
    assert main.name == "MainThread" and not main.active
    assert [str(f) for f in main.frames if not f.native] == [
        "train (/tmp/helper-hangs/gloo_hang.py:18)", "<module> (/tmp/helper-hangs/gloo_hang.py:28)"]
    assert main.frames[0].native and main.frames[0].func == "clock_nanosleep"
    w = where(RankReading(1, "node2", pid, text, SLEEPING))
    assert (w.kind, w.call) == ("user", "time.sleep")
    assert len(w.frames) <= 12


def test_proc_stat_is_read_after_the_command_name():
    state, ticks = parse_stat("4242 (python (x) y) S 1 2 3 4 5 6 7 8 9 10 120 30 0 0 20 0 9 0 1000")
    assert state == "S" and ticks == 150


BACKWARD = """Process 4242: python ddp_train.py
Python v3.11.7 (/venv/bin/python)

Thread 4242 (idle): "MainThread"
    _engine_run_backward (torch/autograd/graph.py:979)
    backward (torch/autograd/__init__.py:395)
    backward (torch/_tensor.py:623)
    main (scripts/ddp_train.py:79)
    <module> (scripts/ddp_train.py:120)
"""


def test_an_idle_rank_in_backward_without_native_frames_waits_with_the_ddp_victims():
    # A 2x2 DDP job under load: rank 3 stuck in a native call, ranks 1 and 2 read in DDP's reducer, and rank 0's
    # dump had no native frames: in autograd's backward, asleep, not a tick of CPU between the samples.
    native, _ = _dump("gloo3-native-rank1.txt")
    waiting, _ = _dump("gloo3-native-rank0.txt")
    readings = [RankReading(0, "node3", 4242, BACKWARD, ProcSample("S", 0, 0.5)),
                RankReading(1, "node3", 4243, waiting, SLEEPING), RankReading(2, "node4", 4244, waiting, SLEEPING),
                RankReading(3, "node4", 4245, native, SLEEPING)]
    verdict = attribute(readings)
    assert verdict.blame == "node" and verdict.suspects == (3,) and verdict.suspect_nodes == ("node4",)
    assert 0 in verdict.victims
    # The same rank using CPU is computing its backward: not a victim, so the blame is unclear (no node).
    busy = attribute([RankReading(0, "node3", 4242, BACKWARD, ProcSample("R", 40, 0.5)), *readings[1:]])
    assert 0 in busy.suspects and busy.blame == "unclear" and busy.suspect_nodes == ()
    # Computing under heavy load (a fifth of a core: 10 ticks in 0.5 s) is still computing.
    loaded = attribute([RankReading(0, "node3", 4242, BACKWARD, ProcSample("S", 10, 0.5)), *readings[1:]])
    assert 0 in loaded.suspects and loaded.blame == "unclear"


def test_a_victim_whose_background_threads_took_a_tick_is_still_idle():
    """The frameworks tier under load (ddp2, rank 1 stuck in a native call on node1): rank 0 in backward, py-spy's
    --native timed out, 1 tick of CPU in 0.5 s (the process's other threads): a victim, and node1 is blamed."""
    native, _ = _dump("gloo3-native-rank1.txt")
    readings = [RankReading(0, "node2", 4242, BACKWARD, ProcSample("S", 1, 0.5)),
                RankReading(1, "node1", 4243, native, ProcSample("S", 2, 0.5))]
    verdict = attribute(readings)
    assert verdict.blame == "node" and verdict.suspects == (1,) and verdict.suspect_nodes == ("node1",), verdict
