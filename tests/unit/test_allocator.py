"""The detector's one setting of glibc's malloc (adapters/allocator.py): set where asked and possible,
left alone where the operator set glibc's own variable or asked for glibc's dynamic threshold."""

import ctypes
import platform

import pytest

from relaunch.detector.adapters import allocator


def glibc() -> bool:
    return platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not glibc(), reason="mallopt's mmap threshold is glibc's")
def test_the_threshold_is_fixed_on_glibc(monkeypatch):
    monkeypatch.delenv(allocator.ENVIRONMENT, raising=False)
    assert allocator.fix_mmap_threshold(256 * 1024) is True
    assert allocator.fix_mmap_threshold(128 * 1024) is True  # (back to the default the detector sets)


def test_zero_leaves_the_dynamic_threshold(monkeypatch):
    calls = []
    monkeypatch.setattr(ctypes, "CDLL", lambda *a: calls.append(a))
    assert allocator.fix_mmap_threshold(0) is False and allocator.fix_mmap_threshold(-1) is False
    assert calls == [], "mallopt is not even looked up"


def test_glibcs_own_variable_wins(monkeypatch):
    monkeypatch.setenv(allocator.ENVIRONMENT, "65536")
    monkeypatch.setattr(ctypes, "CDLL", lambda *a: pytest.fail("mallopt called although the operator set it"))
    assert allocator.fix_mmap_threshold(128 * 1024) is False


def test_a_c_library_without_mallopt_is_left_alone(monkeypatch):
    monkeypatch.delenv(allocator.ENVIRONMENT, raising=False)

    class NoMallopt:
        def __init__(self, *_):
            pass

        def __getattr__(self, name):
            raise AttributeError(name)

    monkeypatch.setattr(ctypes, "CDLL", NoMallopt)
    assert allocator.fix_mmap_threshold(128 * 1024) is False
