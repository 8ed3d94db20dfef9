"""Weight-region requests: refused exactly where, and in the order, upstream's DMA-data callback
refuses them, and served as ``base + offset`` inside the one whole-file view (a slice: no new
OS view, no descriptor per region), from any integer type."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    GRANULARITY,
    assert_clean,
    data_address,
    open_handle_count,
    stats_guard,
    write_file,
)

from mapper_impl import (
    ClosedError,
    FeatureDisabledError,
    RegionError,
    create_mapper,
    load_context,
    load_weights,
    stats,
    validate_region,
)

SIZE = 5 * GRANULARITY + 321
U64_MAX = 2**64 - 1

# (offset, size, words the refusal message must contain): upstream's wording, our detail
REFUSED = [
    pytest.param(0, 0, "size must be > 0", id="size-0"),
    pytest.param(10, 0, "region size is 0", id="size-0-offset"),
    pytest.param(U64_MAX, 2, "overflow 64 bits", id="u64-overflow"),
    pytest.param(2**63, 2**63, "overflow 64 bits", id="u64-overflow-exact"),
    pytest.param(0, 2**64, "overflow 64 bits", id="size-beyond-u64"),
    pytest.param(SIZE - 10, 11, "outside of mapped file", id="one-past-end"),
    pytest.param(SIZE, 1, "runs past end of file", id="starts-at-end"),
    pytest.param(0, SIZE + 1, "outside of mapped file", id="whole-plus-one"),
    pytest.param(-1, 10, "negative", id="negative-offset"),
    pytest.param(0, -5, "negative", id="negative-size"),
]


@pytest.fixture
def weights_file(tmp_path):
    path = tmp_path / "regions.bin"
    return path, write_file(path, SIZE, seed=2)


@pytest.mark.parametrize("flag", ["0", "1"], ids=["mapped", "heap"])
@pytest.mark.parametrize(("offset", "size", "words"), REFUSED)
def test_bad_region_is_refused_on_both_paths(weights_file, flag, offset, size, words):
    """Size 0, 64-bit overflow, past-EOF and negative requests raise RegionError with QNN's
    INVALID_ARGUMENT status (mapped and heap alike) and change nothing in the stats."""
    path, _ = weights_file
    with load_weights(path, disable_file_mapped_weights=flag) as weights:
        before = stats()
        with pytest.raises(RegionError, match=words) as info:
            weights.region(offset, size)
        assert info.value.status == "INVALID_ARGUMENT"
        assert stats() == before
    assert_clean()


@pytest.mark.parametrize("flag", ["0", "1"], ids=["mapped", "heap"])
def test_region_exactly_to_end_of_file_is_allowed(weights_file, flag):
    """offset + size == file size is the last valid request; the whole file is one too."""
    path, data = weights_file
    with load_weights(path, disable_file_mapped_weights=flag) as weights:
        assert bytes(weights.region(SIZE - 1, 1)) == data[-1:]
        assert bytes(weights.region(0, SIZE)) == data


OFFSETS = [0, 1, 7, GRANULARITY - 1, GRANULARITY, GRANULARITY + 1, 3 * GRANULARITY - 5, 12345]


@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("size", [1, 100, GRANULARITY + 3])
def test_region_is_base_plus_offset_in_the_one_view(weights_file, offset, size):
    """A region at any offset is the file's bytes at ``base + offset`` of the whole-file view
    (its address, as numpy and ORT see it), read-only, and maps nothing new: the stats (one
    mapping of SIZE bytes) and the descriptor count do not move."""
    path, data = weights_file
    with load_weights(path) as weights:
        before, handles = stats(), open_handle_count()
        region = weights.region(offset, size)
        assert bytes(region) == data[offset : offset + size]
        assert len(region) == size and region.readonly
        assert data_address(region) == weights.base_address + offset == data_address(weights.buffer) + offset
        assert region.obj is weights.buffer.obj  # the one OS view, not a view of its own
        assert stats() == before and (before.live_mappings, before.mapped_bytes) == (1, SIZE)
        assert open_handle_count() == handles
        del region
    assert_clean()


def file_views(path) -> int:
    """How many separate mappings of ``path`` this process has (Linux: /proc/self/maps lines
    naming the file; one mmap may show as several lines only if split, which nothing here does)."""
    with open("/proc/self/maps") as maps:
        return sum(line.rstrip("\n").endswith(" " + os.path.realpath(path)) for line in maps)


def test_thousands_of_regions_hold_a_bounded_number_of_fds(weights_file):
    """5000 regions of one file, kept alive together and registered by a context: the process
    holds exactly the descriptors (Windows: handles) it held after the first load, and (Linux)
    the file is mapped once."""
    path, data = weights_file
    requests = [((i * 997) % (SIZE - 64), 1 + i % 64) for i in range(5000)]
    with load_weights(path) as weights:
        handles = open_handle_count()
        regions = [weights.region(o, s) for o, s in requests]
        assert open_handle_count() == handles
        if sys.platform.startswith("linux"):
            assert file_views(path) == 1
        create = lambda w, views: len(views)  # noqa: E731
        # process scope: shares load_weights' mapping (a session-scope load maps its own)
        with load_context(path, requests, create, disable_file_mapped_weights="0", scope="process") as ctx:
            assert (ctx.value, ctx.registered) == (5000, 5000)
            assert open_handle_count() == handles
            assert stats().dma_registrations == 5000 and stats().live_mappings == 1
            if sys.platform.startswith("linux"):
                assert file_views(path) == 1
        assert all(bytes(r) == data[o : o + s] for r, (o, s) in zip(regions, requests, strict=True))
        del regions
    assert_clean()


def test_heap_region_is_a_slice_of_the_private_buffer(weights_file):
    """On the heap path a region is a zero-copy slice of the load's private copy."""
    path, data = weights_file
    with load_weights(path, disable_file_mapped_weights="1") as weights:
        region = weights.region(GRANULARITY + 1, 1000)
        assert bytes(region) == data[GRANULARITY + 1 : GRANULARITY + 1001]
        assert region.readonly
        assert data_address(region) == data_address(weights.buffer) + GRANULARITY + 1
        assert weights.base_address is None  # nothing mapped: nothing to register for DMA
        del region


@pytest.mark.parametrize(
    ("offset", "size"),
    [
        (np.int64(4096), np.int64(100)),
        (np.uint64(4096), np.uint32(100)),
        (np.int32(4096), np.uint8(100)),
        (np.intp(4096), 100),
    ],
    ids=["int64", "uint64-uint32", "int32-uint8", "intp-int"],
)
@pytest.mark.parametrize("flag", ["0", "1"], ids=["mapped", "heap"])
def test_numpy_integers_are_accepted(weights_file, flag, offset, size):
    """Any integer type is a valid offset and size (numpy's via __index__), on both paths."""
    path, data = weights_file
    with load_weights(path, disable_file_mapped_weights=flag) as weights:
        assert bytes(weights.region(offset, size)) == data[4096:4196]


def test_numpy_integers_are_refused_by_the_same_rules(weights_file):
    """A numpy uint64 at the top of the range meets the 64-bit overflow rule (a RegionError
    naming it), not an OverflowError from numpy arithmetic."""
    path, _ = weights_file
    with load_weights(path) as weights:
        with pytest.raises(RegionError, match="overflow 64 bits"):
            weights.region(np.uint64(U64_MAX), np.uint64(2))
        with pytest.raises(RegionError, match="outside of mapped file"):
            weights.region(np.int64(SIZE), np.int64(1))


@pytest.mark.parametrize("bad", [1.0, "10", None, True, np.float64(3.0), np.bool_(True)])
def test_non_integers_are_a_type_error(weights_file, bad):
    """Floats, strings, None and bools are a TypeError naming the field, before any rule."""
    path, _ = weights_file
    with load_weights(path) as weights:
        with pytest.raises(TypeError, match="region offset must be an integer"):
            weights.region(bad, 10)
        with pytest.raises(TypeError, match="region size must be an integer"):
            weights.region(0, bad)


def test_a_disabled_load_refuses_regions_others_do_not(weights_file, tmp_path):
    """Weights.disable() (a failed request earlier in this context) refuses this load's
    region requests with upstream's ABORTED wording; another load of the same file, a load of
    another file and any later load are unaffected: no process-wide disabled state."""
    path, data = weights_file
    other_path = tmp_path / "other.bin"
    other_data = write_file(other_path, 10_000, seed=9)
    with load_weights(path) as first, load_weights(path) as second, load_weights(other_path) as other:
        first.disable()
        assert not first.feature_enabled and second.feature_enabled
        with pytest.raises(FeatureDisabledError, match="file mapping has been disabled, possibly due") as info:
            first.region(0, 10)
        assert info.value.status == "ABORTED"
        assert bytes(first.buffer[:10]) == data[:10]  # only region requests are refused
        assert bytes(second.region(0, 10)) == data[:10]
        assert bytes(other.region(5, 10)) == other_data[5:15]
    with load_weights(path) as later:
        assert later.feature_enabled and bytes(later.region(0, 10)) == data[:10]


def test_region_after_close_raises_closed_error(weights_file):
    """A closed MappedFile refuses regions and its buffer with ClosedError."""
    path, _ = weights_file
    mapped = create_mapper().map_file(str(path))
    mapped.close()
    with pytest.raises(ClosedError):
        mapped.region(0, 1)
    with pytest.raises(ClosedError):
        mapped.buffer  # noqa: B018 (property access is the point)
    assert mapped.closed and "closed" in repr(mapped)


# -- validate_region unit tests ---------------------------------------------------------


@pytest.mark.parametrize(("offset", "size", "words"), REFUSED)
def test_validate_region_refusals(offset, size, words):
    """validate_region refuses each bad request with a message naming the rule."""
    with pytest.raises(RegionError, match=words):
        validate_region(offset, size, SIZE)


@pytest.mark.parametrize(
    ("offset", "size", "file_size"),
    [(0, 1, 1), (0, 10, 10), (9, 1, 10), (U64_MAX - 1, 1, 2**64), (2**40, 2**20, 2**41)],
)
def test_validate_region_accepts_valid_requests(offset, size, file_size):
    """In-bounds requests pass, up to offset + size == U64_MAX, and come back as ints."""
    assert validate_region(offset, size, file_size) == (offset, size)
    assert validate_region(np.uint64(offset), np.uint64(size), file_size) == (offset, size)


# Each request breaks every rule from one point of upstream's order on: the first broken
# rule in that order must be the one reported.
ORDER = [
    pytest.param(
        {"feature_enabled": False, "base_is_null": True},
        (U64_MAX, 0),
        FeatureDisabledError,
        "disabled",
        "ABORTED",
        id="1-disabled",
    ),
    pytest.param(
        {"base_is_null": True, "needs_backend_mapping": False},
        (U64_MAX, 0),
        RegionError,
        "null memory mapped base pointer",
        "INVALID_ARGUMENT",
        id="2-null-base",
    ),
    pytest.param(
        {"needs_backend_mapping": False},
        (U64_MAX, 0),
        RegionError,
        "region size is 0",
        "INVALID_ARGUMENT",
        id="3-size-0",
    ),
    pytest.param(
        {"needs_backend_mapping": False},
        (U64_MAX, 2),
        RegionError,
        "does not need backend mapping",
        "INVALID_ARGUMENT",
        id="3-no-backend-mapping",
    ),
    pytest.param({}, (U64_MAX, 2), RegionError, "overflow 64 bits", "INVALID_ARGUMENT", id="4-overflow"),
    pytest.param({}, (SIZE, 2), RegionError, "outside of mapped file", "INVALID_ARGUMENT", id="5-past-eof"),
]


@pytest.mark.parametrize(("flags", "request_", "error", "words", "status"), ORDER)
def test_validate_region_follows_upstream_order(flags, request_, error, words, status):
    """Disabled (ABORTED), then null base, then size 0 / no backend mapping needed, then the
    64-bit overflow, then past the end of the file (INVALID_ARGUMENT), as upstream checks."""
    with pytest.raises(error, match=words) as info:
        validate_region(*request_, SIZE, **flags)
    assert type(info.value) is error
    assert info.value.status == status


def test_region_error_tree():
    """FeatureDisabledError is a RegionError (a ValueError), never the other way round."""
    assert issubclass(FeatureDisabledError, RegionError)
    assert not issubclass(RegionError, FeatureDisabledError)
    assert issubclass(RegionError, ValueError)
