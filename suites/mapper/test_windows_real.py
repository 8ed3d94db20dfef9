"""WindowsFileMapper against the real kernel32: these run in the Windows CI job
(.github/workflows/windows-mapper.yml) and skip elsewhere with that reason."""

from __future__ import annotations

import os
import sys

import pytest
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    REFUSED_WINERRORS,
    assert_clean,
    assert_refused_while_mapped,
    stats_guard,
    write_file,
)

from mapper_impl import load_weights
from mapper_impl._windows import WindowsFileMapper

windows_only = pytest.mark.skipif(sys.platform != "win32", reason="needs the real kernel32")


@windows_only
@pytest.mark.parametrize("name", ["model_qnn.bin", "wéights_重み_🙂.bin"])
def test_real_kernel32_maps_a_file(tmp_path, name):
    """Map a real file (also under a non-ASCII name); regions; stats clean after close."""
    path = tmp_path / name
    data = write_file(path, 300_000, seed=5)
    mapper = WindowsFileMapper()
    assert mapper.allocation_granularity >= 4096
    mapped = mapper.map_file(str(path))
    assert bytes(mapped.buffer) == data
    assert bytes(mapped.region(200_001, 77)) == data[200_001:200_078]
    mapped.verify()
    assert mapped.close() is True
    assert_clean()


@windows_only
def test_real_kernel32_keeps_writers_out_while_mapped(tmp_path):
    """FILE_SHARE_READ only: while mapped, opening for writing, truncating, replacing and
    deleting the file all fail (PermissionError: open() and os.truncate go through the CRT and
    report the sharing violation as errno EACCES with no winerror; os.replace and os.remove
    carry the Win32 error), and the mapped bytes are untouched; once closed, writers are
    welcome again."""
    path = tmp_path / "w.bin"
    data = write_file(path, 100_000)
    staging = tmp_path / "w.bin.new"
    write_file(staging, 100_000, seed=1)
    with load_weights(path, mapper=WindowsFileMapper()) as loaded:
        assert loaded.path_taken == "mapped"
        for action, args in ((open, (path, "r+b")), (os.truncate, (path, 10)),
                             (os.replace, (staging, path)), (os.remove, (path,))):
            err = assert_refused_while_mapped(action, *args)
            assert getattr(err, "winerror", None) in (None, *REFUSED_WINERRORS), (action, err)
        loaded.verify()
        assert bytes(loaded.buffer) == data
    with open(path, "r+b"):
        pass  # closed: writers are welcome again
    os.remove(path)
    assert_clean()


@windows_only
def test_real_kernel32_identity_is_stable_for_the_registry(tmp_path):
    """The registry compares the mapping's identity with the mapper's identity_of_path (both
    through GetFileInformationByHandle, never os.stat, whose volume serial is 64-bit since
    Python 3.12): they must agree, or no load would ever share a mapping."""
    path = tmp_path / "w.bin"
    write_file(path, 100_000)
    mapper = WindowsFileMapper()
    mapped = mapper.map_file(str(path))
    try:
        assert mapped.identity == mapper.identity_of_path(str(path))
    finally:
        mapped.close()
