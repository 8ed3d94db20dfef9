"""WindowsFileMapper against the real kernel32: these run in the Windows CI jobs
(.github/workflows/windows-mapper.yml and the Windows ARM64 lane) and skip elsewhere with that
reason."""

from __future__ import annotations

import os
import sys

import psutil
import pytest
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    assert_clean,
    assert_truncation_refused_while_mapped,
    data_address,
    is_refused_while_mapped,
    open_handle_count,
    stats_guard,
    write_file,
)

from mapper_impl import FileMissingError, load_context, load_weights
from mapper_impl._windows import WindowsFileMapper

windows_only = pytest.mark.skipif(sys.platform != "win32", reason="needs the real kernel32")


def process_holds_file(path) -> bool:
    """Does this process hold an open handle on ``path`` (psutil lists open files)?"""
    target = os.path.normcase(os.path.realpath(path))
    return any(os.path.normcase(os.path.realpath(f.path)) == target for f in psutil.Process().open_files())


@windows_only
@pytest.mark.parametrize("name", ["model_qnn.bin", "wéights_重み_🙂.bin"])
def test_real_kernel32_maps_a_file(tmp_path, name):
    """Map a real file (also under a non-ASCII name): regions are base + offset; no handle on
    the file is left open once the view exists (upstream closes both); stats clean after."""
    path = tmp_path / name
    data = write_file(path, 300_000, seed=5)
    mapper = WindowsFileMapper()
    assert mapper.allocation_granularity >= 4096
    mapped = mapper.map_file(str(path))
    assert not process_holds_file(path)
    assert bytes(mapped.buffer) == data
    region = mapped.region(200_001, 77)
    assert bytes(region) == data[200_001:200_078]
    assert data_address(region) == mapped.base_address + 200_001
    mapped.verify()
    del region
    assert mapped.close() is True
    assert_clean()


@windows_only
def test_real_kernel32_mapped_file_rules(tmp_path):
    """With the handles closed, as upstream: another writer may open the file and write in
    place, and the write is seen through the view (one section backs both); truncation is
    refused with ERROR_USER_MAPPED_FILE while the view exists; a delete or replace is refused
    or, where the file system allows it, leaves the view's bytes intact. Once closed, every
    operation is welcome."""
    path = tmp_path / "w.bin"
    data = write_file(path, 100_000)
    staging = tmp_path / "w.bin.new"
    write_file(staging, 100_000, seed=1)
    with load_weights(path, mapper=WindowsFileMapper()) as loaded:
        assert loaded.path_taken == "mapped"
        with open(path, "r+b") as writer:  # no share mode of ours keeps it out
            writer.seek(10)
            writer.write(b"\x00\x01\x02")
        assert bytes(loaded.buffer[10:13]) == b"\x00\x01\x02"
        expected = data[:10] + b"\x00\x01\x02" + data[13:]
        assert bytes(loaded.buffer) == expected
        assert_truncation_refused_while_mapped(path, 10)
        for action, args in ((os.replace, (staging, path)), (os.remove, (path,))):
            try:
                action(*args)
            except OSError as err:
                assert is_refused_while_mapped(err), (action, err)
            assert bytes(loaded.buffer) == expected, action
    if os.path.exists(path):
        os.truncate(path, 10)  # closed: truncation is welcome again
        os.remove(path)
    with pytest.raises(FileMissingError):
        load_weights(path, mapper=WindowsFileMapper())
    assert_clean()


@windows_only
def test_real_kernel32_identity_is_file_id_info(tmp_path):
    """The registry compares the mapping's identity with the mapper's identity_of_path (both
    FILE_ID_INFO through a handle): they agree, and they are what os.stat reports on Python
    3.12+ (which reads FileIdInfo too)."""
    path = tmp_path / "w.bin"
    write_file(path, 100_000)
    mapper = WindowsFileMapper()
    mapped = mapper.map_file(str(path))
    try:
        assert mapped.identity == mapper.identity_of_path(str(path))
        if sys.version_info >= (3, 12):
            st = os.stat(path)
            assert (mapped.identity.device, mapped.identity.inode) == (st.st_dev, st.st_ino)
    finally:
        mapped.close()


@windows_only
def test_real_kernel32_contexts_hold_no_handles(tmp_path):
    """Eight contexts over one file, 2000 registered regions each: one view, and the
    process's handle count is what it was before the first load."""
    path = tmp_path / "w.bin"
    write_file(path, 200_000, seed=3)
    regions = [((i * 97) % 199_000, 1 + i % 900) for i in range(2000)]
    mapper = WindowsFileMapper()
    load_weights(path, mapper=mapper).close()  # warm-up: first-use allocations are not leaks
    before = open_handle_count()
    contexts = [
        load_context(path, regions, lambda w, views: len(views), disable_file_mapped_weights="0", mapper=mapper)
        for _ in range(8)
    ]
    assert all(c.path_taken == "mapped" and c.registered == 2000 for c in contexts)
    assert open_handle_count() == before
    for context in contexts:
        context.close()
    assert_clean()
