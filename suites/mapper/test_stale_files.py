"""Files that change on disk: replaced files get a new mapping, same-size rewrites inside one
mtime tick are caught by the edge hash, verify() detects truncation without touching the
mapped pages, and the SIGBUS that remains on POSIX is confined to the process that touches.

On Windows the mapper holds the file open with FILE_SHARE_READ only while anything is mapped,
so replacing, rewriting, truncating or deleting a mapped file is refused (PermissionError):
the same tests assert that refusal, then make the change after closing and check that the
next load sees it."""

from __future__ import annotations

import os
import signal

import pytest
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    GRANULARITY,
    WINDOWS,
    assert_clean,
    assert_refused_while_mapped,
    make_bytes,
    run_child,
    stats_guard,
    write_file,
)

from mapper_impl import StaleFileError, create_mapper, load_weights, shared_users, stats
from mapper_impl._common import IDENTITY_EDGE_BYTES

SIZE = 3 * GRANULARITY + 99


def test_replaced_file_gets_a_new_mapping(tmp_path):
    """After os.replace with new content, a new load maps the new file and reads the new
    bytes, while the old load keeps reading the old bytes from the old inode (which it holds
    open: its pages stay valid, so its verify() passes).

    Windows: the replace is refused while the old load maps the file (its bytes and identity
    stay intact); once it is closed the replace goes through and the next load maps the new
    file."""
    path = tmp_path / "model_qnn.bin"
    old_data = write_file(path, SIZE, seed=1)
    old = load_weights(path)
    staging = tmp_path / "model_qnn.bin.tmp"
    new_data = write_file(staging, SIZE + 10, seed=2)
    if WINDOWS:
        assert_refused_while_mapped(os.replace, staging, path)
        old.verify()
        assert bytes(old.buffer) == old_data
        assert path.read_bytes() == old_data
        old.close()
        os.replace(staging, path)  # nothing maps it now: writers are welcome again
        with load_weights(path) as new:
            assert new.path_taken == "mapped"
            assert bytes(new.buffer) == new_data
            assert stats().live_mappings == 1
            new.verify()
        assert_clean()
        return
    os.replace(staging, path)

    new = load_weights(path)
    assert bytes(new.buffer) == new_data
    assert bytes(old.buffer) == old_data
    assert stats().live_mappings == 2
    assert shared_users(str(path)) == 1  # the new mapping only: the old one is not served
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
        before.st_ino, before.st_size, before.st_mtime_ns,
    )


def test_same_size_rewrite_within_one_mtime_tick_is_detected(tmp_path):
    """An in-place, same-size rewrite with the old mtime_ns restored (same inode, size and
    mtime: stat alone cannot tell) is detected by the edge hash: the next load gets a new
    mapping and verify() names the change.

    Windows: opening the mapped file for writing is refused while it is mapped; after close,
    the same rewrite changes only the edge hash of the mapper's identity (device, file index,
    size and mtime equal), and the next load maps the new bytes."""
    path = tmp_path / "rebuilt.bin"
    old_data = write_file(path, SIZE, seed=3)
    old = load_weights(path)
    new_data = make_bytes(SIZE, seed=4)
    if WINDOWS:
        mapper = create_mapper()
        identity = mapper.identity_of_path(str(path))
        assert_refused_while_mapped(open, path, "r+b")
        old.verify()
        assert bytes(old.buffer) == old_data
        old.close()
        rewrite_keeping_mtime(path, 0, new_data)
        changed = mapper.identity_of_path(str(path))
        assert identity.describe_change(changed).startswith("edge_hash changed")
        with load_weights(path) as new:
            assert bytes(new.buffer) == new_data
            assert new.path_taken == "mapped"
        assert_clean()
        return
    rewrite_keeping_mtime(path, 0, new_data)

    with pytest.raises(StaleFileError, match="edge_hash changed"):
        old.verify()
    new = load_weights(path)
    assert stats().live_mappings == 2
    assert shared_users(str(path)) == 1
    assert bytes(new.buffer) == new_data
    # MAP_SHARED: an in-place rewrite is visible through the old mapping too (page cache)
    assert bytes(old.buffer) == new_data
    old.close()
    new.close()
    assert_clean()


def test_rewrite_in_the_last_edge_block_of_a_large_file_is_detected(tmp_path):
    """The edge hash covers the tail: a one-byte change near the end of a file much larger
    than two edge blocks is seen.

    Windows: the write is refused while mapped; after close, the mapper's identity sees the
    tail change (edge hash only) and the next load reads the new byte."""
    path = tmp_path / "large.bin"
    size = 4 * IDENTITY_EDGE_BYTES + 5
    data = write_file(path, size, seed=5)
    old = load_weights(path)
    flipped = bytes([data[size - 3] ^ 0xFF])
    if WINDOWS:
        mapper = create_mapper()
        identity = mapper.identity_of_path(str(path))
        assert_refused_while_mapped(open, path, "r+b")
        old.verify()
        assert old.buffer[size - 3] == data[size - 3]
        old.close()
        rewrite_keeping_mtime(path, size - 3, flipped)
        changed = mapper.identity_of_path(str(path))
        assert identity.describe_change(changed).startswith("edge_hash changed")
        with load_weights(path) as new:
            assert new.buffer[size - 3] == data[size - 3] ^ 0xFF
        assert_clean()
        return
    rewrite_keeping_mtime(path, size - 3, flipped)
    with pytest.raises(StaleFileError, match="edge_hash"):
        old.verify()
    with load_weights(path) as new:
        assert stats().live_mappings == 2
        assert new.buffer[size - 3] == data[size - 3] ^ 0xFF
    old.close()


def test_verify_detects_truncation_without_touching_pages(tmp_path):
    """After truncation, verify() raises StaleFileError from the open file's stat and a
    pread, never reading the mapping: touching pages past the new end would SIGBUS this
    very process, so surviving the call is part of the proof.

    Windows: the truncation is refused while the file is mapped, also while only a region
    view outlives close() (the view keeps the file handle, whose share mode keeps writers
    out); every page stays readable. After the last view goes, the truncation goes through
    and the next load maps the 100 bytes left."""
    path = tmp_path / "truncated.bin"
    data = write_file(path, SIZE, seed=6)
    weights = load_weights(path)
    region = weights.region(2 * GRANULARITY + 1, 50)
    if WINDOWS:
        assert_refused_while_mapped(os.truncate, path, 100)
        weights.verify()
        assert bytes(weights.buffer) == data  # every page, past the would-be end too
        weights.close()
        assert_refused_while_mapped(os.truncate, path, 100)  # the region view still maps it
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


@pytest.mark.skipif(WINDOWS, reason="SIGBUS is POSIX: Windows refuses to truncate a mapped file "
                    "(test_truncating_a_mapped_file_is_refused_on_windows)")
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
    import mapper_impl as m
    path = sys.argv[1]
    w = m.load_weights(path)
    assert w.path_taken == "mapped"
    try:
        os.truncate(path, 4096)
    except OSError as err:
        print("refused:", type(err).__name__, err.errno, getattr(err, "winerror", None), flush=True)
    else:
        print("truncated", flush=True)
    w.verify()
    print("verified", flush=True)
    print("touching", w.buffer[3 * 4096], flush=True)   # past the refused new end
    w.close()
    print("clean", m.stats().is_clean(), flush=True)
"""


@pytest.mark.skipif(not WINDOWS, reason="Windows share modes: POSIX lets the truncation happen "
                    "(test_touching_a_truncated_mapping_kills_only_the_child_with_sigbus)")
def test_truncating_a_mapped_file_is_refused_on_windows(tmp_path):
    """The Windows side of the SIGBUS test: in a child, os.truncate on a mapped file raises
    PermissionError (the mapper's FILE_SHARE_READ handle keeps writers out), verify() passes,
    touching the page past the refused new end reads the file's byte, and the child closes
    cleanly and exits 0. The file is unchanged; the parent can truncate it afterwards."""
    path = tmp_path / "victim.bin"
    data = write_file(path, 4 * 4096, seed=8)
    result = run_child(TRUNCATE_CHILD, str(path))
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("refused: "), lines
    name, _errno, winerror = lines[0].split()[1:]
    assert name == "PermissionError" or winerror in ("5", "32", "1224"), lines[0]
    assert lines[1:] == ["verified", f"touching {data[3 * 4096]}", "clean True"]
    assert os.path.getsize(path) == 4 * 4096
    assert path.read_bytes() == data
    os.truncate(path, 4096)  # the child is gone and its handles with it
    with load_weights(path) as w:
        assert bytes(w.buffer) == data[:4096]
