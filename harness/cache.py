"""The model cache: generated, externalised and compiled models, built once and reused.

Why a cache: a 1 GiB generated model takes seconds to build and a QNN compilation even more;
both are deterministic functions of their inputs, so they are built once per machine. Where:
``$HARNESS_CACHE_DIR`` or ``~/.cache/qnn-fmw-harness`` (``--cache-dir`` per run).

One mechanism for every entry (`cached_build`): an entry is a folder named by a key that covers
everything it was built from; it is built in a scratch folder beside it and published with one
rename, so a reader never sees half an entry and a build killed half-way leaves only scratch,
which the next build removes. Every entry carries a record of its files (``.entry.json``:
size and a full BLAKE2b hash of every byte of each) written before it is published and
checked on every use, so a file changed, cut short or replaced since the build (a damaged
disk, a half-finished copy, someone's edit, a same-size overwrite with its mtime put back) is
caught before a worker loads it. The full hash costs one read of the entry per run (about
0.3 s for a 256 MiB weights file on this machine; docs/models-and-cache.md has the figure).
The record is not believed either: it must name exactly the files the entry holds (every file
a worker loads is one of them; a record naming no file verifies nothing, a file it does not
name was put there since), and a name in it that is not a plain file inside the entry (``../``,
an absolute path, a link out, a FIFO) makes the entry corrupt, as does any symlink or special
file in the entry, or more than `MAX_ENTRY_FILES` files. Entries nested in an entry (the QNN
compilations of a source model, under its ``qnn/``) are entries of their own, with records of
their own. An entry that fails either check (``load`` raises `CorruptEntry`) is rebuilt, once,
with a note on stderr; a second failure is an `InputError` naming the entry. Nothing of an
entry is ever unpickled. Messages about an entry never quote what its files hold.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from harness.core.errors import CorruptEntry, InputError
from harness.core.files import contained, create_file
from harness.core.inputfiles import JSON_MAX_BYTES, parse_json_bounded, read_text_bounded

T = TypeVar("T")
SCRATCH_PREFIX = ".build-"
#: Scratch older than this is removed even if its pid looks alive (pids are reused).
STALE_SCRATCH_S = 24 * 3600


#: The record of an entry's files, written into the entry before it is published.
ENTRY_RECORD = ".entry.json"
#: Read size of the content hash.
HASH_CHUNK_BYTES = 1024**2
#: The most files an entry may hold (a model folder has a handful; a pipeline's externalised
#: data a few hundred): more is not an entry of this harness, and is not hashed file by file.
MAX_ENTRY_FILES = 10_000


def fingerprint(path: Path) -> dict:
    """Size and a BLAKE2b hash of every byte of one regular file. A FIFO, device or folder in
    its place is `CorruptEntry` (opened without blocking, checked with fstat: never hangs)."""
    import stat

    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if os.path.islink(path):
            raise CorruptEntry(f"{path.name} is a symbolic link") from None
        raise CorruptEntry(f"{path.name}: {err.strerror or err}") from None
    with open(fd, "rb", closefd=True) as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptEntry(f"{path.name} is not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        h = hashlib.blake2b(digest_size=16)
        size = 0
        for chunk in iter(lambda: handle.read(HASH_CHUNK_BYTES), b""):
            h.update(chunk)
            size += len(chunk)
    return {"size": size, "blake2b": h.hexdigest()}


def _entry_files(folder: Path) -> list[Path]:
    """Every file of the entry (its record left out), links never followed; CorruptEntry for a
    symlink or a special file anywhere in it, or more than `MAX_ENTRY_FILES` files. Folders
    that are entries (or a build's scratch) of their own are not part of it."""
    import stat

    found: list[Path] = []
    for root, dirs, names in os.walk(folder):
        base = Path(root)
        for name in list(dirs):
            path = base / name
            if os.path.islink(path):
                raise CorruptEntry(f"{path.relative_to(folder).as_posix()} is a symbolic link")
            if is_scratch(path) or (path / ENTRY_RECORD).is_file():
                dirs.remove(name)  # a nested entry, checked on its own
        for name in names:
            path = base / name
            if path == folder / ENTRY_RECORD:
                continue
            mode = os.lstat(path).st_mode
            if not stat.S_ISREG(mode):
                raise CorruptEntry(f"{path.relative_to(folder).as_posix()} is not a regular file")
            found.append(path)
            if len(found) > MAX_ENTRY_FILES:
                raise CorruptEntry(f"more than {MAX_ENTRY_FILES} files")
    return sorted(found)


def record_entry(folder: Path) -> None:
    """Write the entry's record (every file's fingerprint); done in scratch, before publishing."""
    files = {p.relative_to(folder).as_posix(): fingerprint(p) for p in _entry_files(folder)}
    with create_file(folder / ENTRY_RECORD, "cache record") as handle:
        handle.write(json.dumps({"files": files}, indent=1).encode("utf-8"))


def _recorded(folder: Path) -> dict[str, dict]:
    """The record's files (name -> {size, blake2b}), of the declared shape, naming at least one
    file; CorruptEntry otherwise."""
    from harness.core.runmeta import MapOf, check_value

    try:
        data = parse_json_bounded(read_text_bounded(folder / ENTRY_RECORD, "", JSON_MAX_BYTES), ENTRY_RECORD, 8)
        check_value(ENTRY_RECORD, "", data, {"files": MapOf({"size": int, "blake2b": str}, MAX_ENTRY_FILES)})
        recorded = dict(data["files"])
    except (InputError, KeyError, TypeError, ValueError) as err:
        raise CorruptEntry(f"no readable {ENTRY_RECORD} ({type(err).__name__})") from None
    if not recorded:
        raise CorruptEntry(f"{ENTRY_RECORD} names no file: it verifies nothing")
    return recorded


def check_entry(folder: Path) -> None:
    """CorruptEntry unless the record names exactly the files the entry holds, each unchanged."""
    recorded = _recorded(folder)
    present = {p.relative_to(folder).as_posix() for p in _entry_files(folder)}
    if present - recorded.keys():
        raise CorruptEntry(f"holds {len(present - recorded.keys())} file(s) its {ENTRY_RECORD} does not name")
    for name, expected in recorded.items():
        try:
            path = contained(folder, str(name), "", f"{ENTRY_RECORD} entry")
        except InputError:
            raise CorruptEntry(f"{ENTRY_RECORD} names a file outside the entry") from None
        if name not in present:
            raise CorruptEntry(f"{ENTRY_RECORD} names a file the entry does not hold")
        try:
            found = fingerprint(path)
        except OSError as err:
            raise CorruptEntry(f"{name}: {err.strerror or err}") from None
        if found != expected:
            what = "size" if found["size"] != expected["size"] else "content"
            raise CorruptEntry(f"{name} changed since the entry was built ({what})")


def default_cache_dir() -> Path:
    """``$HARNESS_CACHE_DIR`` or ``~/.cache/qnn-fmw-harness``, absolute: the QNN compiler's
    child process and the workers do not run in the folder the user typed a relative path in."""
    env = os.environ.get("HARNESS_CACHE_DIR")
    return Path(env).absolute() if env else Path.home() / ".cache" / "qnn-fmw-harness"


#: The names `cached_build`, `_discard` and `clear_cache` give their scratch:
#: ``.build-<entry>-<pid>-<8 hex>`` (``-trash`` when it is an entry set aside to be deleted).
#: Nothing else is ever removed as scratch: a cache folder pointed at a home folder by mistake
#: may hold a ``.build-tools`` of the user's.
_SCRATCH_NAME = re.compile(r"^\.build-.+-(?P<pid>\d+)-[0-9a-f]{8}(?P<trash>-trash)?$")
#: Log files the QNN child processes leave in the cache's ``logs`` folder (`qnn_log_dir`).
_LOG_NAME = re.compile(r"^(.+-(htp|cpu|gpu|saver)-[0-9a-f]{16}-compile|ctx-.+-[0-9a-f]{16}-reference)\.log$")


def is_scratch(path: Path) -> bool:
    return _SCRATCH_NAME.match(path.name) is not None


def is_entry(path: Path) -> bool:
    """A published entry of this cache: a folder holding the record `cached_build` writes.
    Any other folder (the user's own, when the cache folder is set to a home folder by
    mistake) is neither listed nor cleared."""
    return path.is_dir() and not path.is_symlink() and not is_scratch(path) and (path / ENTRY_RECORD).is_file()


def _scratch_owner_alive(path: Path) -> bool:
    """Scratch is alive while the pid in its name runs (and it is young); trash never is."""
    match = _SCRATCH_NAME.match(path.name)
    if match is None:
        return True  # not our scratch: never removed
    if match["trash"]:
        return False
    try:
        if time.time() - path.stat().st_mtime > STALE_SCRATCH_S:
            return False
    except OSError:
        return False
    import psutil

    pid = int(match["pid"])
    return pid == os.getpid() or psutil.pid_exists(pid)


def remove_stale_scratch(parent: Path) -> list[Path]:
    """Delete scratch folders left by builds that were killed; returns what was removed."""
    removed = []
    try:
        candidates = [p for p in parent.iterdir() if is_scratch(p) and p.is_dir() and not p.is_symlink()]
    except OSError:
        return removed
    for path in candidates:
        if not _scratch_owner_alive(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _mkdir(parent: Path) -> None:
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(
            f"model cache {parent}: cannot create a folder there "
            f"({err.strerror or err}); choose another with --cache-dir"
        ) from None


def _discard(folder: Path, why: CorruptEntry) -> None:
    """Move a corrupt entry out of the way first (one rename), then delete it. InputError
    naming the entry when it cannot be moved (a read-only cache): it would be used again."""
    trash = folder.with_name(f"{SCRATCH_PREFIX}{folder.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}-trash")
    try:
        os.rename(folder, trash)
    except FileNotFoundError:
        return  # another process discarded it first
    except OSError as err:
        raise InputError(
            f"model cache entry {folder} is corrupt ({why}) and cannot be removed here "
            f"({err.strerror or err}): delete it, or choose another --cache-dir"
        ) from None
    if trash.is_symlink() or not trash.is_dir():
        trash.unlink(missing_ok=True)  # the link itself, never what it points to
    else:
        shutil.rmtree(trash, ignore_errors=True)


def cached_build(folder: Path, build: Callable[[Path], None], load: Callable[[Path], T]) -> T:
    """The entry in ``folder``: ``load(folder)`` if it is there and sound, else
    ``build(scratch)`` and publish scratch as ``folder`` atomically, then ``load`` it.

    ``load`` raises `CorruptEntry` for an entry that fails its check; ``build`` raises
    InputError for user mistakes (propagated) and OSError for a full or read-only disk
    (turned into one InputError naming the cache)."""
    folder = Path(folder)
    if os.path.lexists(folder):
        try:
            if folder.is_symlink() or not folder.is_dir():  # an entry is a folder of the cache itself
                raise CorruptEntry("not a folder of the cache (a symbolic link or a file)")
            check_entry(folder)
            return load(folder)
        except CorruptEntry as why:
            _discard(folder, why)
            print(f"note: model cache entry {folder.name}: {why}; rebuilding it", file=sys.stderr, flush=True)
    _mkdir(folder.parent)
    remove_stale_scratch(folder.parent)
    scratch = folder.with_name(f"{SCRATCH_PREFIX}{folder.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        try:
            scratch.mkdir()
            build(scratch)
            record_entry(scratch)
        except OSError as err:  # disk full, quota, a cache folder gone read-only mid-build
            raise InputError(
                f"model cache {folder.parent}: cannot write the model "
                f"({err.strerror or err}); free space or choose another --cache-dir"
            ) from None
        try:
            os.rename(scratch, folder)
        except OSError:
            if not folder.exists():
                raise InputError(f"model cache {folder.parent}: cannot publish {folder.name}") from None
            # another process published the same entry first: use theirs
        try:
            check_entry(folder)
            return load(folder)
        except CorruptEntry as err:
            raise InputError(
                f"model cache entry {folder} is corrupt ({err}); delete it (python -m harness cache clear)"
            ) from None
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)


@dataclass
class CacheEntry:
    """One published entry of the cache (a model folder), for ``harness cache info``."""

    path: Path
    bytes: int
    files: int
    modified: float


def _folder_size(folder: Path) -> tuple[int, int]:
    """(bytes, files) of an entry, links not followed, counting at most `MAX_ENTRY_FILES` files
    (a cache made by someone else may hold an entry of millions: `cache info` stays quick)."""
    total = files = 0
    for root, _dirs, names in os.walk(folder):
        if files > MAX_ENTRY_FILES:
            break
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
                files += 1
            except OSError:
                pass  # removed while we looked
    return total, files


def cache_entries(cache_dir: Path | None = None) -> list[CacheEntry]:
    """Published entries (`is_entry`: not scratch, not anything else found there), largest
    first; [] when the cache does not exist."""
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    try:
        children = [p for p in folder.iterdir() if is_entry(p)]
    except OSError:
        return []
    entries = []
    for child in children:
        size, files = _folder_size(child)
        try:
            modified = child.stat().st_mtime
        except OSError:
            continue
        entries.append(CacheEntry(child, size, files, modified))
    return sorted(entries, key=lambda e: (-e.bytes, e.path.name))


def clear_cache(cache_dir: Path | None = None) -> tuple[list[CacheEntry], list[tuple[Path, str]]]:
    """Remove every entry and the scratch of dead builds: (removed, [(kept, why)]).

    Each entry is renamed aside first (one atomic step: a concurrent run then rebuilds it
    instead of reading half a folder), then deleted. A build in progress (live scratch) is
    left alone. On Windows a model still mapped by a running worker cannot be deleted: it is
    kept and named."""
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    removed, kept = [], []
    for entry in cache_entries(folder):
        trash = entry.path.with_name(f"{SCRATCH_PREFIX}{entry.path.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}-trash")
        try:
            os.rename(entry.path, trash)
        except OSError as err:
            kept.append((entry.path, err.strerror or str(err)))
            continue
        shutil.rmtree(trash, ignore_errors=True)
        removed.append(entry)
    remove_stale_scratch(folder)
    _remove_child_logs(folder / "logs")
    return removed, kept


def _remove_child_logs(logs: Path) -> None:
    """The QNN child processes' logs (and their folder once empty); nothing else in it."""
    try:
        names = [p for p in logs.iterdir() if _LOG_NAME.match(p.name) and p.is_file() and not p.is_symlink()]
    except OSError:
        return
    for path in names:
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        logs.rmdir()
