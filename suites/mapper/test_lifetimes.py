"""Lifetimes: close() never unmaps memory a caller still sees, double close is harmless, use
after close is a clear error, and thousands of cycles leak neither descriptors nor memory."""

from __future__ import annotations

import gc
import pickle

import numpy as np
import pytest
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    GRANULARITY,
    assert_clean,
    open_handle_count,
    run_child,
    stats_guard,
    write_file,
)

from mapper_impl import ClosedError, MappedFile, create_mapper, load_weights, shared_users, stats

SIZE = 4 * GRANULARITY + 77


@pytest.fixture
def weights_file(tmp_path):
    path = tmp_path / "lifetimes.bin"
    return path, write_file(path, SIZE, seed=5)


def pin_numpy(weights):
    return np.frombuffer(weights.buffer, dtype=np.uint8), 0, SIZE


def pin_slice(weights):
    return weights.buffer[1000:3000], 1000, 3000


def pin_region(weights):
    return weights.region(GRANULARITY + 5, 2000), GRANULARITY + 5, GRANULARITY + 2005


def pin_numpy_of_region(weights):
    region = weights.region(3 * GRANULARITY - 10, 100)
    return np.frombuffer(region, dtype=np.uint8), 3 * GRANULARITY - 10, 3 * GRANULARITY + 90


def pin_buffer_export(weights):
    # PickleBuffer holds a buffer export on the load's own memoryview: release() then
    # raises BufferError inside close(), the other deferral route.
    return pickle.PickleBuffer(weights.buffer), 0, SIZE


PINS = [pin_numpy, pin_slice, pin_region, pin_numpy_of_region, pin_buffer_export]


@pytest.mark.parametrize("pin", PINS, ids=lambda f: f.__name__[4:])
def test_close_while_pinned_defers_the_unmap(weights_file, pin):
    """Closing while a numpy array / slice / region view / buffer export is alive does not
    unmap: the data stays readable, stats count one deferred unmap, and dropping the last
    reference releases everything."""
    path, data = weights_file
    weights = load_weights(path)
    pinned, start, end = pin(weights)
    weights.close()
    gc.collect()
    assert weights.closed
    assert shared_users(str(path)) == 0
    assert stats().deferred_unmaps == 1
    assert bytes(memoryview(pinned)) == data[start:end]  # still mapped, no segfault
    del pinned
    assert_clean()


@pytest.mark.parametrize("pin", PINS, ids=lambda f: f.__name__[4:])
def test_close_order_with_two_users_and_a_pin(weights_file, pin):
    """A pin taken from the first of two loads survives both closes, in either order."""
    path, data = weights_file
    first, second = load_weights(path), load_weights(path)
    pinned, start, end = pin(first)
    first.close()
    assert stats().deferred_unmaps == 0  # the second load still holds the mapping
    second.close()
    gc.collect()
    assert stats().deferred_unmaps == 1
    assert bytes(memoryview(pinned)) == data[start:end]
    del pinned
    assert_clean()


def test_pins_of_many_regions_are_one_deferred_unmap(weights_file):
    """Regions are slices of the one whole-file view, so however many of them (and a numpy
    array over the whole buffer) outlive close(), there is exactly one deferred unmap, and the
    view is unmapped only when the very last pin goes."""
    path, data = weights_file
    weights = load_weights(path)
    whole = np.frombuffer(weights.buffer, dtype=np.uint8)
    kept = []
    for i in range(300):
        region = weights.region(i * 13, 7)
        if i % 10 == 0:
            kept.append((i * 13, region))
        del region
    weights.close()
    gc.collect()
    assert stats().deferred_unmaps == 1 and stats().live_mappings == 1
    assert all(bytes(r) == data[o : o + 7] for o, r in kept)
    del whole
    gc.collect()
    assert stats().deferred_unmaps == 1  # 30 regions still pin the view
    assert all(bytes(r) == data[o : o + 7] for o, r in kept)
    del kept[1:]
    assert stats().deferred_unmaps == 1  # one is enough
    assert bytes(kept[0][1]) == data[:7]
    del kept
    assert_clean()


def test_heap_buffer_pinned_after_close(weights_file):
    """A heap buffer pinned by numpy stays alive (counted as a heap buffer) until released."""
    path, data = weights_file
    weights = load_weights(path, disable_file_mapped_weights="1")
    array = np.frombuffer(weights.buffer, dtype=np.uint8)
    weights.close()
    gc.collect()
    assert stats().heap_buffers == 1
    assert array.tobytes() == data
    del array
    assert_clean()


def test_mapped_file_close_reports_deferral(weights_file):
    """MappedFile.close() returns False while a view pins the mapping, True otherwise."""
    path, _ = weights_file
    mapper = create_mapper()
    mapped = mapper.map_file(str(path))
    assert isinstance(mapped, MappedFile)
    view = mapped.buffer[10:20]
    assert mapped.close() is False
    del view
    gc.collect()
    assert_clean()
    assert mapper.map_file(str(path)).close() is True


@pytest.mark.parametrize("flag", ["0", "1"], ids=["mapped", "heap"])
def test_double_close_is_harmless(weights_file, flag):
    """close() twice (and after the with-block) is a no-op, not an error or a double unmap."""
    path, _ = weights_file
    other = load_weights(path)  # a second user: a double release would steal its reference
    with load_weights(path, disable_file_mapped_weights=flag) as weights:
        weights.close()
        weights.close()
    weights.close()
    assert bytes(other.buffer[:8]) == path.read_bytes()[:8]
    assert shared_users(str(path)) == 1
    other.close()
    other.close()
    assert_clean()


@pytest.mark.parametrize("flag", ["0", "1"], ids=["mapped", "heap"])
def test_use_after_close_raises_closed_error(weights_file, flag):
    """After close, .buffer and .region raise ClosedError (a ValueError), on both paths."""
    path, _ = weights_file
    weights = load_weights(path, disable_file_mapped_weights=flag)
    weights.close()
    with pytest.raises(ClosedError, match="closed"):
        weights.buffer  # noqa: B018 (property access is the point)
    with pytest.raises(ClosedError):
        weights.region(0, 1)
    with pytest.raises(ValueError):
        weights.region(0, 1)
    weights.verify()  # nothing to verify any more: a no-op, not a crash


@pytest.mark.parametrize("flag", ["0", "1"], ids=["mapped", "heap"])
def test_buffer_taken_before_close_is_released_by_close(weights_file, flag):
    """The memoryview a caller read from .buffer (and did not export) is released by
    close(): using it afterwards is a ValueError, not a read of unmapped memory."""
    path, _ = weights_file
    weights = load_weights(path, disable_file_mapped_weights=flag)
    view = weights.buffer
    weights.close()
    with pytest.raises(ValueError, match="released"):
        bytes(view)
    del view


def test_open_close_cycles_keep_fds_and_stats_flat(weights_file):
    """1000 open/close cycles (mapped, shared, heap, with regions) leave the descriptor count
    and the stats exactly where they started."""
    path, data = weights_file
    for _ in range(5):  # warm-up: first-use allocations are not leaks
        load_weights(path).close()
    before = open_handle_count()
    for i in range(1000):
        kind = i % 4
        if kind == 0:
            with load_weights(path) as w:
                assert w.buffer[i % SIZE] == data[i % SIZE]
        elif kind == 1:
            with load_weights(path) as a, load_weights(path) as b:
                assert bytes(a.region(i, 16)) == bytes(b.buffer[i : i + 16])
        elif kind == 2:
            with load_weights(path, disable_file_mapped_weights="1") as w:
                assert bytes(w.region(i, 16)) == data[i : i + 16]
        else:
            w = load_weights(path)
            array = np.frombuffer(w.region(i, 64), dtype=np.uint8)
            w.close()
            assert array.tobytes() == data[i : i + 64]
            del array
    assert open_handle_count() == before
    assert_clean()


CHILD_GC_REENTRY = """
    import gc, sys
    import mapper_impl as m
    from mapper_impl._stats import COUNTERS

    w = m.load_weights(sys.argv[1])
    holder = [w.region(0, 10)]
    holder.append(holder)         # a cycle: only the cyclic GC can free the view
    w.close()
    del holder
    # The cyclic GC runs at arbitrary allocations, including inside COUNTERS.add(), and the
    # view's finalizer then calls COUNTERS.add() again on the same thread.
    with COUNTERS.lock:
        gc.collect()
    print(m.stats().is_clean())
"""


def test_gc_finalizer_inside_stats_lock_does_not_deadlock(weights_file):
    """A view freed by the cyclic GC while the stats lock is held (GC can run at any
    allocation) must not deadlock the process."""
    path, _ = weights_file
    result = run_child(CHILD_GC_REENTRY, str(path), timeout=20)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
