"""WindowsFileMapper against a fake kernel32 (runs anywhere); the real one: test_windows_real.py.

The fake (`_fake_kernel32`) records every call, insists on 64-bit-safe ctypes declarations,
clobbers the last error in CloseHandle and fails any API on demand; these tests check the
alignment maths, the error mapping, that every handle and view is closed on every path, and
the lifetime rule (close() never unmaps memory a caller still sees).
"""

from __future__ import annotations

import ctypes
import gc
import sys

import numpy as np
import pytest
from _fake_kernel32 import (
    GRANULARITY,
    HANDLE_BASE,
    FakeFile,
    FakeKernel32,
    FakeMapping,
    st_fits_by_handle_info,
    weights,
)
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    REFUSED_WINERRORS,
    assert_clean,
    assert_refused_while_mapped,
    settled_stats,
    stats_guard,
    write_file,
)

from mapper_impl import (
    FaultPlan,
    FileAccessError,
    FileMissingError,
    MappingError,
    PlatformUnavailableError,
    load_weights,
    shared_users,
    stats,
)
from mapper_impl import _windows as win
from mapper_impl._common import identity_of_path
from mapper_impl._windows import WindowsFileMapper, filetime_to_unix_ns, split_u64, win32_path


@pytest.fixture
def fake():
    """A fresh fake; at the end every handle and view must be closed and (if they were clean
    before) mapper_impl's stats must be clean."""
    kernel32 = FakeKernel32()
    clean_before = settled_stats().is_clean()
    yield kernel32
    gc.collect()
    kernel32.assert_all_closed()
    if clean_before:
        assert_clean()
    for view in kernel32.unmapped:
        view.close()


@pytest.fixture
def mapper(fake) -> WindowsFileMapper:
    return WindowsFileMapper(kernel32=fake, get_last_error=fake.get_last_error)


# -- declarations, flags, granularity -------------------------------------------------------
def test_every_function_declared_64bit_safe(fake, mapper):
    """Every kernel32 function has argtypes and restype, with pointer-sized handles."""
    for function in fake.functions.values():
        assert function.declared_safely(), function.name
    fresh = FakeKernel32()  # the fake's own checks: undeclared, or c_int cutting a HANDLE
    with pytest.raises(AssertionError, match="not 64-bit safe"):
        fresh.CloseHandle(HANDLE_BASE)
    fresh.CloseHandle.argtypes, fresh.CloseHandle.restype = (ctypes.c_int,), ctypes.c_int32
    assert not fresh.CloseHandle.declared_safely()


def test_open_flags_and_whole_file_view(fake, mapper, tmp_path):
    """Read-only open that keeps writers out, whole-file PAGE_READONLY mapping, one view."""
    path = tmp_path / "model_qnn.bin"
    data = weights(path, 200_000, seed=1)
    mapped = mapper.map_file(str(path))
    assert bytes(mapped.buffer) == data
    [(name, access, share, security, disposition, _, template)] = fake.args("CreateFileW")
    assert (name, access, share, security, disposition, template) == (
        str(path), win.GENERIC_READ, win.FILE_SHARE_READ, None, win.OPEN_EXISTING, None)
    file = next(h for h, o in fake.handles.items() if isinstance(o, FakeFile))
    [(file_arg, *rest)] = fake.args("CreateFileMappingW")
    assert file_arg == file and rest == [None, win.PAGE_READONLY, 0, 0, None]
    mapping = next(h for h, o in fake.handles.items() if isinstance(o, FakeMapping))
    assert fake.args("MapViewOfFile") == [(mapping, win.FILE_MAP_READ, 0, 0, len(data))]
    assert mapped.close() is True
    assert fake.names().count("UnmapViewOfFile") == 1 and not fake.handles


def test_granularity_comes_from_get_system_info(tmp_path):
    """Region views align to GetSystemInfo's granularity, not a hard-coded 64 KiB."""
    fake = FakeKernel32(granularity=128 * 1024)
    mapper = WindowsFileMapper(kernel32=fake, get_last_error=fake.get_last_error)
    assert mapper.allocation_granularity == 128 * 1024
    path = tmp_path / "w.bin"
    data = weights(path, 300_000)
    mapped = mapper.map_file(str(path))
    assert bytes(mapped.region(200_000, 10)) == data[200_000:200_010]
    assert fake.args("MapViewOfFile")[-1][2:] == (0, 131072, 200_000 - 131072 + 10)
    mapped.close()
    gc.collect()
    fake.assert_all_closed()
    for view in fake.unmapped:  # each mmap holds a file handle: Windows could not clean tmp_path
        view.close()


# -- alignment and offsets ------------------------------------------------------------------
@pytest.mark.parametrize("offset", [0, 1, 65_535, 65_536, 65_537, 200_000, 299_999])
def test_region_is_mapped_from_the_aligned_offset(fake, mapper, tmp_path, offset):
    """MapViewOfFile gets the offset aligned down; the caller gets base + delta."""
    path = tmp_path / "w.bin"
    data = weights(path, 300_000, seed=2)
    mapped = mapper.map_file(str(path))
    size = min(1000, 300_000 - offset)
    region = mapped.region(offset, size)
    assert bytes(region) == data[offset : offset + size]  # base + delta
    aligned = offset - offset % GRANULARITY
    _, access, high, low, length = fake.args("MapViewOfFile")[-1]
    assert (access, high, low, length) == (win.FILE_MAP_READ, 0, aligned, offset - aligned + size)
    assert stats().live_views == 1
    del region
    assert stats().live_views == 0
    mapped.close()


@pytest.mark.parametrize(("value", "split"), [
    (0, (0, 0)), (1, (0, 1)), (0xFFFFFFFF, (0, 0xFFFFFFFF)), (1 << 32, (1, 0)),
    (5 * 2**30 + 7, (1, 2**30 + 7)), (2**64 - 1, (0xFFFFFFFF, 0xFFFFFFFF)),
])
def test_split_u64(value, split):
    """(high, low) DWORDs, as MapViewOfFile and OVERLAPPED take a 64-bit offset."""
    assert split_u64(value) == split


@pytest.mark.parametrize("value", [-1, 2**64])
def test_split_u64_refuses_out_of_range(value):
    with pytest.raises(ValueError):
        split_u64(value)


@pytest.mark.skipif(sys.maxsize < 2**33, reason="needs a 64-bit address space")
@pytest.mark.skipif(sys.platform == "win32", reason="NTFS files are not sparse by default")
def test_region_past_4_gib_splits_the_offset(fake, mapper, tmp_path):
    """A region past 4 GiB of a sparse file: high DWORD 1, low DWORD the aligned rest."""
    path = tmp_path / "sparse.bin"
    offset = 4 * 2**30 + 70_000
    with open(path, "wb") as f:
        f.truncate(5 * 2**30 + 100)  # sparse: no disk used
        f.seek(offset)
        f.write(b"HELLO")
    mapped = mapper.map_file(str(path))
    assert bytes(mapped.region(offset, 5)) == b"HELLO"
    assert fake.args("MapViewOfFile")[-1][2:] == (1, 65_536, 70_000 - 65_536 + 5)
    mapped.close()


def test_filetime_conversion():
    """FILETIME ticks since 1601 -> ns since 1970, exact to the 100 ns tick."""
    assert filetime_to_unix_ns(*split_u64(116_444_736_000_000_000)) == 0
    assert filetime_to_unix_ns(*split_u64(116_444_736_000_000_001)) == 100
    ticks = 116_444_736_000_000_000 + 1_700_000_000 * 10**7 + 1234567
    assert filetime_to_unix_ns(*split_u64(ticks)) == 1_700_000_000_123_456_700


def test_identity_matches_os_stat_so_the_registry_shares(fake, mapper, tmp_path):
    """The registry compares a mapping's identity with the mapper's identity_of_path (both
    through GetFileInformationByHandle): they must agree, or no sharing. They also agree with
    os.stat's where BY_HANDLE_FILE_INFORMATION can carry st_dev/st_ino."""
    path = tmp_path / "w.bin"
    weights(path, 150_000)
    if not st_fits_by_handle_info(path):
        pytest.skip("st_dev/st_ino wider than BY_HANDLE_FILE_INFORMATION (see the real test)")
    mapped = mapper.map_file(str(path))
    assert mapped.identity == mapper.identity_of_path(str(path))
    assert mapped.identity == identity_of_path(str(path))
    mapped.verify()
    mapped.close()


# -- failures: right error, last error read first, every handle closed ----------------------
@pytest.mark.parametrize(("code", "error"), [
    (2, FileMissingError), (3, FileMissingError), (5, FileAccessError), (32, FileAccessError),
])
def test_create_file_errors(fake, mapper, tmp_path, code, error):
    """Missing and locked files are input errors (FileCheckError), not mapping failures."""
    path = tmp_path / "w.bin"
    weights(path, 1000)
    fake.fail("CreateFileW", code)
    with pytest.raises(error, match=f"Windows error {code}"):
        mapper.map_file(str(path))
    fake.assert_error_read_first("CreateFileW")
    assert "CreateFileMappingW" not in fake.names()


@pytest.mark.parametrize("code", [8, 1455, 1224])
def test_create_mapping_null_is_detected(fake, mapper, tmp_path, code):
    """CreateFileMappingW fails with NULL (upstream checks INVALID_HANDLE_VALUE and misses
    it): MappingError naming API, path and code; the file handle is closed."""
    path = tmp_path / "w.bin"
    weights(path, 1000)
    fake.fail("CreateFileMappingW", code)  # returns NULL, not INVALID_HANDLE_VALUE
    with pytest.raises(MappingError) as info:
        mapper.map_file(str(path))
    assert info.value.os_error == code
    assert "CreateFileMappingW" in str(info.value) and str(path) in str(info.value)
    assert f"error {code}" in str(info.value)
    fake.assert_error_read_first("CreateFileMappingW")
    assert fake.names()[-1] == "CloseHandle" and "MapViewOfFile" not in fake.names()


def test_map_view_failure_closes_mapping_and_file(fake, mapper, tmp_path):
    """MapViewOfFile fails after both handles exist: both are closed, after the error read."""
    path = tmp_path / "w.bin"
    weights(path, 1000)
    fake.fail("MapViewOfFile", 8)
    with pytest.raises(MappingError, match="MapViewOfFile failed: Windows error 8") as info:
        mapper.map_file(str(path))
    assert info.value.os_error == 8
    fake.assert_error_read_first("MapViewOfFile")
    assert fake.names()[-2:] == ["CloseHandle", "CloseHandle"]


@pytest.mark.parametrize("api", ["GetFileSizeEx", "GetFileInformationByHandle", "ReadFile"])
def test_identity_failure_closes_the_file(fake, mapper, tmp_path, api):
    """A failure while reading the identity is a MappingError and closes the file."""
    path = tmp_path / "w.bin"
    weights(path, 1000)
    fake.fail(api, 23)
    with pytest.raises(MappingError, match=api) as info:
        mapper.map_file(str(path))
    assert info.value.os_error == 23
    fake.assert_error_read_first(api)


def test_region_view_failure_keeps_the_mapping_usable(fake, mapper, tmp_path):
    """A failed region view costs nothing: the next region request works."""
    path = tmp_path / "w.bin"
    data = weights(path, 300_000)
    mapped = mapper.map_file(str(path))
    fake.fail("MapViewOfFile", 1455)
    with pytest.raises(MappingError) as info:
        mapped.region(100_000, 10)
    assert info.value.os_error == 1455
    fake.assert_error_read_first("MapViewOfFile")
    assert bytes(mapped.region(100_000, 10)) == data[100_000:100_010]
    mapped.close()


# -- paths ------------------------------------------------------------------------------------
def test_non_ascii_path_reaches_create_file_unchanged(fake, mapper, tmp_path):
    """The str itself reaches CreateFileW (upstream widens byte by byte and breaks these)."""
    path = tmp_path / "wéights_重み_🙂.bin"
    data = weights(path, 5000)
    mapped = mapper.map_file(str(path))
    assert fake.args("CreateFileW")[0][0] == str(path)
    assert bytes(mapped.buffer) == data
    mapped.close()


def test_win32_path_prefixes_only_long_paths():
    """Short paths pass as given; long ones get \\\\?\\ (or \\\\?\\UNC\\), normalised."""
    assert win32_path("C:\\models\\m.bin") == "C:\\models\\m.bin"
    long_dir = "C:\\" + "\\".join(["d" * 50] * 6)
    assert win32_path(long_dir + "\\m.bin") == "\\\\?\\" + long_dir + "\\m.bin"
    assert win32_path(long_dir + "/x/../m.bin") == "\\\\?\\" + long_dir + "\\m.bin"
    unc = "\\\\server\\share\\" + "\\".join(["u" * 60] * 5) + "\\m.bin"
    assert win32_path(unc) == "\\\\?\\UNC\\" + unc[2:]
    assert win32_path("\\\\?\\" + long_dir) == "\\\\?\\" + long_dir


@pytest.mark.skipif(sys.platform == "win32", reason="long tmp folders need LongPathsEnabled")
def test_long_path_is_opened_with_the_prefix(fake, mapper, tmp_path):
    """A path longer than MAX_PATH reaches CreateFileW with the \\\\?\\ prefix."""
    folder = tmp_path.joinpath(*["long_folder_name_" * 3] * 6)
    folder.mkdir(parents=True)
    path = folder / "w.bin"
    assert len(str(path)) >= win.MAX_PATH
    data = weights(path, 3000)
    mapped = mapper.map_file(str(path))
    assert fake.args("CreateFileW")[0][0].startswith("\\\\?\\")
    assert bytes(mapped.buffer) == data
    mapped.close()


# -- lifetime ---------------------------------------------------------------------------------
def test_close_with_live_numpy_array_defers_the_unmap(fake, mapper, tmp_path):
    """close() with a numpy array over the buffer: no UnmapViewOfFile, handles open, until
    the array goes."""
    path = tmp_path / "w.bin"
    data = weights(path, 100_000)
    loaded = load_weights(path, mapper=mapper)
    array = np.frombuffer(loaded.buffer, dtype=np.uint8)
    loaded.close()
    assert "UnmapViewOfFile" not in fake.names()
    assert len(fake.handles) == 2  # the file stays open (writers kept out) while mapped
    assert stats().deferred_unmaps == 1
    assert array.tobytes() == data
    del array
    assert fake.names().count("UnmapViewOfFile") == 1 and not fake.handles
    assert_clean()


def test_region_view_keeps_the_handles_until_released(fake, mapper, tmp_path):
    """A region view outliving close() keeps its view and both handles until released."""
    path = tmp_path / "w.bin"
    data = weights(path, 300_000)
    mapped = mapper.map_file(str(path))
    region = mapped.region(150_000, 100)
    mapped.close()
    assert len(fake.handles) == 2 and len(fake.views) == 1
    assert bytes(region) == data[150_000:150_100]
    del region
    assert not fake.handles and not fake.views


def test_mapper_off_windows_needs_an_injected_kernel32(fake):
    """Off Windows the module imports, but a mapper needs a kernel32 and a last-error source."""
    if sys.platform == "win32":
        pytest.skip("kernel32 exists here")
    with pytest.raises(PlatformUnavailableError):
        WindowsFileMapper()
    with pytest.raises(TypeError):
        WindowsFileMapper(kernel32=fake)


# -- through load_weights ---------------------------------------------------------------------
def test_load_weights_end_to_end(fake, mapper, tmp_path):
    """load_weights with the Windows mapper: mapped bytes are the file's bytes."""
    path = tmp_path / "model_qnn.bin"
    data = weights(path, 250_000, seed=3)
    with load_weights(path, mapper=mapper) as loaded:
        assert (loaded.path_taken, loaded.attempts, loaded.errors) == ("mapped", 1, [])
        assert bytes(loaded.buffer) == data
        assert bytes(loaded.region(70_000, 500)) == data[70_000:70_500]
    assert_clean()


def test_second_load_shares_the_mapping(fake, mapper, tmp_path):
    """Two loads of one file share one mapping (one CreateFileMappingW); the second load's
    identity check goes through the same handle API as the mapping (CreateFileW again)."""
    path = tmp_path / "model_qnn.bin"
    data = weights(path, 250_000, seed=3)
    with load_weights(path, mapper=mapper) as first, load_weights(path, mapper=mapper) as second:
        assert first.path_taken == second.path_taken == "mapped"
        assert bytes(second.buffer) == data and shared_users(str(path), mapper) == 2
        assert fake.names().count("CreateFileMappingW") == 1
        assert fake.names().count("CreateFileW") == 2
    assert_clean()


@pytest.mark.parametrize(("failures", "taken", "attempts"), [(2, "mapped", 3), (3, "fallback", 3)])
def test_map_view_failures_go_through_the_retry_policy(
    fake, mapper, tmp_path, failures, taken, attempts
):
    """Injected MapViewOfFile failures are retried, then fall back to the heap."""
    path = tmp_path / "w.bin"
    data = weights(path, 20_000)
    fake.fail("MapViewOfFile", 1455, times=failures)
    with load_weights(path, mapper=mapper, max_attempts=3) as loaded:
        assert (loaded.path_taken, loaded.attempts) == (taken, attempts)
        assert len(loaded.errors) == failures
        assert all("MapViewOfFile failed: Windows error 1455" in e for e in loaded.errors)
        assert bytes(loaded.buffer) == data
    assert_clean()


def test_fault_plan_hooks(fake, mapper, tmp_path):
    """FaultPlan's platform_unavailable, map and region faults act as on POSIX."""
    path = tmp_path / "w.bin"
    data = weights(path, 20_000)
    plan = FaultPlan(platform_unavailable=True)
    with load_weights(path, mapper=mapper, faults=plan) as loaded:
        assert (loaded.path_taken, loaded.attempts) == ("fallback", 1)
    assert "CreateFileW" not in fake.names()
    with load_weights(path, mapper=mapper, faults=FaultPlan(map_failures=1)) as loaded:
        assert (loaded.path_taken, loaded.attempts) == ("mapped", 2)
        assert bytes(loaded.buffer) == data
        assert fake.names().count("CreateFileW") == 2 and len(fake.handles) == 2
    with load_weights(path, mapper=mapper, faults=FaultPlan(region_failures=1)) as loaded:
        with pytest.raises(MappingError):
            loaded.region(0, 10)
        assert bytes(loaded.region(0, 10)) == data[:10]
    assert_clean()
