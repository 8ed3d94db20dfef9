"""Lifecycle safety nets of mapper_impl (issue 16): a dropped load is released and counted as
leaked, a child forked while threads load does not deadlock, a kept ContextLoadError does not
pin the heap copy, and numeric arguments are refused before any work."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time

import pytest
from mapper_support import open_handle_count, stats_guard, write_file  # noqa: F401 (stats_guard: autouse)

from mapper_impl import ContextLoadError, FaultPlan, RetryPolicy, load_context, load_weights, stats

SIZE = 1 << 20


@pytest.fixture
def weights_path(tmp_path):
    path = tmp_path / "lifecycle.bin"
    write_file(path, SIZE, seed=16)
    return str(path)


def test_dropped_loads_are_released_and_counted_as_leaked(weights_path):
    """50 results of load_weights dropped without close(): before, 100 fds and 50 mappings
    stayed for the life of the process. Now the finalizer gives them back and counts them."""
    handles, leaked = open_handle_count(), stats().leaked_loads
    for _ in range(50):
        weights = load_weights(weights_path)
        assert weights.mapped
        del weights
    gc.collect()
    now = stats()
    assert now.live_mappings == 0 and now.mapped_bytes == 0, now
    assert now.leaked_loads == leaked + 50, now
    assert open_handle_count() <= handles
    with load_weights(weights_path) as weights:  # a closed load is not a leak
        assert weights.mapped
    assert stats().leaked_loads == leaked + 50


def test_a_kept_context_load_error_does_not_pin_the_heap_copy(weights_path):
    """The direct read fails in create: the error kept by the caller (with its traceback and
    the create frame that received the views) must not keep the whole-file copy alive."""

    def create(weights, views):
        raise RuntimeError("context creation refused")

    with pytest.raises(ContextLoadError) as info:
        load_context(weights_path, [(0, 4096), (8192, 4096)], create, disable_file_mapped_weights="1")
    kept = info.value
    gc.collect()
    assert stats().heap_buffers == 0, stats()
    assert stats().heap_bytes == 0
    assert "context creation refused" in str(kept)


def test_fork_while_threads_load_does_not_deadlock_the_child(weights_path):
    """Threads load and close the same file without pause while the main thread forks: a per-key
    lock held by a loading thread at fork time used to stay held in the child forever (10 of
    10 children hung). Each child must load and close the file itself and exit 0."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork() on this platform")
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        try:
            while not stop.is_set():
                with load_weights(weights_path):
                    pass
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    threads = [threading.Thread(target=churn) for _ in range(3)]
    for thread in threads:
        thread.start()
    hung = 0
    try:
        for _ in range(10):
            time.sleep(0.01)
            pid = os.fork()
            if pid == 0:  # the child: one load of the same file, then out, whatever happens
                code = 1
                try:
                    with load_weights(weights_path) as weights:
                        code = 0 if weights.mapped and weights.buffer[0:4] else 1
                finally:
                    os._exit(code)
            deadline = time.monotonic() + 20
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    assert os.waitstatus_to_exitcode(status) == 0
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    hung += 1
                    break
                time.sleep(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert hung == 0, f"{hung} of 10 forked children hung"
    assert not errors, errors


@pytest.mark.parametrize("backoff", [float("inf"), float("-inf"), float("nan"), -0.5, 1e9, True])
def test_backoff_outside_its_domain_is_refused_before_any_work(weights_path, backoff):
    before = stats()
    with pytest.raises(ValueError, match="backoff_s"):
        RetryPolicy(2, backoff)
    with pytest.raises(ValueError, match="backoff_s"):
        load_weights(weights_path, faults=FaultPlan(map_failures=1), max_attempts=2, backoff_s=backoff)
    assert stats() == before


@pytest.mark.parametrize("attempts", [0, -1, 1.5, float("inf"), 10**9, True])
def test_max_attempts_outside_its_domain_is_refused(attempts):
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(attempts)
