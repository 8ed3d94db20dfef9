"""Files that change on disk: replaced files get a new mapping, same-size rewrites inside one
mtime tick are caught by the edge hash, verify() detects truncation without touching the
mapped pages, and the SIGBUS that remains on POSIX is confined to the process that touches."""

from __future__ import annotations

import os
import signal

import pytest
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    GRANULARITY,
    assert_clean,
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
    bytes, while the old load keeps reading the old bytes from the old inode (which it holds
    open: its pages stay valid, so its verify() passes)."""
    path = tmp_path / "model_qnn.bin"
    old_data = write_file(path, SIZE, seed=1)
    old = load_weights(path)
    staging = tmp_path / "model_qnn.bin.tmp"
    new_data = write_file(staging, SIZE + 10, seed=2)
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


def test_same_size_rewrite_within_one_mtime_tick_is_detected(tmp_path):
    """An in-place, same-size rewrite with the old mtime_ns restored (same inode, size and
    mtime: stat alone cannot tell) is detected by the edge hash: the next load gets a new
    mapping and verify() names the change."""
    path = tmp_path / "rebuilt.bin"
    write_file(path, SIZE, seed=3)
    old = load_weights(path)
    before = os.stat(path)
    new_data = make_bytes(SIZE, seed=4)
    with open(path, "r+b") as f:
        f.write(new_data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino, before.st_size, before.st_mtime_ns,
    )

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
    than two edge blocks is seen."""
    path = tmp_path / "large.bin"
    size = 4 * IDENTITY_EDGE_BYTES + 5
    data = write_file(path, size, seed=5)
    old = load_weights(path)
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(size - 3)
        f.write(bytes([data[size - 3] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(StaleFileError, match="edge_hash"):
        old.verify()
    with load_weights(path) as new:
        assert stats().live_mappings == 2
        assert new.buffer[size - 3] == data[size - 3] ^ 0xFF
    old.close()


def test_verify_detects_truncation_without_touching_pages(tmp_path):
    """After truncation, verify() raises StaleFileError from the open file's stat and a
    pread, never reading the mapping: touching pages past the new end would SIGBUS this
    very process, so surviving the call is part of the proof."""
    path = tmp_path / "truncated.bin"
    data = write_file(path, SIZE, seed=6)
    weights = load_weights(path)
    region = weights.region(2 * GRANULARITY + 1, 50)
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
