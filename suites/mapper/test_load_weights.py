"""load_weights: the two load paths, the disable flag, what a Weights reports, and sharing."""

from __future__ import annotations

import numpy as np
import pytest
from mapper_support import assert_clean, stats_guard, write_file  # noqa: F401 (autouse fixture)

from mapper_impl import (
    PATHS_TAKEN,
    MapperError,
    Weights,
    load_weights,
    parse_disable_flag,
    shared_users,
    stats,
)

SIZE = 3 * 4096 + 123  # not a multiple of any page size


@pytest.fixture
def weights_file(tmp_path):
    path = tmp_path / "model_qnn.bin"
    return path, write_file(path, SIZE, seed=1)


def data_ptr(weights: Weights) -> int:
    """Address of the first byte of a load's buffer, as numpy (and ORT) would see it."""
    return np.frombuffer(weights.buffer, dtype=np.uint8).__array_interface__["data"][0]


def test_mapped_and_heap_loads_give_identical_bytes(weights_file):
    """A mapped load and a heap load of one file expose exactly the file's bytes."""
    path, data = weights_file
    with load_weights(path) as mapped, load_weights(path, disable_file_mapped_weights=True) as heap:
        assert mapped.path_taken == "mapped" and mapped.mapped
        assert heap.path_taken == "heap" and not heap.mapped
        assert bytes(mapped.buffer) == bytes(heap.buffer) == data
        assert mapped.size == heap.size == SIZE
    assert_clean()


def test_buffers_are_read_only(weights_file):
    """Neither path lets a caller write into the weights."""
    path, _ = weights_file
    for flag in ("0", "1"):
        with load_weights(path, disable_file_mapped_weights=flag) as weights:
            assert weights.buffer.readonly
            with pytest.raises(TypeError):
                weights.buffer[0] = 1


@pytest.mark.parametrize(
    ("value", "expected_path"),
    [("0", "mapped"), (False, "mapped"), ("1", "heap"), (True, "heap")],
)
def test_disable_flag_accepts_ep_values(weights_file, value, expected_path):
    """`disable_file_mapped_weights` takes the EP's "0"/"1" strings and bools."""
    path, data = weights_file
    with load_weights(path, disable_file_mapped_weights=value) as weights:
        assert weights.path_taken == expected_path
        assert bytes(weights.buffer) == data


@pytest.mark.parametrize("value", ["", "2", "yes", "true", " 1", None, 0, 1, 1.0, b"1"])
def test_disable_flag_rejects_anything_else(weights_file, value):
    """Ambiguous flag values are a ValueError before anything is loaded, never a silent mode."""
    path, _ = weights_file
    with pytest.raises(ValueError, match="disable_file_mapped_weights"):
        load_weights(path, disable_file_mapped_weights=value)
    with pytest.raises(ValueError):
        parse_disable_flag(value)
    assert_clean()


def test_parse_disable_flag_values():
    """parse_disable_flag maps "1"/True to disabled and "0"/False to enabled."""
    assert parse_disable_flag("1") is True
    assert parse_disable_flag(True) is True
    assert parse_disable_flag("0") is False
    assert parse_disable_flag(False) is False


def test_weights_reports_path_attempts_and_errors(weights_file):
    """A clean load reports its path, one attempt (zero for heap) and no errors."""
    path, _ = weights_file
    with load_weights(path) as mapped:
        assert (mapped.path_taken, mapped.attempts, mapped.errors) == ("mapped", 1, [])
        assert mapped.path == str(path)
        assert "path_taken=mapped" in repr(mapped)
    with load_weights(path, disable_file_mapped_weights="1") as heap:
        assert (heap.path_taken, heap.attempts, heap.errors) == ("heap", 0, [])
    assert set(PATHS_TAKEN) == {"mapped", "heap", "fallback"}


def test_accepts_str_and_pathlike(weights_file):
    """str and os.PathLike paths load the same file into the same mapping."""
    path, data = weights_file
    with load_weights(str(path)) as a, load_weights(path) as b:
        assert bytes(a.buffer) == bytes(b.buffer) == data
        assert shared_users(str(path)) == 2


def test_context_manager_closes(weights_file):
    """Leaving the with-block closes the load and releases the mapping."""
    path, _ = weights_file
    with load_weights(path) as weights:
        assert not weights.closed
        assert stats().live_mappings == 1
    assert weights.closed
    assert "closed" in repr(weights)
    assert_clean()


def test_context_manager_closes_on_exception(weights_file):
    """An exception inside the with-block still closes the load."""
    path, _ = weights_file
    with pytest.raises(RuntimeError), load_weights(path) as weights:
        raise RuntimeError("boom")
    assert weights.closed
    assert_clean()


def test_two_loads_share_one_mapping(weights_file):
    """Two loads of one path share one OS mapping (upstream: one mapping per path)."""
    path, _ = weights_file
    first = load_weights(path)
    second = load_weights(path)
    assert shared_users(str(path)) == 2
    snapshot = stats()
    assert snapshot.live_mappings == 1
    assert snapshot.mapped_bytes == SIZE
    assert data_ptr(first) == data_ptr(second)
    first.close()
    assert shared_users(str(path)) == 1
    assert stats().live_mappings == 1
    assert bytes(second.buffer[:16]) == path.read_bytes()[:16]
    second.close()
    assert shared_users(str(path)) == 0
    assert_clean()


def test_closing_everything_leaves_stats_clean(tmp_path):
    """Many loads of several files on both paths: closing all of them leaves nothing behind."""
    loads = []
    for i in range(4):
        path = tmp_path / f"w{i}.bin"
        write_file(path, 5000 + i, seed=i)
        for flag in ("0", "0", "1"):
            loads.append(load_weights(path, disable_file_mapped_weights=flag))
    snapshot = stats()
    assert snapshot.live_mappings == 4
    assert snapshot.heap_buffers == 4
    assert snapshot.heap_bytes == sum(5000 + i for i in range(4))
    for weights in loads:
        weights.close()
    assert_clean()


def test_heap_path_gives_one_private_buffer_per_load(weights_file):
    """Every heap load owns a private copy: two loads -> two buffers at different addresses."""
    path, data = weights_file
    with (
        load_weights(path, disable_file_mapped_weights="1") as a,
        load_weights(path, disable_file_mapped_weights="1") as b,
    ):
        snapshot = stats()
        assert snapshot.heap_buffers == 2
        assert snapshot.heap_bytes == 2 * SIZE
        assert snapshot.live_mappings == 0
        assert data_ptr(a) != data_ptr(b)
        assert bytes(a.buffer) == bytes(b.buffer) == data


def test_mapped_loads_give_the_same_address(weights_file):
    """Mapped loads hand out the very same bytes (no copy), heap loads do not."""
    path, _ = weights_file
    with load_weights(path) as a, load_weights(path) as b:
        with load_weights(path, disable_file_mapped_weights="1") as heap:
            assert data_ptr(a) == data_ptr(b) != data_ptr(heap)
        assert stats().heap_buffers == 0


def test_one_mapping_attempt_by_default(weights_file):
    """load_weights maps once by default (upstream never retries the mapping)."""
    import inspect

    assert inspect.signature(load_weights).parameters["max_attempts"].default == 1


def test_invalid_max_attempts_and_faults_type(weights_file):
    """Bad retry settings and a non-FaultPlan `faults` are rejected before any load."""
    path, _ = weights_file
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="max_attempts"):
            load_weights(path, max_attempts=bad)
    with pytest.raises(TypeError, match="FaultPlan"):
        load_weights(path, faults={"map_failures": 1})
    assert_clean()


def test_error_tree():
    """Every mapper error is a MapperError; region and closed errors are also ValueErrors."""
    import mapper_impl as m

    for name in (
        "FileCheckError",
        "FileMissingError",
        "NotARegularFileError",
        "EmptyFileError",
        "FileTooLargeError",
        "FileAccessError",
        "MappingError",
        "PlatformUnavailableError",
        "RegionError",
        "FeatureDisabledError",
        "StaleFileError",
        "ClosedError",
        "HeapReadError",
        "RegistrationError",
        "DeregistrationError",
        "ContextLoadError",
    ):
        assert issubclass(getattr(m, name), MapperError), name
    for name in ("FileMissingError", "NotARegularFileError", "EmptyFileError", "FileTooLargeError", "FileAccessError"):
        assert issubclass(getattr(m, name), m.FileCheckError), name
    assert issubclass(m.PlatformUnavailableError, m.MappingError)
    assert issubclass(m.FeatureDisabledError, m.RegionError)
    assert issubclass(m.RegionError, ValueError)
    assert issubclass(m.ClosedError, ValueError)
    assert not issubclass(m.FileCheckError, m.MappingError)
    assert not issubclass(m.ContextLoadError, m.HeapReadError)


PUBLIC_NAMES = [
    "create_mapper",
    "load_context",
    "LoadedContext",
    "StageError",
    "STAGES",
    "UPSTREAM_FALLBACK_STAGES",
    "load_weights",
    "Weights",
    "FaultPlan",
    "RetryPolicy",
    "stats",
    "MapperStats",
    "sweep_registrations",
    "DmaBackend",
    "shared_users",
    "MapperError",
    "ContextLoadError",
    "RegistrationError",
    "DeregistrationError",
]


def test_public_api_is_exactly_all():
    """Every name the package docstring calls public is in __all__, and __all__ names exactly
    the public names the package defines (no private module, no stale name)."""
    import mapper_impl as m

    missing = [name for name in PUBLIC_NAMES if name not in m.__all__]
    assert not missing, missing
    assert len(set(m.__all__)) == len(m.__all__)
    assert all(hasattr(m, name) for name in m.__all__)
    # "@py_builtins"/"@pytest_ar": pytest's assertion rewriting, which covers every package of a
    # distribution that registers a pytest plugin (ours does: qnn_fmw_harness_plugin)
    public = {n for n in vars(m) if not n.startswith(("_", "@")) and n not in ("annotations", "os")}
    assert public == set(m.__all__), public ^ set(m.__all__)
