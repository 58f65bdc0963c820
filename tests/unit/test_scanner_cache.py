"""scanner_cache: the scanner `relaunch classify` keeps between runs gives the fresh scanner's
results, is rebuilt when its inputs change, and a tampered file runs nothing."""

import os
import pickle

from relaunch.common.diagnosis import scanner_cache
from relaunch.common.diagnosis.scanning import scanner_for
from relaunch.common.diagnosis.signatures import builtin_catalogue

LINES = ["[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB.",
         "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
         "srun: error: node7: task 3: Exited with exit code 1", "step 10 loss 2.1", "Segmentation fault (core dumped)"]


def _verdicts(scanner):
    return [(m.signature.id, m.nodes, m.ranks, m.text) for m in scanner.scan(LINES)]


def test_a_cached_scanner_matches_as_the_fresh_one(tmp_path):
    scanner_cache._LOADED.clear()
    first = scanner_cache.load([], tmp_path)
    assert len(list(tmp_path.glob("*.pickle"))) == 1
    scanner_cache._LOADED.clear()
    again = scanner_cache.load([], tmp_path)
    assert again is not first and isinstance(again.catalogue.signatures[0].pattern, scanner_cache.LazyPattern)
    assert _verdicts(again) == _verdicts(first) == _verdicts(scanner_for(builtin_catalogue()))
    assert [s.id for s in again.catalogue.signatures] == [s.id for s in builtin_catalogue().signatures]
    scanner_cache._LOADED.clear()


def test_an_operator_file_changed_is_a_new_entry(tmp_path):
    ops = tmp_path / "ops.toml"
    entry = ("[[signature]]\nid = 'our_loader'\npattern = '{}'\ncategory = 'data'\n"
             "fault_domain = 'infrastructure'\naction = 'restart'\ncascade = false\nsummary = 's'\n")
    ops.write_text(entry.format("OurLoaderError"))
    scanner_cache._LOADED.clear()
    cache = tmp_path / "cache"
    assert [m.signature.id for m in scanner_cache.load([str(ops)], cache).scan(["OurLoaderError: x"])] == ["our_loader"]
    ops.write_text(entry.format("TheirLoaderError"))
    scanner_cache._LOADED.clear()
    assert [m.signature.id for m in scanner_cache.load([str(ops)], cache).scan(["OurLoaderError: x"])] != ["our_loader"]
    assert len(list(cache.glob("*.pickle"))) == 2
    scanner_cache._LOADED.clear()


class _Evil:
    def __reduce__(self):
        return os.system, ("touch pwned",)


def test_a_tampered_file_runs_nothing_and_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scanner_cache._LOADED.clear()
    scanner_cache.load([], tmp_path)
    (cached,) = tmp_path.glob("*.pickle")
    cached.write_bytes(pickle.dumps(_Evil()))
    scanner_cache._LOADED.clear()
    scanner = scanner_cache.load([], tmp_path)
    assert not (tmp_path / "pwned").exists()
    assert _verdicts(scanner) == _verdicts(scanner_for(builtin_catalogue()))
    scanner_cache._LOADED.clear()
