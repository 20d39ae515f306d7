"""The GPU timing lock (mining/gate/gpu_lock.py): exclusive across threads and processes,
reentrant within a thread (a benchmark holding it may run the gate's profile, which takes it)."""
from __future__ import annotations

import fcntl
import threading

import pytest

from mining.gate.gpu_lock import gpu_timing_lock, lock_path


def test_reentrant_in_a_thread_exclusive_across(tmp_path, monkeypatch):
    monkeypatch.delenv("SKILLS_GPU_LOCK", raising=False)
    path = lock_path(tmp_path)
    got = []

    def other():
        with gpu_timing_lock(tmp_path):
            got.append("other")

    with gpu_timing_lock(tmp_path):
        with gpu_timing_lock(tmp_path):  # the same thread again: no deadlock
            t = threading.Thread(target=other)
            t.start()
            t.join(0.5)
            assert t.is_alive() and got == []  # another thread waits
        with open(path) as fh, pytest.raises(BlockingIOError):  # still held after the inner exit
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    t.join(5)
    assert got == ["other"]
    with open(path) as fh:  # released
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_the_gate_times_under_the_lock_only_around_the_run():
    """The profile stage takes the lock itself, around the harness run: its build and input files
    are outside it (read from the code: a GPU is needed to run it)."""
    import inspect

    from mining.gate import gate

    src = inspect.getsource(gate._profile)
    lock_at = src.index("with gpu_timing_lock(")
    assert src.index("_build(") < lock_at and src.index("write_case_files(") < lock_at
    assert src.index("executor.run(") > lock_at
