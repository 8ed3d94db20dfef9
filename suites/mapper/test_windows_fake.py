"""WindowsFileMapper against a fake kernel32 (runs anywhere); the real one: test_windows_real.py.

The fake (`_fake_kernel32`) records every call, insists on 64-bit-safe ctypes declarations,
clobbers the last error in CloseHandle and fails any API on demand; these tests check
upstream's handle lifetime (one whole-file view, both handles closed right after it), that
regions never call kernel32, the FILE_ID_INFO identity, the error mapping, the UTF-16 length
of long paths, and the lifetime rule (close() never unmaps memory a caller still sees).
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys

import numpy as np
import pytest
from _fake_kernel32 import (
    HANDLE_BASE,
    FakeKernel32,
    weights,
)
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    assert_clean,
    data_address,
    settled_stats,
    stats_guard,
)

from mapper_impl import (
    FaultPlan,
    FileAccessError,
    FileMissingError,
    MappingError,
    PlatformUnavailableError,
    StaleFileError,
    load_context,
    load_weights,
    shared_users,
    stats,
)
from mapper_impl import _windows as win
from mapper_impl._common import identity_of_path
from mapper_impl._windows import WindowsFileMapper, filetime_to_unix_ns, split_u64, utf16_units, win32_path


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
    for name in win.SIGNATURES:  # the fake also has the scenarios' extra functions
        assert fake.functions[name].declared_safely(), name
    fresh = FakeKernel32()  # the fake's own checks: undeclared, or c_int cutting a HANDLE
    with pytest.raises(AssertionError, match="not 64-bit safe"):
        fresh.CloseHandle(HANDLE_BASE)
    fresh.CloseHandle.argtypes, fresh.CloseHandle.restype = (ctypes.c_int,), ctypes.c_int32
    assert not fresh.CloseHandle.declared_safely()


def test_upstream_sequence_one_view_then_both_handles_closed(fake, mapper, tmp_path):
    """As upstream: read-only open (FILE_SHARE_READ), whole-file PAGE_READONLY mapping, ONE
    MapViewOfFile of the whole file (offset 0, length 0), then CloseHandle on the mapping and
    on the file: while mapped, no handle is open, only the view."""
    path = tmp_path / "model_qnn.bin"
    data = weights(path, 200_000, seed=1)
    mapped = mapper.map_file(str(path))
    assert bytes(mapped.buffer) == data
    [(name, access, share, security, disposition, _, template)] = fake.args("CreateFileW")
    assert (name, access, share, security, disposition, template) == (
        str(path),
        win.GENERIC_READ,
        win.FILE_SHARE_READ,
        None,
        win.OPEN_EXISTING,
        None,
    )
    [(file, *rest)] = fake.args("CreateFileMappingW")
    assert rest == [None, win.PAGE_READONLY, 0, 0, None]
    [(mapping, *view_args)] = fake.args("MapViewOfFile")
    assert view_args == [win.FILE_MAP_READ, 0, 0, 0]
    names = fake.names()
    assert names[names.index("MapViewOfFile") :] == ["MapViewOfFile", "CloseHandle", "CloseHandle"]
    assert fake.args("CloseHandle") == [(mapping,), (file,)]  # mapping first, as upstream
    assert not fake.handles and len(fake.views) == 1
    assert mapped.base_address == next(iter(fake.views))
    assert mapped.close() is True
    assert fake.names().count("UnmapViewOfFile") == 1 and not fake.views


def test_regions_never_call_kernel32(fake, mapper, tmp_path):
    """Regions are ``base + offset`` in the one view: 300 of them make no kernel32 call at all
    (MapViewOfFile would even fail now), and each sits at the view's address + offset."""
    path = tmp_path / "w.bin"
    data = weights(path, 300_000, seed=2)
    mapped = mapper.map_file(str(path))
    calls = len(fake.calls)
    fake.fail("MapViewOfFile", 8, times=1000)
    base = next(iter(fake.views))
    for i in range(300):
        offset, size = (i * 997) % 299_000, 1 + i % 1000
        region = mapped.region(offset, size)
        assert bytes(region) == data[offset : offset + size]
        assert data_address(region) == base + offset
    assert len(fake.calls) == calls
    del region
    mapped.close()


def test_granularity_comes_from_get_system_info(tmp_path):
    """The mapper reports GetSystemInfo's granularity, not a hard-coded 64 KiB; regions do not
    depend on it (one view of the whole file, sliced)."""
    fake = FakeKernel32(granularity=128 * 1024)
    mapper = WindowsFileMapper(kernel32=fake, get_last_error=fake.get_last_error)
    assert mapper.allocation_granularity == 128 * 1024
    path = tmp_path / "w.bin"
    data = weights(path, 300_000)
    mapped = mapper.map_file(str(path))
    assert bytes(mapped.region(200_000, 10)) == data[200_000:200_010]
    assert [args[1:] for args in fake.args("MapViewOfFile")] == [(win.FILE_MAP_READ, 0, 0, 0)]
    mapped.close()
    gc.collect()
    fake.assert_all_closed()
    for view in fake.unmapped:  # each mmap holds a file handle: Windows could not clean tmp_path
        view.close()


@pytest.mark.parametrize(
    ("value", "split"),
    [
        (0, (0, 0)),
        (1, (0, 1)),
        (0xFFFFFFFF, (0, 0xFFFFFFFF)),
        (1 << 32, (1, 0)),
        (5 * 2**30 + 7, (1, 2**30 + 7)),
        (2**64 - 1, (0xFFFFFFFF, 0xFFFFFFFF)),
    ],
)
def test_split_u64(value, split):
    """(high, low) DWORDs, as MapViewOfFile and OVERLAPPED take a 64-bit offset."""
    assert split_u64(value) == split


@pytest.mark.parametrize("value", [-1, 2**64])
def test_split_u64_refuses_out_of_range(value):
    with pytest.raises(ValueError):
        split_u64(value)


@pytest.mark.skipif(sys.maxsize < 2**33, reason="needs a 64-bit address space")
@pytest.mark.skipif(sys.platform == "win32", reason="NTFS files are not sparse by default")
def test_region_past_4_gib_is_base_plus_offset(fake, mapper, tmp_path):
    """A region past 4 GiB of a sparse 5 GiB file is base + a 64-bit offset in the one view."""
    path = tmp_path / "sparse.bin"
    offset = 4 * 2**30 + 70_000
    with open(path, "wb") as f:
        f.truncate(5 * 2**30 + 100)  # sparse: no disk used
        f.seek(offset)
        f.write(b"HELLO")
    mapped = mapper.map_file(str(path))
    assert bytes(mapped.region(offset, 5)) == b"HELLO"
    assert data_address(mapped.region(offset, 5)) == mapped.base_address + offset
    assert [args[2:] for args in fake.args("MapViewOfFile")] == [(0, 0, 0)]  # one whole view
    mapped.close()


def test_filetime_conversion():
    """FILETIME ticks since 1601 -> ns since 1970, exact to the 100 ns tick."""
    assert filetime_to_unix_ns(*split_u64(116_444_736_000_000_000)) == 0
    assert filetime_to_unix_ns(*split_u64(116_444_736_000_000_001)) == 100
    ticks = 116_444_736_000_000_000 + 1_700_000_000 * 10**7 + 1234567
    assert filetime_to_unix_ns(*split_u64(ticks)) == 1_700_000_000_123_456_700


def test_identity_is_file_id_info_and_matches_os_stat(fake, mapper, tmp_path):
    """The identity is FILE_ID_INFO's 64-bit volume serial and 128-bit id (what os.stat reports
    since Python 3.12; here the fake serves st_dev/st_ino), read for the mapping through the
    FILE_SHARE_READ handle and for the registry's check through a fully shared one: both
    agree, or no load would ever share a mapping."""
    path = tmp_path / "w.bin"
    weights(path, 150_000)
    mapped = mapper.map_file(str(path))
    st = os.stat(path)
    assert (mapped.identity.device, mapped.identity.inode) == (st.st_dev, st.st_ino)
    [(_, info_class, _, size)] = fake.args("GetFileInformationByHandleEx")
    assert (info_class, size) == (win.FILE_ID_INFO_CLASS, ctypes.sizeof(win.FILE_ID_INFO)) == (18, 24)
    assert mapped.identity == mapper.identity_of_path(str(path)) == identity_of_path(str(path))
    assert [args[2] for args in fake.args("CreateFileW")] == [win.FILE_SHARE_READ, win.FILE_SHARE_ALL]
    mapped.verify()
    mapped.close()


def test_128bit_file_id_tells_apart_files_sharing_a_64bit_index(fake, mapper, tmp_path):
    """ReFS (a Dev Drive): two files can share the 64-bit file index; FILE_ID_INFO's 128-bit id
    differs. A file replaced by one with the same index, size, mtime and bytes is still seen as
    another file (inode changed), and the registry maps it afresh."""
    path = tmp_path / "w.bin"
    weights(path, 70_000, seed=4)
    key = str(path)
    fake.ids[key] = (0x1234_5678_9ABC_DEF0, (7 << 64) | 42, 42)
    first = load_weights(path, mapper=mapper)
    assert first.path_taken == "mapped"
    mapping = first._mapping
    assert (mapping.identity.device, mapping.identity.inode) == (0x1234_5678_9ABC_DEF0, (7 << 64) | 42)
    fake.ids[key] = (0x1234_5678_9ABC_DEF0, (9 << 64) | 42, 42)  # same 64-bit index
    now = mapper.identity_of_path(key)
    assert mapping.identity.describe_change(now).startswith("inode changed")
    with pytest.raises(StaleFileError, match="inode changed"):
        first.verify()
    with load_weights(path, mapper=mapper) as second:
        assert fake.names().count("CreateFileMappingW") == 2  # not served the old mapping
        assert shared_users(key, mapper) == 1
        assert bytes(second.buffer) == bytes(first.buffer)
    first.close()


def test_file_id_info_unsupported_falls_back_to_the_64bit_index(fake, mapper, tmp_path):
    """Where FileIdInfo is unsupported (FAT, some redirectors: ERROR_INVALID_PARAMETER) the
    identity falls back to the 32-bit serial and 64-bit index, as CPython's stat does, after
    reading the error; the mapping and the registry's check agree, so loads still share."""
    path = tmp_path / "w.bin"
    data = weights(path, 50_000)
    fake.fail("GetFileInformationByHandleEx", 87, times=100)
    with load_weights(path, mapper=mapper) as first, load_weights(path, mapper=mapper) as second:
        fake.assert_error_read_first("GetFileInformationByHandleEx")
        st = os.stat(path)
        identity = first._mapping.identity
        assert (identity.device, identity.inode) == (st.st_dev & 0xFFFFFFFF, st.st_ino & (2**64 - 1))
        assert fake.names().count("CreateFileMappingW") == 1 and shared_users(str(path), mapper) == 2
        assert bytes(second.buffer) == data


def test_verify_reads_the_identity_through_the_path(fake, mapper, tmp_path):
    """No handle is kept, so verify() opens the path (fully shared) and compares: an in-place
    rewrite (allowed: no handle keeps writers out) is a StaleFileError, and so is a removed
    file (on Windows the mapped section refuses the removal; the fake's host allows it)."""
    path = tmp_path / "w.bin"
    data = weights(path, 90_000, seed=6)
    mapped = mapper.map_file(str(path))
    mapped.verify()
    before = os.stat(path)
    with open(path, "r+b") as f:
        f.write(bytes(b ^ 0xFF for b in data[:16]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(StaleFileError, match="edges changed"):
        mapped.verify()
    assert fake.args("CreateFileW")[-1][2] == win.FILE_SHARE_ALL
    if sys.platform != "win32":  # the fake's own host mmap keeps a Windows host from removing it
        os.remove(path)
        with pytest.raises(StaleFileError, match="cannot read its identity now"):
            mapped.verify()
    mapped.close()


# -- failures: right error, last error read first, every handle closed ----------------------
@pytest.mark.parametrize(
    ("code", "error"),
    [
        (2, FileMissingError),
        (3, FileMissingError),
        (5, FileAccessError),
        (32, FileAccessError),
    ],
)
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
    """MapViewOfFile fails after both handles exist: both are closed (mapping, then file),
    after the error read."""
    path = tmp_path / "w.bin"
    weights(path, 1000)
    fake.fail("MapViewOfFile", 8)
    with pytest.raises(MappingError, match="MapViewOfFile failed: Windows error 8") as info:
        mapper.map_file(str(path))
    assert info.value.os_error == 8
    fake.assert_error_read_first("MapViewOfFile")
    assert fake.names()[-2:] == ["CloseHandle", "CloseHandle"]
    [(file, *_)] = fake.args("CreateFileMappingW")
    assert fake.args("CloseHandle")[-1] == (file,)


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


# -- paths ------------------------------------------------------------------------------------
def test_non_ascii_path_reaches_create_file_unchanged(fake, mapper, tmp_path):
    """The str itself reaches CreateFileW (upstream widens byte by byte and breaks these)."""
    path = tmp_path / "wéights_重み_🙂.bin"
    data = weights(path, 5000)
    mapped = mapper.map_file(str(path))
    assert fake.args("CreateFileW")[0][0] == str(path)
    assert bytes(mapped.buffer) == data
    mapped.close()


def upstream_widened(path: str) -> str:
    """The name cc7ec9e (and fbd7fc5) hand CreateFile2 (qnn_windows_file_mapper.cc:51:
    ``std::wstring(s.begin(), s.end())``): each byte of the UTF-8 path becomes one wchar_t, an
    MSVC ``char`` >= 0x80 sign-extended (0xC3 -> U+FFC3). Right for ASCII only."""
    return "".join(chr(b if b < 0x80 else 0xFF00 | b) for b in path.encode("utf-8"))


def test_non_ascii_context_path_upstream_vs_ours(fake, mapper, tmp_path):
    """A context binary under a non-ASCII folder. Upstream: the byte-widened name is another
    name, no such file ("Failed to create file handle for context bin", ERROR_FILE_NOT_FOUND
    or _PATH_NOT_FOUND), and a failed mapping step fails the session (single-context path, no
    direct read). Ours: the str reaches CreateFileW unchanged and the context is mapped."""
    folder = tmp_path / "modèle_重み"
    folder.mkdir()
    path = folder / "ctx_qnn.bin"
    data = weights(path, 80_000, seed=3)
    regions = [(0, 100), (70_000, 10_000)]

    def create(w, views):
        return [bytes(v) for v in views]

    assert upstream_widened(r"C:\m\ctx_qnn.bin") == r"C:\m\ctx_qnn.bin"  # ASCII: the same name
    widened = upstream_widened(str(path))
    assert widened != str(path) and "\uffc3\uffa8" in widened  # "è" (C3 A8) as two other characters
    with pytest.raises(FileMissingError):  # what upstream's open meets: the session fails
        load_context(widened, regions, create, disable_file_mapped_weights="0", mapper=mapper)
    with load_context(path, regions, create, disable_file_mapped_weights="0", mapper=mapper) as ctx:
        assert (ctx.path_taken, ctx.value) == ("mapped", [data[:100], data[70_000:]])
        assert fake.args("CreateFileW")[-1][0] == str(path)
    assert_clean()


def test_win32_path_prefixes_only_long_paths():
    """Short paths pass as given; long ones get \\\\?\\ (or \\\\?\\UNC\\), normalised."""
    assert win32_path("C:\\models\\m.bin") == "C:\\models\\m.bin"
    long_dir = "C:\\" + "\\".join(["d" * 50] * 6)
    assert win32_path(long_dir + "\\m.bin") == "\\\\?\\" + long_dir + "\\m.bin"
    assert win32_path(long_dir + "/x/../m.bin") == "\\\\?\\" + long_dir + "\\m.bin"
    unc = "\\\\server\\share\\" + "\\".join(["u" * 60] * 5) + "\\m.bin"
    assert win32_path(unc) == "\\\\?\\UNC\\" + unc[2:]
    assert win32_path("\\\\?\\" + long_dir) == "\\\\?\\" + long_dir


def test_long_path_limit_counts_utf16_code_units():
    """MAX_PATH counts UTF-16 code units: a character outside the BMP counts twice. 127
    emoji make a 134-character path of 261 units, which needs the prefix; 126 make 259
    units, which does not."""
    assert utf16_units("a") == 1 and utf16_units("é") == 1 and utf16_units("🙂") == 2
    for count, prefixed in ((126, False), (127, True)):
        path = "C:\\" + "🙂" * count + ".bin"
        assert len(path) < win.MAX_PATH
        assert utf16_units(path) == 7 + 2 * count
        assert win32_path(path).startswith("\\\\?\\") is prefixed, count


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
    """close() with a numpy array over the buffer: no UnmapViewOfFile until the array goes
    (and no handle held meanwhile: the view alone keeps the mapping alive)."""
    path = tmp_path / "w.bin"
    data = weights(path, 100_000)
    loaded = load_weights(path, mapper=mapper)
    array = np.frombuffer(loaded.buffer, dtype=np.uint8)
    loaded.close()
    assert "UnmapViewOfFile" not in fake.names()
    assert not fake.handles and len(fake.views) == 1
    assert stats().deferred_unmaps == 1
    assert array.tobytes() == data
    del array
    assert fake.names().count("UnmapViewOfFile") == 1 and not fake.handles
    assert_clean()


def test_region_outliving_close_keeps_the_view_until_released(fake, mapper, tmp_path):
    """A region slice outliving close() keeps the whole view mapped (no handle) until it goes."""
    path = tmp_path / "w.bin"
    data = weights(path, 300_000)
    mapped = mapper.map_file(str(path))
    region = mapped.region(150_000, 100)
    assert mapped.close() is False
    assert not fake.handles and len(fake.views) == 1
    assert bytes(region) == data[150_000:150_100]
    del region
    assert not fake.views and fake.names().count("UnmapViewOfFile") == 1


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
    """Two loads of one file share one mapping (one CreateFileMappingW, one view); the second
    load's identity check goes through the same handle API as the mapping (CreateFileW again,
    fully shared, closed at once)."""
    path = tmp_path / "model_qnn.bin"
    data = weights(path, 250_000, seed=3)
    with load_weights(path, mapper=mapper) as first, load_weights(path, mapper=mapper) as second:
        assert first.path_taken == second.path_taken == "mapped"
        assert bytes(second.buffer) == data and shared_users(str(path), mapper) == 2
        assert fake.names().count("CreateFileMappingW") == fake.names().count("MapViewOfFile") == 1
        assert [args[2] for args in fake.args("CreateFileW")] == [win.FILE_SHARE_READ, win.FILE_SHARE_ALL]
        assert not fake.handles
    assert_clean()


@pytest.mark.parametrize(
    ("failures", "max_attempts", "taken", "attempts"),
    [(1, 1, "fallback", 1), (2, 3, "mapped", 3), (3, 3, "fallback", 3)],
)
def test_map_view_failures_fall_back_or_go_through_the_opt_in_retry(
    fake, mapper, tmp_path, failures, max_attempts, taken, attempts
):
    """A MapViewOfFile failure falls back to the heap after one attempt by default; with the
    opt-in retry it is retried first. Every failed attempt closes both handles."""
    path = tmp_path / "w.bin"
    data = weights(path, 20_000)
    fake.fail("MapViewOfFile", 1455, times=failures)
    with load_weights(path, mapper=mapper, max_attempts=max_attempts) as loaded:
        assert (loaded.path_taken, loaded.attempts) == (taken, attempts)
        assert len(loaded.errors) == min(failures, max_attempts)
        assert all("MapViewOfFile failed: Windows error 1455" in e for e in loaded.errors)
        assert bytes(loaded.buffer) == data
        assert not fake.handles
    assert_clean()


def test_fault_plan_hooks(fake, mapper, tmp_path):
    """FaultPlan's platform_unavailable and map faults act as on POSIX, before or after the
    open (whose handle is closed either way)."""
    path = tmp_path / "w.bin"
    data = weights(path, 20_000)
    plan = FaultPlan(platform_unavailable=True)
    with load_weights(path, mapper=mapper, faults=plan) as loaded:
        assert (loaded.path_taken, loaded.attempts) == ("fallback", 1)
    assert "CreateFileW" not in fake.names()
    with load_weights(path, mapper=mapper, faults=FaultPlan(map_failures=1), max_attempts=2) as loaded:
        assert (loaded.path_taken, loaded.attempts) == ("mapped", 2)
        assert bytes(loaded.buffer) == data
        assert fake.names().count("CreateFileW") == 2 and not fake.handles
    assert_clean()


@pytest.mark.parametrize("stage", ["map", "register", "create"])
def test_load_context_over_the_windows_mapper(fake, mapper, tmp_path, stage):
    """The whole pipeline over kernel32: a fault at each stage falls back to one direct read
    (the mapping step's with the lenient stages: upstream fails the load there), and every
    handle and view is gone after teardown."""
    path = tmp_path / "w.bin"
    data = weights(path, 80_000, seed=8)
    plan = FaultPlan(**{f"{stage}_failures": 1})
    stages = {"fallback_stages": ("map", "register", "create")}
    regions = [(0, 100), (70_000, 10_000)]
    seen = []

    def create(w, views):
        seen.append(w.path_taken)
        return [bytes(v) for v in views]

    with load_context(
        path, regions, create, disable_file_mapped_weights="0", faults=plan, mapper=mapper, **stages
    ) as ctx:
        assert (ctx.path_taken, ctx.fallback_stage) == ("fallback", stage)
        assert ctx.value == [data[:100], data[70_000:]]
        assert seen == (["mapped", "fallback"] if stage == "create" else ["fallback"])
        assert not fake.handles and not fake.views  # the failed attempt's view is unmapped
    with load_context(path, regions, create, disable_file_mapped_weights="0", mapper=mapper) as ctx:
        assert ctx.path_taken == "mapped" and ctx.registered == 2 and len(fake.views) == 1
    assert_clean()
