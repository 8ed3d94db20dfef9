"""The registry: one mapping per file per process, found under any spelling of its path, and
released under the key it was registered with, whatever the path names by then."""

from __future__ import annotations

import os

from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    assert_clean,
    stats_guard,
    symlink_or_skip,
    write_file,
)

from mapper_impl import load_weights, shared_users, stats


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
