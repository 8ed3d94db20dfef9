"""Writing the harness's own files: atomically (no reader sees half a file), only over regular
files (``--history /dev/null`` once replaced the system's /dev/null), never through a link
(a planted ``report.html -> ~/.bashrc``): links found are refused, names are replaced
(``os.replace``), appends and new files are opened ``O_NOFOLLOW``."""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import IO, Any

from .errors import InputError
from .inputfiles import check_regular, open_regular

_UMASK = os.umask(0o022)  #: The process umask, read once: temp files are created 0600 and get umask-normal modes back.
os.umask(_UMASK)


def real_path(path: Path | str) -> Path:
    """``path`` absolute, links resolved as far as they resolve (a link loop does not raise)."""
    return Path(os.path.realpath(path))


def _symlink_refusal(label: str) -> InputError:
    return InputError(
        f"{label}: is a symbolic link; the harness never writes through a link "
        "(remove it, or name the file it points to)"
    )


def replaceable_path(path: Path | str, what: str = "") -> Path:
    """``path`` when nothing or a regular file is there; InputError for a link or anything else."""
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


#: Flags of every in-place write: never through a link, never blocking on a FIFO.
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
    """A text handle appending to ``path`` (created when missing); a link there is refused."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT if create else 0)
    fd = _opened_regular(path, flags, f"{what} {path}".strip())
    return os.fdopen(fd, "a", encoding="utf-8", newline="")


def create_file(path: Path | str, what: str = "") -> IO[bytes]:
    """A new, empty binary file at ``path`` (``O_EXCL | O_NOFOLLOW``), replacing the NAME when
    something is there (a link itself goes, never its target); a folder there is refused."""
    path = Path(path)
    label = f"{what} {path}".strip()
    with suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            raise InputError(f"{label}: is a folder; refusing to write over it")
        os.unlink(path)
    fd = _opened_regular(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, label)
    return os.fdopen(fd, "wb")


def make_folder(path: Path | str, what: str = "", *, within: Path | str | None = None) -> Path:
    """``path`` as a folder (made when missing), it and every folder from ``within`` to it
    checked to be a real folder, not a link (a planted ``workers`` link); InputError otherwise."""
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
    """Copy the regular file ``src`` (never a FIFO waited on) to a new file ``dst`` (`create_file`)."""
    import shutil

    with open_regular(src, what or "copy of", None) as source, create_file(dst, what) as target:
        shutil.copyfileobj(source, target, 1 << 20)


def check_creatable(path: Path, option: str, *, folder: bool) -> None:
    """Refuse before work a path that could never be written: a file on its way, or a file where
    a folder should be (or the reverse). Creates nothing."""
    if path.exists() and path.is_dir() != folder:
        found, wanted = ("file", "folder") if folder else ("folder", "file")
        raise InputError(f"{option} {path}: is a {found}, not a {wanted}")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{option} {path}: {parent} is a file, not a folder")
            return


def check_writable(path: Path | str, option: str, *, folder: bool = True) -> None:
    """Refuse before work a path that could not be written: its folder (or nearest parent) must
    take a temp file, an existing file must open for appending, neither may be append-only."""
    path = Path(path)
    if not folder and path.is_file() and not path.is_symlink():
        try:
            os.close(_opened_regular(path, os.O_WRONLY | os.O_APPEND, f"{option} {path}"))
        except OSError as err:
            raise InputError(f"{option} {path}: cannot write to it ({err.strerror or err})") from None
    probe = path if folder else path.parent  # an atomic write makes its temp file beside the file
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    for where in (probe, *([] if folder else [path])):
        if _unreplaceable(where):
            raise InputError(f"{option} {path}: cannot write in {where} (immutable or append-only: chattr)")
    try:
        fd, name = tempfile.mkstemp(prefix=".harness-write-test-", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as err:
        raise InputError(f"{option} {path}: cannot write in {probe} ({err.strerror or err})") from None


def _unreplaceable(path: Path) -> bool:
    """Linux inode flags immutable or append-only: even root cannot replace or remove a name there."""
    if not sys.platform.startswith("linux") or not os.path.lexists(path) or os.path.islink(path):
        return False
    import fcntl
    import struct

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
    except OSError:
        return False
    try:
        flags = struct.unpack("l", fcntl.ioctl(fd, 0x80086601, b"\0" * 8))[0]  # FS_IOC_GETFLAGS
    except OSError:
        return False  # a file system without inode flags
    finally:
        os.close(fd)
    return bool(flags & 0x30)  # FS_IMMUTABLE_FL | FS_APPEND_FL


@contextmanager
def atomic_writer(path: Path | str, newline: str | None = None, what: str = "") -> Iterator[IO[str]]:
    """A temp file beside ``path``, fsynced and renamed over it on success (an atomic rename of
    the name, never following a link), removed on error: ``path`` keeps what it had."""
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
