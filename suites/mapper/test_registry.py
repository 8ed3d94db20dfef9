"""The registry: one mapping per file per process, found under any spelling of its path, and
released under the key it was registered with, whatever the path names by then."""

from __future__ import annotations

import os
import threading

import pytest
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    assert_clean,
    stats_guard,
    symlink_or_skip,
    write_file,
)

from mapper_impl import FileMapper, create_mapper, load_weights, shared_users, stats


def test_two_spellings_of_one_path_share_one_mapping(tmp_path, monkeypatch):
    """Relative, dotted and symlinked spellings of one file resolve to one mapping."""
    path = tmp_path / "w.bin"
    write_file(path, 5000)
    (tmp_path / "sub").mkdir()
    link = tmp_path / "link.bin"
    symlink_or_skip(link, path)
    monkeypatch.chdir(tmp_path)
    spellings = [str(path), "w.bin", "./sub/../w.bin", str(link)]
    loads = [load_weights(p) for p in spellings]
    assert stats().live_mappings == 1
    assert shared_users(str(path)) == len(spellings)
    assert len({bytes(w.buffer[:32]) for w in loads}) == 1
    for w in loads:
        w.close()
    assert_clean()


def test_a_file_is_keyed_by_what_it_is_not_how_it_is_spelled(tmp_path):
    """One ``stat`` keys the table (device and inode): a hard link of a mapped file shares its
    mapping; a file replaced under the same name (a new inode) gets a mapping of its own while
    the old one's users keep theirs (Windows refuses the replacement while the file is mapped)."""
    path = tmp_path / "w.bin"
    write_file(path, 5000, seed=1)
    link = tmp_path / "hard.bin"
    os.link(path, link)
    first, second = load_weights(path), load_weights(link)
    assert stats().live_mappings == 1 and shared_users(str(link)) == 2
    replaced = tmp_path / "new.bin"
    write_file(replaced, 5000, seed=2)
    if os.name == "nt":
        # upstream opens with FILE_SHARE_READ only and the section keeps that file object, so
        # Windows refuses to replace a mapped file: the users keep the one mapping they share
        with pytest.raises(PermissionError):
            os.replace(replaced, path)
        assert stats().live_mappings == 1 and shared_users(str(path)) == 2
        old = bytes(first.buffer[:16])
        for w in (first, second):
            w.close()
        os.replace(replaced, path)
        with load_weights(path) as third:
            assert stats().live_mappings == 1 and bytes(third.buffer[:16]) != old
        assert_clean()
        return
    os.replace(replaced, path)
    third = load_weights(path)
    assert stats().live_mappings == 2 and shared_users(str(path)) == 1
    assert bytes(third.buffer[:16]) != bytes(first.buffer[:16])
    for w in (first, second, third):
        w.close()
    assert_clean()


def test_symlink_retargeted_while_mapped(tmp_path):
    """Retargeting a symlink while its file is mapped must not break close(): the load
    releases the mapping it registered, the registry forgets it, and a later load of the
    original file gets a fresh, working mapping."""
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    data_a, data_b = write_file(a, 6000, seed=1), write_file(b, 7000, seed=2)
    link = tmp_path / "ctx.bin"
    symlink_or_skip(link, a)
    weights = load_weights(link)
    assert bytes(weights.buffer) == data_a
    tmp_link = tmp_path / "ctx.tmp"
    tmp_link.symlink_to(b)
    # atomic retarget, as a deploy step would do: it renames the link, not the mapped file,
    # so Windows allows it while a.bin is mapped
    os.replace(tmp_link, link)
    weights.close()
    assert shared_users(str(a)) == 0
    assert_clean()
    with load_weights(a) as again, load_weights(link) as other:
        assert bytes(again.buffer) == data_a
        assert bytes(other.buffer) == data_b
        assert stats().live_mappings == 2
    assert_clean()


def test_symlink_retarget_does_not_drop_another_files_entry(tmp_path):
    """Closing a load made through a retargeted symlink must not unregister the mapping now
    registered for the symlink's new target."""
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    write_file(a, 6000, seed=1)
    write_file(b, 7000, seed=2)
    link = tmp_path / "ctx.bin"
    symlink_or_skip(link, a)
    via_link = load_weights(link)
    link.unlink()  # removes the link, not the mapped a.bin (allowed on Windows too)
    link.symlink_to(b)
    direct_b = load_weights(b)
    via_link.close()
    assert shared_users(str(b)) == 1
    with load_weights(b) as second_b:
        assert stats().live_mappings == 1  # still shared with direct_b
        assert shared_users(str(b)) == 2
        assert bytes(second_b.buffer) == bytes(direct_b.buffer)
    direct_b.close()
    assert_clean()


def test_relative_path_closed_after_chdir(tmp_path, monkeypatch):
    """A load made with a relative path closes cleanly after the working directory changed."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    data = write_file(tmp_path / "one" / "w.bin", 4000, seed=3)
    monkeypatch.chdir(tmp_path / "one")
    weights = load_weights("w.bin")
    monkeypatch.chdir(tmp_path / "two")
    weights.close()
    assert_clean()
    with load_weights(tmp_path / "one" / "w.bin") as again:
        assert bytes(again.buffer) == data


# -- the registry never holds its lock during file I/O --------------------------------------


class BlockingMapper(FileMapper):
    """The platform's real mapper, except that opening (map_file) or identifying
    (identity_of_path) one chosen file blocks until the test releases it: a stalled network
    share or a FIFO swapped in, made deterministic. Counts map_file calls per path."""

    def __init__(self, slow_path, *, block: str) -> None:
        self.real = create_mapper()
        self.name = f"blocking-{self.real.name}"
        self.allocation_granularity = self.real.allocation_granularity
        self.slow = os.path.realpath(slow_path)
        self.block = block  # "map" or "identity"
        self.entered = threading.Event()
        self.release = threading.Event()
        self.maps: dict[str, int] = {}
        self._lock = threading.Lock()

    def _maybe_block(self, path, where: str) -> None:
        if self.block == where and os.path.realpath(path) == self.slow:
            self.entered.set()
            assert self.release.wait(timeout=60), "the test never released the slow open"

    def identity_of_path(self, path):
        self._maybe_block(path, "identity")
        return self.real.identity_of_path(path)

    def map_file(self, path, faults=None):
        with self._lock:
            key = os.path.realpath(path)
            self.maps[key] = self.maps.get(key, 0) + 1
        self._maybe_block(path, "map")
        return self.real.map_file(path, faults)


def in_thread(fn, *args):
    """Run ``fn(*args)`` in a thread; return (thread, box) where box gets its result/error."""
    box: dict = {}

    def run() -> None:
        try:
            box["result"] = fn(*args)
        except BaseException as err:  # reported by the caller
            box["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def load_and_close_others(mapper, fast, kept) -> str:
    """What must not wait for the slow file: load another file (mapped), read it, close it,
    and close a load of a third file made earlier."""
    with load_weights(fast, mapper=mapper) as w:
        assert w.path_taken == "mapped"
        first = bytes(w.buffer[:4])
    kept.close()
    return first.hex()


@pytest.mark.parametrize("block", ["map", "identity"])
def test_a_blocked_open_does_not_stall_other_files(tmp_path, block):
    """While one thread's open (or identity read) of file A is blocked, loads and closes of
    other files complete; a second load of A waits for the first (A is still mapped once);
    once released, both loads of A share one mapping. With the table lock held during file
    I/O, the other files' load would hang here until A's open returns."""
    slow, fast, third = tmp_path / "slow.bin", tmp_path / "fast.bin", tmp_path / "third.bin"
    slow_data = write_file(slow, 9000, seed=1)
    fast_data = write_file(fast, 7000, seed=2)
    write_file(third, 5000, seed=3)
    mapper = BlockingMapper(slow, block=block)
    kept = load_weights(third, mapper=mapper)
    held = load_weights(slow, mapper=mapper) if block == "identity" else None  # A mapped: acquire reads identity

    slow_thread, slow_box = in_thread(lambda: load_weights(slow, mapper=mapper))
    assert mapper.entered.wait(timeout=30), "the slow load never reached the blocking call"
    twin_thread, twin_box = in_thread(lambda: load_weights(slow, mapper=mapper))

    other_thread, other_box = in_thread(load_and_close_others, mapper, fast, kept)
    other_thread.join(timeout=30)
    assert not other_thread.is_alive(), "another file's load/close waited for the blocked open"
    assert other_box == {"result": fast_data[:4].hex()}
    assert slow_thread.is_alive() and twin_thread.is_alive()  # A's loads are still waiting

    mapper.release.set()
    for thread in (slow_thread, twin_thread):
        thread.join(timeout=30)
        assert not thread.is_alive()
    first, twin = slow_box.pop("result"), twin_box.pop("result")
    assert not slow_box and not twin_box
    assert bytes(first.buffer) == bytes(twin.buffer) == slow_data
    assert mapper.maps[os.path.realpath(slow)] == 1  # the same file still mapped once
    assert shared_users(str(slow), mapper) == 2 + (held is not None)
    for each in (first, twin, held):
        if each is not None:
            each.close()
    assert_clean()
