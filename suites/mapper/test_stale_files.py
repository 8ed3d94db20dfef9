"""Files that change on disk: replaced files get a new mapping, same-size rewrites inside one
mtime tick are caught by the file's edges, verify() detects truncation without touching the
mapped pages, and the SIGBUS that remains on POSIX is confined to the process that touches.

On Windows the mapper closes its handles once the view is mapped (as upstream), so other
processes may open and rewrite a mapped file in place (coherent with the view: the same
flows as POSIX), while truncating it stays refused by the OS (ERROR_USER_MAPPED_FILE) as long
as a view exists; a replace may be refused too, and then happens after the load closes.
verify() on Windows compares with what the path names now (no handle is kept)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    GRANULARITY,
    WINDOWS,
    assert_clean,
    assert_truncation_refused_while_mapped,
    is_refused_while_mapped,
    make_bytes,
    run_child,
    stats_guard,
    write_file,
)

from mapper_impl import StaleFileError, load_weights, shared_users, stats
from mapper_impl._common import IDENTITY_EDGE_BYTES

SIZE = 3 * GRANULARITY + 99


def test_replaced_file_gets_a_new_mapping(tmp_path):
    """After os.replace with new content, a new load maps the new file and reads the new
    bytes, while the old load keeps reading the old bytes from the old file (still mapped:
    its pages stay valid). POSIX: the old load's verify() passes (it checks the mapped inode
    through its descriptor). Windows: verify() compares with what the path names now, so it
    reports the replacement; and if Windows refuses the replace while the old file is mapped,
    it goes through once that load is closed, and the next load maps the new file."""
    path = tmp_path / "model_qnn.bin"
    old_data = write_file(path, SIZE, seed=1)
    old = load_weights(path)
    staging = tmp_path / "model_qnn.bin.tmp"
    new_data = write_file(staging, SIZE + 10, seed=2)
    try:
        os.replace(staging, path)
    except OSError as err:
        if not (WINDOWS and is_refused_while_mapped(err)):
            raise
        old.verify()
        assert bytes(old.buffer) == old_data and path.read_bytes() == old_data
        old.close()
        os.replace(staging, path)  # nothing maps it now
        with load_weights(path) as new:
            assert new.path_taken == "mapped"
            assert bytes(new.buffer) == new_data
            assert stats().live_mappings == 1
            new.verify()
        assert_clean()
        return

    new = load_weights(path)
    assert bytes(new.buffer) == new_data
    assert bytes(old.buffer) == old_data
    assert stats().live_mappings == 2
    assert shared_users(str(path)) == 1  # the new mapping only: the old one is not served
    if WINDOWS:
        with pytest.raises(StaleFileError):
            old.verify()
    else:
        old.verify()
    new.verify()
    with load_weights(path) as third:  # later loads share the new mapping
        assert shared_users(str(path)) == 2
        assert bytes(third.buffer) == new_data
    old.close()
    assert bytes(new.buffer) == new_data
    new.close()
    assert_clean()


def rewrite_keeping_mtime(path, offset: int, data: bytes) -> None:
    """Write ``data`` at ``offset`` in place, then restore the old atime/mtime to the ns: a
    rewrite inside one mtime tick, which stat alone cannot see."""
    before = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )


def test_same_size_rewrite_within_one_mtime_tick_is_detected(tmp_path):
    """An in-place, same-size rewrite with the old mtime_ns restored (same inode, size and
    mtime: stat alone cannot tell) is detected by the file's edges: the next load gets a new
    mapping and verify() names the change. The rewrite is visible through the old mapping
    too (POSIX MAP_SHARED / the page cache; Windows: the file's one section backs every view
    and the write, and no handle of ours keeps the writer out)."""
    path = tmp_path / "rebuilt.bin"
    write_file(path, SIZE, seed=3)
    old = load_weights(path)
    new_data = make_bytes(SIZE, seed=4)
    rewrite_keeping_mtime(path, 0, new_data)

    with pytest.raises(StaleFileError, match="edges changed"):
        old.verify()
    new = load_weights(path)
    assert stats().live_mappings == 2
    assert shared_users(str(path)) == 1
    assert bytes(new.buffer) == new_data
    assert bytes(old.buffer) == new_data  # coherent: one file, one set of pages
    old.close()
    new.close()
    assert_clean()


def test_rewrite_in_the_last_edge_block_of_a_large_file_is_detected(tmp_path):
    """The edges cover the tail: a one-byte change near the end of a file much larger
    than two edge blocks is seen (on Windows too: the mapper keeps no handle that would keep
    the writer out)."""
    path = tmp_path / "large.bin"
    size = 4 * IDENTITY_EDGE_BYTES + 5
    data = write_file(path, size, seed=5)
    old = load_weights(path)
    flipped = bytes([data[size - 3] ^ 0xFF])
    rewrite_keeping_mtime(path, size - 3, flipped)
    with pytest.raises(StaleFileError, match="edges changed"):
        old.verify()
    with load_weights(path) as new:
        assert stats().live_mappings == 2
        assert new.buffer[size - 3] == data[size - 3] ^ 0xFF
    old.close()


def test_verify_detects_truncation_without_touching_pages(tmp_path):
    """After truncation, verify() raises StaleFileError from the open file's stat and a
    pread, never reading the mapping: touching pages past the new end would SIGBUS this
    very process, so surviving the call is part of the proof.

    Windows: the truncation is refused (ERROR_USER_MAPPED_FILE) while the file is mapped,
    also while only a region outlives close() (it pins the view; the mapper holds no handle);
    every page stays readable. After the last region goes, the truncation goes through and
    the next load maps the 100 bytes left."""
    path = tmp_path / "truncated.bin"
    data = write_file(path, SIZE, seed=6)
    weights = load_weights(path)
    region = weights.region(2 * GRANULARITY + 1, 50)
    if WINDOWS:
        assert_truncation_refused_while_mapped(path, 100)
        weights.verify()
        assert bytes(weights.buffer) == data  # every page, past the would-be end too
        weights.close()
        assert_truncation_refused_while_mapped(path, 100)  # the region still pins the view
        assert bytes(region) == data[2 * GRANULARITY + 1 : 2 * GRANULARITY + 51]
        assert os.path.getsize(path) == SIZE
        del region
        assert_clean()
        os.truncate(path, 100)
        with load_weights(path) as fresh:
            assert fresh.size == 100
            assert bytes(fresh.buffer) == data[:100]
        assert_clean()
        return
    os.truncate(path, 100)
    with pytest.raises(StaleFileError, match=f"size changed \\({SIZE} -> 100\\)"):
        weights.verify()
    assert bytes(weights.buffer[:100]) == data[:100]  # the first page is still backed
    # a new load maps the file as it is now, not the stale mapping
    with load_weights(path) as fresh:
        assert fresh.size == 100
        assert bytes(fresh.buffer) == data[:100]
        assert shared_users(str(path)) == 1
    del region  # unmapping a view past EOF is safe; only touching it is not
    weights.close()
    assert_clean()


def test_heap_load_is_immune_to_later_changes(tmp_path):
    """A heap load is a private copy: replaced or truncated files do not affect it and
    verify() has nothing to check."""
    path = tmp_path / "copy.bin"
    data = write_file(path, SIZE, seed=7)
    with load_weights(path, disable_file_mapped_weights="1") as heap:
        os.truncate(path, 10)
        heap.verify()
        assert bytes(heap.buffer) == data


SIGBUS_CHILD = """
    import os, sys
    import mapper_impl as m
    path = sys.argv[1]
    w = m.load_weights(path)
    assert w.path_taken == "mapped"
    os.truncate(path, 4096)
    try:
        w.verify()
    except m.StaleFileError as err:
        print("verify:", err, flush=True)
    print("touching", flush=True)
    w.buffer[3 * 4096]   # a page past the new end of file
    print("survived", flush=True)
"""


@pytest.mark.skipif(
    WINDOWS,
    reason="SIGBUS is POSIX: Windows refuses to truncate a mapped file "
    "(test_truncating_a_mapped_file_is_refused_on_windows)",
)
def test_touching_a_truncated_mapping_kills_only_the_child_with_sigbus(tmp_path):
    """Documents what remains on POSIX: a process that touches a mapped page past the end
    of a truncated file dies of SIGBUS (no Python handler can run). verify() warned first,
    and the parent - like the harness, which runs sessions in worker processes - is
    unaffected."""
    path = tmp_path / "victim.bin"
    write_file(path, 4 * 4096, seed=8)
    result = run_child(SIGBUS_CHILD, str(path))
    assert result.returncode == -signal.SIGBUS, (result.returncode, result.stderr)
    assert "verify: " in result.stdout and "size changed" in result.stdout
    assert "touching" in result.stdout
    assert "survived" not in result.stdout
    # the parent is fine and can still map what is left of the file
    assert os.path.getsize(path) == 4096
    with load_weights(path) as w:
        assert len(w.buffer) == 4096


TRUNCATE_CHILD = """
    import os, sys
    sys.path.insert(0, sys.argv[2])
    import mapper_impl as m
    from mapper_support import set_end_of_file_error
    path = sys.argv[1]
    w = m.load_weights(path)
    assert w.path_taken == "mapped"
    print("SetEndOfFile error", set_end_of_file_error(path, 4096), flush=True)
    try:
        with open(path, "r+b") as f:  # not os.truncate: see assert_truncation_refused_while_mapped
            f.truncate(4096)
    except OSError as err:
        print("truncate refused", flush=True)
    else:
        print("truncated", flush=True)
    w.verify()
    print("verified", flush=True)
    print("touching", w.buffer[3 * 4096], flush=True)   # past the refused new end
    w.close()
    print("clean", m.stats().is_clean(), flush=True)
"""


@pytest.mark.skipif(
    not WINDOWS,
    reason="Windows refuses truncation: POSIX lets the truncation happen "
    "(test_touching_a_truncated_mapping_kills_only_the_child_with_sigbus)",
)
def test_truncating_a_mapped_file_is_refused_on_windows(tmp_path):
    """The Windows side of the SIGBUS test: in a child, truncating a mapped file fails with
    ERROR_USER_MAPPED_FILE (1224) although the mapper closed its handles (the view alone is
    enough), a file object's truncate raises, verify() passes, touching the page past the
    refused new end reads the file's byte, and the child closes cleanly and exits 0. The file is unchanged;
    the parent can truncate it afterwards."""
    path = tmp_path / "victim.bin"
    data = write_file(path, 4 * 4096, seed=8)
    result = run_child(TRUNCATE_CHILD, str(path), str(Path(__file__).parent))
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert result.stdout.splitlines() == [
        "SetEndOfFile error 1224",
        "truncate refused",
        "verified",
        f"touching {data[3 * 4096]}",
        "clean True",
    ]
    assert os.path.getsize(path) == 4 * 4096
    assert path.read_bytes() == data
    os.truncate(path, 4096)  # the child is gone and its view with it
    with load_weights(path) as w:
        assert bytes(w.buffer) == data[:4096]
