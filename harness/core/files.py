"""Writing the harness's own files: one atomic writer, and the rule that we only ever replace
regular files.

Why atomic: a reader (a report, a CI step, a second harness), a crash or a Ctrl-C must never
see half a CSV or half a JSON record that looks complete. Why the regular-file rule: an atomic
replace swaps whatever sits at the path for a new regular file, so pointed at ``/dev/null``, a
FIFO or a folder it would destroy something that is not ours (``--history /dev/null`` run as
root once replaced the system's ``/dev/null``). A symlink to a regular file is followed, so the
file it names is replaced and the link stays.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from .errors import InputError

#: The process umask, read once: temp files are created 0600 and get umask-normal modes back.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def replaceable_path(path: Path | str, what: str = "") -> Path:
    """The path an atomic write should replace: ``path`` itself, or the regular file a symlink
    at ``path`` names. InputError when something other than a regular file is there."""
    path = Path(path)
    label = f"{what} {path}".strip()
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if path.is_symlink():
            raise InputError(f"{label}: a dangling symlink; refusing to replace it") from None
        return path
    except OSError as err:
        raise InputError(f"{label}: cannot check it ({err.strerror or err})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, FIFO or socket)"
        raise InputError(f"{label}: is {kind}; refusing to write over it")
    return Path(os.path.realpath(path)) if path.is_symlink() else path


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
    if not folder and path.is_file():
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
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
    its previous content (or stays absent)."""
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
