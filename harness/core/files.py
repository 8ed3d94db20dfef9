"""Writing the harness's own files: one atomic writer, and the rule that we only ever replace
regular files, and never write through a link.

Why atomic: a reader (a report, a CI step, a second harness), a crash or a Ctrl-C must never
see half a CSV or half a JSON record that looks complete. Why the regular-file rule: an atomic
replace swaps whatever sits at the path for a new regular file, so pointed at ``/dev/null``, a
FIFO or a folder it would destroy something that is not ours (``--history /dev/null`` run as
root once replaced the system's ``/dev/null``). Why no links: a run folder, a cache or a
report folder may have been made by someone else, and a ``report.html`` planted there as a
symlink to ``~/.bashrc`` would have `report` write its page over that file. So a symlink where
the harness is about to write is refused (one line, exit 2: remove it, or name the file it
points to), and every write is made so that a link planted after the check is not followed
either: atomic writes replace the NAME (``os.replace`` never follows a link at its target),
appends and new files are opened with ``O_NOFOLLOW`` (`open_append`, `create_file`).
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import IO, Any

from .errors import InputError
from .inputfiles import check_regular, open_regular

#: The process umask, read once: temp files are created 0600 and get umask-normal modes back.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def real_path(path: Path | str) -> Path:
    """``path`` absolute, links resolved, as far as they resolve: `os.path.realpath`, which a
    symlink loop (a ``workers -> workers`` planted in a run folder) does not stop, where
    ``Path.resolve`` raises RuntimeError on Python < 3.13."""
    return Path(os.path.realpath(path))


def _symlink_refusal(label: str) -> InputError:
    return InputError(
        f"{label}: is a symbolic link; the harness never writes through a link "
        "(remove it, or name the file it points to)"
    )


def replaceable_path(path: Path | str, what: str = "") -> Path:
    """``path``, when an atomic write may replace what is there: nothing, or a regular file.
    InputError for a symlink (whatever it points to: the harness never writes through a link),
    a folder, a device, a FIFO or a socket."""
    path = Path(path)
    label = f"{what} {path}".strip()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as err:
        raise InputError(f"{label}: cannot check it ({err.strerror or err})") from None
    if stat.S_ISLNK(st.st_mode):
        raise _symlink_refusal(label)
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, FIFO or socket)"
        raise InputError(f"{label}: is {kind}; refusing to write over it")
    return path


#: Flags of every file the harness opens to write in place: never through a link, never
#: blocking on a FIFO (a FIFO is then refused by the fstat check).
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)


def _opened_regular(path: Path, flags: int, label: str) -> int:
    """An fd of ``path`` opened with ``flags`` plus no-follow, checked to be a regular file."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0), 0o666)
    except OSError:
        if os.path.islink(path):
            raise _symlink_refusal(label) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"{label}: is not a regular file; refusing to write to it")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_append(path: Path | str, what: str = "", *, create: bool = True) -> IO[str]:
    """A text handle appending to ``path`` (created when missing), opened without following a
    link: a symlink planted at ``path`` is refused (InputError), never written through."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT if create else 0)
    fd = _opened_regular(path, flags, f"{what} {path}".strip())
    return os.fdopen(fd, "a", encoding="utf-8", newline="")


def create_file(path: Path | str, what: str = "") -> IO[bytes]:
    """A new, empty binary file at ``path``, replacing the NAME when something is there (a
    stale log, a planted symlink: the link itself goes, its target is never touched); created
    with ``O_EXCL | O_NOFOLLOW``, so a link planted in between is refused, not followed. A
    folder at ``path`` is an InputError."""
    path = Path(path)
    label = f"{what} {path}".strip()
    with suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            raise InputError(f"{label}: is a folder; refusing to write over it")
        os.unlink(path)
    fd = _opened_regular(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, label)
    return os.fdopen(fd, "wb")


def make_folder(path: Path | str, what: str = "", *, within: Path | str | None = None) -> Path:
    """``path`` as a folder (made, with its parents, when missing), checked to be a real folder
    and not a symlink, and so is every folder between ``within`` (a folder of ours, say the run
    folder) and it: a ``workers`` or ``logs`` link planted there would send the files written
    into it elsewhere. InputError naming the first that is not."""
    path = Path(path)
    base = Path(within) if within is not None else path.parent
    base.mkdir(parents=True, exist_ok=True)
    chain = [*reversed([p for p in path.parents if base in p.parents]), path]
    for folder in chain:  # one level at a time, each checked before anything is made inside it
        with suppress(FileExistsError):
            folder.mkdir()
        mode = os.lstat(folder).st_mode
        if stat.S_ISLNK(mode) or not stat.S_ISDIR(mode):
            label = f"{what} {folder}".strip()
            raise InputError(f"{label}: is not a folder of ours (a symbolic link or a file); refusing to write into it")
    return path


def copy_file(src: Path | str, dst: Path | str, what: str = "") -> None:
    """Copy the regular file ``src`` to a new file ``dst`` (`create_file`: the name is replaced,
    no link followed). ``src`` is opened without blocking and must be a regular file too (a
    log named in a cache may have been replaced by a FIFO or ``/dev/zero``)."""
    import shutil

    with open_regular(src, what or "copy of", None) as source, create_file(dst, what) as target:
        shutil.copyfileobj(source, target, 1 << 20)


def check_creatable(path: Path, option: str, *, folder: bool) -> None:
    """Refuse, before anything is built or measured, a path the run could never write: a
    file on its way, or (``folder``) a file where the folder should be, or (not ``folder``)
    a folder where the file should be. Creates nothing."""
    if path.exists() and path.is_dir() != folder:
        found, wanted = ("file", "folder") if folder else ("folder", "file")
        raise InputError(f"{option} {path}: is a {found}, not a {wanted}")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{option} {path}: {parent} is a file, not a folder")
            return


def check_writable(path: Path | str, option: str, *, folder: bool = True) -> None:
    """Refuse (InputError) a path the run could not write, before any work. A folder (or the
    nearest parent that exists) must take a new file: a temp file is created there and removed,
    the one test that answers for permissions, ACLs, read-only mounts and immutable folders
    alike. An existing file (``folder`` False) must open for appending (nothing is written)."""
    path = Path(path)
    if not folder and path.is_file() and not path.is_symlink():
        try:
            os.close(_opened_regular(path, os.O_WRONLY | os.O_APPEND, f"{option} {path}"))
        except OSError as err:
            raise InputError(f"{option} {path}: cannot write to it ({err.strerror or err})") from None
    probe = path if folder else path.parent  # an atomic write makes its temp file beside the file
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        fd, name = tempfile.mkstemp(prefix=".harness-write-test-", dir=probe)
    except OSError as err:
        raise InputError(f"{option} {path}: cannot write in {probe} ({err.strerror or err})") from None
    os.close(fd)
    os.unlink(name)


@contextmanager
def atomic_writer(path: Path | str, newline: str | None = None, what: str = "") -> Iterator[IO[str]]:
    """Open a temp file next to ``path``; on success fsync it and rename it over ``path``.

    The temp file lives in the same folder so ``os.replace`` is a same-filesystem rename, which
    is atomic on POSIX and Windows. On any error the temp file is removed and ``path`` keeps
    its previous content (or stays absent). The rename replaces the name ``path``: a symlink
    (refused by `replaceable_path` first, or planted since) is replaced, never followed."""
    target = replaceable_path(path, what)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, target)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: Path | str, text: str, *, newline: str | None = None, what: str = "") -> Path:
    with atomic_writer(path, newline=newline, what=what) as handle:
        handle.write(text)
    return Path(path)


def write_json_atomic(path: Path | str, data: Any, *, what: str = "") -> Path:
    """A JSON record, written whole or not at all (worker records, metadata, headline)."""
    return write_text_atomic(path, json.dumps(data, indent=1, default=str) + "\n", what=what)


def read_json(path: Path | str) -> Any:
    """Parse a JSON file; OSError/ValueError propagate (callers turn them into their message)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def contained(base_dir: Path, name: str, label: str, what: str) -> Path:
    """``base_dir / name`` resolved, if ``name`` is a relative path that stays inside
    ``base_dir`` (links followed); InputError naming ``what`` (which names ``name``, e.g.
    "external data file 'w.bin' (of tensor 'W0')")."""
    if not name or "\0" in name:
        raise InputError(f"{label}: {what} is an empty or invalid path")
    if PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute() or PureWindowsPath(name).drive:
        raise InputError(f"{label}: {what} is an absolute path; only paths inside the model's folder are accepted")
    base = real_path(base_dir)
    path = real_path(base / name)
    if path != base and base not in path.parents:
        raise InputError(f"{label}: {what} points outside the model's folder {base}; refused")
    return path


def contained_file(base_dir: Path, name: str, label: str, what: str) -> Path:
    """`contained`, and the path must be an existing regular file."""
    path = contained(base_dir, name, label, what)
    if not path.exists():
        raise InputError(f"{label}: {what} is missing (expected at {path})")
    check_regular(path, f"{label}: {what}")
    return path


def inside(folder: Path, path: Path) -> Path:
    """``path`` if, resolved, it is inside ``folder`` (a target we are about to write); a
    RuntimeError otherwise: the preparation never writes elsewhere, and reaching here with
    such a path is a bug, not a user mistake."""
    base, resolved = real_path(folder), real_path(path)
    if base not in resolved.parents:
        raise RuntimeError(f"refusing to write {path}: outside {folder}")
    return path
