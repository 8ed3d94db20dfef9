"""Weight-region requests: refused exactly where upstream's callback refuses them, and served
from views mapped at the allocation granularity below the requested offset (base + delta)."""

from __future__ import annotations

import pytest
from mapper_support import GRANULARITY, assert_clean, stats_guard, write_file  # noqa: F401

from mapper_impl import (
    ClosedError,
    FeatureDisabledError,
    RegionError,
    align_down,
    create_mapper,
    load_weights,
    stats,
    validate_region,
)

SIZE = 5 * GRANULARITY + 321
U64_MAX = 2**64 - 1

# (offset, size, words the refusal message must contain)
REFUSED = [
    pytest.param(0, 0, "size is 0", id="size-0"),
    pytest.param(10, 0, "size is 0", id="size-0-offset"),
    pytest.param(U64_MAX, 2, "overflows 64 bits", id="u64-overflow"),
    pytest.param(2**63, 2**63, "overflows 64 bits", id="u64-overflow-exact"),
    pytest.param(0, 2**64, "overflows 64 bits", id="size-beyond-u64"),
    pytest.param(SIZE - 10, 11, "past end of file", id="one-past-end"),
    pytest.param(SIZE, 1, "past end of file", id="starts-at-end"),
    pytest.param(0, SIZE + 1, "past end of file", id="whole-plus-one"),
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
    """Size 0, 64-bit overflow, past-EOF and negative requests raise RegionError (mapped and
    heap alike) and leave no view behind."""
    path, _ = weights_file
    with load_weights(path, disable_file_mapped_weights=flag) as weights:
        with pytest.raises(RegionError, match=words):
            weights.region(offset, size)
        assert stats().live_views == 0
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
def test_unaligned_region_bytes_and_view_size(weights_file, offset, size):
    """A region at any offset returns the file's bytes, from a view that starts at the
    allocation granularity below it: view_bytes = delta + size."""
    path, data = weights_file
    delta = offset % GRANULARITY
    with load_weights(path) as weights:
        before = stats()
        region = weights.region(offset, size)
        after = stats()
        assert bytes(region) == data[offset : offset + size]
        assert len(region) == size and region.readonly
        assert after.live_views == before.live_views + 1
        assert after.view_bytes - before.view_bytes == delta + size
        del region
        assert stats().live_views == before.live_views
    assert_clean()


def test_views_start_on_the_allocation_granularity(weights_file):
    """The OS view behind a region begins at align_down(offset): base + delta is the data."""
    path, data = weights_file
    mapper = create_mapper()
    mapped = mapper.map_file(str(path))
    try:
        assert mapped.granularity == mapper.allocation_granularity == GRANULARITY
        region = mapped.region(GRANULARITY + 10, 20)
        # the region is a slice of a view of delta + size bytes; its .obj is the OS view (an
        # mmap on POSIX, a ctypes byte array on Windows: bytes() reads either)
        owner = region.obj
        assert len(owner) == 10 + 20
        assert bytes(owner)[:10] == data[GRANULARITY : GRANULARITY + 10]
        del region, owner
    finally:
        assert mapped.close() is True


def test_many_regions_are_counted_and_released(weights_file):
    """Each region is its own view in the stats until the caller drops it."""
    path, data = weights_file
    with load_weights(path) as weights:
        regions = [weights.region(i * 1000 + 1, 500) for i in range(10)]
        snapshot = stats()
        assert snapshot.live_views == 10
        assert snapshot.view_bytes == sum((i * 1000 + 1) % GRANULARITY + 500 for i in range(10))
        assert all(bytes(r) == data[i * 1000 + 1 : i * 1000 + 501] for i, r in enumerate(regions))
        del regions
        assert stats().live_views == 0


def test_heap_region_is_a_slice_of_the_private_buffer(weights_file):
    """On the heap path a region is a zero-copy slice: no OS view is created."""
    path, data = weights_file
    with load_weights(path, disable_file_mapped_weights="1") as weights:
        region = weights.region(GRANULARITY + 1, 1000)
        assert bytes(region) == data[GRANULARITY + 1 : GRANULARITY + 1001]
        assert region.readonly
        assert stats().live_views == 0
        del region


def test_disabled_feature_refuses_regions(weights_file):
    """After MappedFile.disable() (an earlier error), every region request is refused,
    even a valid one, while the whole-file buffer stays readable."""
    path, data = weights_file
    mapped = create_mapper().map_file(str(path))
    try:
        assert bytes(mapped.region(0, 10)) == data[:10]
        mapped.disable()
        assert not mapped.feature_enabled
        with pytest.raises(FeatureDisabledError, match="disabled"):
            mapped.region(0, 10)
        assert bytes(mapped.buffer[:10]) == data[:10]
        assert stats().live_views == 0
    finally:
        mapped.close()


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


# -- validate_region / align_down unit tests ---------------------------------------------


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
    """In-bounds requests pass, up to offset + size == U64_MAX."""
    validate_region(offset, size, file_size)


def test_validate_region_flags_and_precedence():
    """Disabled feature is checked first, then the null base, then size 0, then "needs
    backend mapping" (the upstream order)."""
    with pytest.raises(FeatureDisabledError):
        validate_region(-1, 0, 0, feature_enabled=False, base_is_null=True)
    with pytest.raises(RegionError, match="null"):
        validate_region(0, 0, 10, base_is_null=True)
    with pytest.raises(RegionError, match="size is 0"):
        validate_region(0, 0, 10, needs_backend_mapping=False)
    with pytest.raises(RegionError, match="backend mapping"):
        validate_region(0, 1, 10, needs_backend_mapping=False)
    assert not issubclass(RegionError, FeatureDisabledError)


@pytest.mark.parametrize(
    ("offset", "granularity", "expected"),
    [
        (0, 4096, 0),
        (1, 4096, 0),
        (4095, 4096, 0),
        (4096, 4096, 4096),
        (4097, 4096, 4096),
        (65535, 65536, 0),
        (65536 * 3 + 17, 65536, 65536 * 3),
        (2**63 + 5, 65536, 2**63),
    ],
)
def test_align_down(offset, granularity, expected):
    """align_down returns the start of the granularity block that holds the offset."""
    assert align_down(offset, granularity) == expected
    assert expected <= offset < expected + granularity
    assert expected % granularity == 0
