"""Fault injection at the load_weights level (the map stage alone): one mapping attempt by
default (upstream never retries), the opt-in retry policy, the heap fallback and its failure
(a real MemoryError included), and FaultPlan itself. The whole pipeline's faults (register,
create, deregister) are in test_load_context.py. Every case ends with clean stats (the
autouse guard checks it)."""

from __future__ import annotations

import errno
import os
import pickle
import re
import sys

import pytest
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    assert_clean,
    open_handle_count,
    run_with_little_address_space,
    stats_guard,
    write_file,
)

from mapper_impl import (
    FaultPlan,
    HeapReadError,
    MappingError,
    PlatformUnavailableError,
    RetryPolicy,
    load_weights,
    stats,
)

SIZE = 20_000
# What FaultPlan's injected errors say, in this C library's words (glibc: "Cannot allocate
# memory"; the Windows CRT: "Not enough space").
ENOMEM_TEXT = os.strerror(errno.ENOMEM)
EIO_TEXT = os.strerror(errno.EIO)


@pytest.fixture
def weights_file(tmp_path):
    path = tmp_path / "faulty.bin"
    return path, write_file(path, SIZE, seed=4)


def test_one_mapping_attempt_by_default(weights_file):
    """Upstream never retries the mapping: by default one failure is enough to fall back,
    after exactly one attempt, with its error recorded."""
    path, data = weights_file
    with load_weights(path, faults=FaultPlan(map_failures=1)) as w:
        assert (w.path_taken, w.attempts) == ("fallback", 1)
        assert len(w.errors) == 1 and w.errors[0].startswith("attempt 1:")
        assert bytes(w.buffer) == data
    assert RetryPolicy().max_attempts == 1
    assert_clean()


@pytest.mark.parametrize(("k", "max_attempts"), [(1, 3), (2, 3), (4, 5), (1, 2)])
def test_fewer_failures_than_attempts_ends_mapped(weights_file, k, max_attempts):
    """Opt-in retry: K < max_attempts mapping failures end "mapped" after K+1 attempts and
    record the K errors."""
    path, data = weights_file
    with load_weights(path, faults=FaultPlan(map_failures=k), max_attempts=max_attempts) as w:
        assert w.path_taken == "mapped"
        assert w.attempts == k + 1
        assert len(w.errors) == k
        for i, error in enumerate(w.errors, start=1):
            assert error.startswith(f"attempt {i}:")
            assert "injected by FaultPlan" in error
            assert ENOMEM_TEXT in error
        assert bytes(w.buffer) == data
        assert stats().live_mappings == 1
    assert_clean()


@pytest.mark.parametrize(("k", "max_attempts"), [(3, 3), (10, 3), (1, 1)])
def test_as_many_failures_as_attempts_ends_in_fallback(weights_file, k, max_attempts):
    """K >= max_attempts: every attempt fails, the load falls back to the heap and keeps
    each reason."""
    path, data = weights_file
    with load_weights(path, faults=FaultPlan(map_failures=k), max_attempts=max_attempts) as w:
        assert w.path_taken == "fallback"
        assert not w.mapped
        assert w.attempts == max_attempts
        assert len(w.errors) == max_attempts
        assert all(ENOMEM_TEXT in e for e in w.errors)
        assert bytes(w.buffer) == data
        snapshot = stats()
        assert (snapshot.live_mappings, snapshot.heap_buffers) == (0, 1)
    assert_clean()


def test_no_fallback_raises_mapping_error(weights_file):
    """fallback_to_heap=False turns exhausted retries into a MappingError that keeps the OS
    error code and the last underlying error."""
    path, _ = weights_file
    with pytest.raises(MappingError, match=r"after 1 attempt\(s\)"):
        load_weights(path, faults=FaultPlan(map_failures=1), fallback_to_heap=False)
    with pytest.raises(MappingError, match=r"after 3 attempt\(s\)") as info:
        load_weights(path, faults=FaultPlan(map_failures=3), fallback_to_heap=False, max_attempts=3)
    err = info.value
    assert "attempt 3" in str(err)
    assert err.os_error == errno.ENOMEM
    assert isinstance(err.__cause__, MappingError)
    assert_clean()


def test_no_fallback_still_maps_when_a_retry_succeeds(weights_file):
    """fallback_to_heap=False does not stop the retry policy from succeeding."""
    path, data = weights_file
    plan = FaultPlan(map_failures=2)
    with load_weights(path, faults=plan, fallback_to_heap=False, max_attempts=3) as w:
        assert (w.path_taken, w.attempts) == ("mapped", 3)
        assert len(w.errors) == 2 and all(ENOMEM_TEXT in e for e in w.errors), w.errors
        assert bytes(w.buffer) == data and (stats().heap_buffers, stats().live_mappings) == (0, 1)


def test_heap_read_failure_after_mapping_failure(weights_file):
    """When the fallback read fails too, HeapReadError carries every mapping error."""
    path, _ = weights_file
    plan = FaultPlan(map_failures=3, heap_read_failures=1)
    with pytest.raises(HeapReadError) as info:
        load_weights(path, faults=plan, max_attempts=3)
    message = str(info.value)
    assert EIO_TEXT in message
    assert "after mapping failed" in message
    for attempt in (1, 2, 3):
        assert f"attempt {attempt}:" in message
    assert ENOMEM_TEXT in message
    assert_clean()


MEMORY_ERROR_CHILD = """
    try:
        m.load_weights(path, faults=m.FaultPlan(map_failures=1))
    except m.HeapReadError as err:
        chain, cause = [], err
        while cause is not None:
            chain.append(type(cause).__name__)
            cause = cause.__cause__
        print(">".join(chain), err, sep="|")
    print("clean", m.stats().is_clean(), sep="|")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux only")
def test_heap_memory_error_keeps_the_mapping_errors(tmp_path):
    """A real MemoryError (the address-space limit refuses the 64 MiB copy) after a mapping
    failure is a HeapReadError that still carries the mapping error (issue 11), in a child so
    the limit touches nothing else."""
    _, (first, clean) = run_with_little_address_space(MEMORY_ERROR_CHILD, tmp_path)
    chain, message = first.split("|")
    assert chain == "HeapReadError>HeapReadError>MemoryError"
    assert "no memory for a 67108864-byte copy" in message
    assert "after mapping failed: attempt 1:" in message and ENOMEM_TEXT in message
    assert clean == "clean|True"


def test_heap_read_failure_on_disabled_path(weights_file):
    """With mapping disabled, a failing heap read is a plain HeapReadError (no mapping
    errors to report)."""
    path, _ = weights_file
    with pytest.raises(HeapReadError, match=re.escape(EIO_TEXT)) as info:
        load_weights(path, disable_file_mapped_weights="1", faults=FaultPlan(heap_read_failures=1))
    assert "after mapping failed" not in str(info.value)
    assert_clean()


def test_heap_read_failures_do_not_touch_a_successful_mapping(weights_file):
    """heap_read_failures only matter when the heap is used: a load that maps takes one
    attempt, records no error, serves the file's bytes from the mapping (a live view, no heap
    copy), while the same plan fails the very next load that does read into the heap."""
    path, data = weights_file
    plan = FaultPlan(heap_read_failures=5)
    with load_weights(path, faults=plan) as w:
        assert (w.path_taken, w.attempts, w.errors) == ("mapped", 1, [])
        assert w.base_address is not None
        assert bytes(w.buffer) == data
        during = stats()
        assert (during.live_mappings, during.mapped_bytes) == (1, SIZE)
        assert (during.heap_buffers, during.heap_bytes) == (0, 0)
    assert_clean()
    with pytest.raises(HeapReadError, match=re.escape(EIO_TEXT)):  # the plan was armed all along
        load_weights(path, disable_file_mapped_weights="1", faults=plan)


def test_platform_unavailable_is_not_retried(weights_file):
    """Mapping unavailable on the platform: one attempt, no retry, then the heap fallback."""
    path, data = weights_file
    plan = FaultPlan(platform_unavailable=True)
    with load_weights(path, faults=plan, max_attempts=5) as w:
        assert w.path_taken == "fallback"
        assert w.attempts == 1
        assert len(w.errors) == 1 and "unavailable" in w.errors[0]
        assert bytes(w.buffer) == data
    with pytest.raises(MappingError, match=r"after 1 attempt\(s\)") as info:
        load_weights(path, faults=FaultPlan(platform_unavailable=True), fallback_to_heap=False)
    assert isinstance(info.value.__cause__, PlatformUnavailableError)


def test_retry_policy_rules():
    """RetryPolicy retries MappingError up to max_attempts, never PlatformUnavailableError;
    the default policy never retries."""
    assert not RetryPolicy().should_retry(MappingError("x"), 1)
    policy = RetryPolicy(max_attempts=3)
    assert policy.should_retry(MappingError("x"), 1)
    assert policy.should_retry(MappingError("x"), 2)
    assert not policy.should_retry(MappingError("x"), 3)
    assert not policy.should_retry(PlatformUnavailableError("x"), 1)


@pytest.mark.parametrize("backoff", [-1.0, float("nan"), "0.1"])
def test_retry_policy_rejects_bad_backoff(weights_file, backoff):
    """A negative / NaN / non-number backoff is refused up front, not mid-retry by sleep()."""
    path, _ = weights_file
    with pytest.raises(ValueError, match="backoff_s"):
        RetryPolicy(3, backoff)
    with pytest.raises(ValueError, match="backoff_s"):
        load_weights(path, faults=FaultPlan(map_failures=1), backoff_s=backoff, max_attempts=2)
    assert_clean()


def test_backoff_is_applied_between_attempts(weights_file, monkeypatch):
    """backoff_s waits backoff_s * attempts_made between attempts."""
    path, _ = weights_file
    sleeps = []
    monkeypatch.setattr("mapper_impl._weights.time.sleep", sleeps.append)
    with load_weights(path, faults=FaultPlan(map_failures=2), backoff_s=0.5, max_attempts=3) as w:
        assert w.attempts == 3
    assert sleeps == [0.5, 1.0]


@pytest.mark.parametrize(
    "plan",
    [
        FaultPlan(),
        FaultPlan(map_failures=1),
        FaultPlan(map_failures=3),
        FaultPlan(platform_unavailable=True),
        FaultPlan(map_failures=1, heap_read_failures=0),
    ],
    ids=repr,
)
def test_a_plan_is_deterministic(weights_file, plan):
    """The same plan gives the same outcome every time (counters live in a fresh cursor per
    load, not in the plan), with and without the opt-in retry."""
    path, _ = weights_file
    for attempts in (1, 3):
        outcomes = []
        for _ in range(3):
            with load_weights(path, faults=plan, max_attempts=attempts) as w:
                outcomes.append((w.path_taken, w.attempts, tuple(w.errors), bytes(w.region(0, 8))))
            assert_clean()
        assert outcomes[0] == outcomes[1] == outcomes[2]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"map_failures": -1},
        {"register_failures": -2},
        {"create_failures": -1},
        {"deregister_failures": -3},
        {"heap_read_failures": -1},
        {"map_failures": True},
        {"register_failures": False},
        {"create_failures": 1.0},
        {"deregister_failures": "1"},
        {"heap_read_failures": 1.0},
        {"map_failures": "1"},
        {"platform_unavailable": "no"},
        {"platform_unavailable": 1},
        {"platform_unavailable": None},
    ],
)
def test_fault_plan_validation(kwargs):
    """Counts must be ints >= 0 (not bools); platform_unavailable must be a real bool:
    a truthy "no" silently breaking mapping would fool a nightly run."""
    with pytest.raises(ValueError, match="FaultPlan"):
        FaultPlan(**kwargs)


def test_fault_plan_is_plain_picklable_configuration():
    """A plan is frozen, hashable and survives pickling (it travels in worker specs)."""
    plan = FaultPlan(map_failures=2, heap_read_failures=1, deregister_failures=3)
    assert pickle.loads(pickle.dumps(plan)) == plan
    assert plan.to_dict() == {
        "map_failures": 2,
        "register_failures": 0,
        "create_failures": 0,
        "deregister_failures": 3,
        "heap_read_failures": 1,
        "register_at": 0,
        "late_release": "",
        "platform_unavailable": False,
    }
    with pytest.raises(AttributeError):
        plan.map_failures = 5
    assert hash(plan) == hash(FaultPlan(map_failures=2, heap_read_failures=1, deregister_failures=3))
    with pytest.raises(TypeError):
        FaultPlan(region_failures=1)  # regions are slices of one view now: nothing to fail


def test_failed_attempts_leak_no_descriptors(weights_file):
    """Every failed attempt closes the file it opened."""
    path, _ = weights_file
    before = open_handle_count()
    for _ in range(20):
        load_weights(path, faults=FaultPlan(map_failures=3), max_attempts=3).close()
        with pytest.raises(MappingError):
            load_weights(path, faults=FaultPlan(map_failures=3), fallback_to_heap=False)
    assert open_handle_count() == before
    assert_clean()
