"""The run folder (``--out``): checked before any work, created atomically with a unique name,
held under a lock while the run writes it, and cleaned of a previous run's files.

- A folder is a run folder only when it holds the marker only the harness writes
  (`MARKER_NAME`, made at claim, listing at release every file the run wrote); a look-alike
  ``metadata.json`` or ``results.csv`` does not make one.
- ``--replace`` removes only the recorded files (and `report`'s); a folder holding a run file
  it did not record is refused whole, so nothing the harness did not write goes.
- The run holds an OS lock (``.harness.lock``) until its report is written; a second run is refused.
"""

from __future__ import annotations

import datetime as dt
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import InputError
from harness.core.files import check_creatable, check_writable, real_path
from harness.core.runfiles import (
    LOCK_NAME,
    REPORT_FILES,
    RUN_FILES,
    RUN_FOLDERS,
    files_below,
    is_run_folder,
    kind_of,
    recorded_files,
    write_marker,
    written_files,
)


def _unrecorded(folder: Path) -> list[str]:
    """The run's files the marker does not list (someone else's), `report`'s own outputs aside."""
    recorded = recorded_files(folder) or set()
    return [name for name in written_files(folder) if name not in recorded and name not in REPORT_FILES]


def _check_previous_run(out: Path) -> None:
    """The files a run would replace or remove must be what a run left there."""
    for name in (*RUN_FILES, *RUN_FOLDERS):
        path = out / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError as err:
            raise InputError(f"--out {out}: cannot check {name} ({err.strerror or err})") from None
        wanted = stat.S_ISDIR if name in RUN_FOLDERS else stat.S_ISREG
        if not wanted(mode):
            raise InputError(
                f"--out {out}: its {name} is {kind_of(mode)}, not what a run leaves there; refusing to replace it"
            )
    foreign = _unrecorded(out)
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise InputError(
            f"--out {out}: holds files the harness did not write ({shown}); refusing to replace it "
            "(move them, or choose another folder)"
        )


def _overlaps(a: Path, b: Path) -> bool:
    a, b = real_path(a), real_path(b)
    return a == b or a in b.parents or b in a.parents


def _refuse_earlier_run(out: Path, entries: list[str]) -> None:
    shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
    raise InputError(
        f"--out {out}: holds an earlier run ({shown}); give --replace to replace it, or choose another folder"
    )


def check_out(out: Path | None, cache_dir: Path, *, replace: bool = False) -> None:
    """Everything about ``--out`` refused before work (an earlier run unless ``replace``); creates nothing."""
    if out is None:
        check_writable(Path("results"), "results folder")
        return
    check_creatable(out, "--out", folder=True)
    if _overlaps(out, cache_dir):
        raise InputError(
            f"--out {out} and the model cache {cache_dir} overlap: a run folder and the cache must be "
            "separate (a run cleans its folder; the cache is cleared as a whole)"
        )
    if out.is_dir():
        try:
            entries = sorted(p.name for p in out.iterdir() if p.name != LOCK_NAME)
        except OSError as err:
            raise InputError(f"--out {out}: cannot list it ({err.strerror or err})") from None
        if entries and not is_run_folder(out):
            shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
            raise InputError(
                f"--out {out}: a folder that is neither empty nor a run folder of this harness (it "
                f"holds {shown}); choose a new or empty folder"
            )
        if entries and not replace:
            _refuse_earlier_run(out, entries)
        if entries:
            check_writable(out, "--out")
            _lock(out).release()  # a run writing there is said as such, not as its files
        _check_previous_run(out)
    check_writable(out, "--out")


@dataclass
class RunFolder:
    """A claimed run folder: ``path``, and the lock that is ours until `release`."""

    path: Path
    lock: Any = None
    cleaned: tuple[str, ...] = ()

    def release(self) -> None:
        """Record what the run wrote below its folders (what a later --replace may remove), unlock."""
        lock, self.lock = self.lock, None
        if lock is not None:
            try:
                write_marker(self.path, written_files(self.path))
            except (OSError, InputError):
                pass  # unrecorded files are refused by --replace, never removed
            lock.release()


def _unique_default(prefix: str) -> Path:
    """``results/<prefix>-<date>-<time>``, made atomically; ``-2``, ``-3``... when taken."""
    parent = Path("results")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"results folder {real_path(parent)}: cannot create it ({err.strerror or err})") from None
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for number in range(1, 10_000):
        path = parent / (f"{prefix}-{stamp}" if number == 1 else f"{prefix}-{stamp}-{number}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
        except OSError as err:
            raise InputError(f"results folder {path}: cannot create it ({err.strerror or err})") from None
    raise InputError(f"results folder {real_path(parent)}: no free name for {prefix}-{stamp}")


def _lock(folder: Path) -> Any:
    from filelock import FileLock, Timeout

    lock = FileLock(str(folder / LOCK_NAME), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise InputError(
            f"--out {folder}: another harness run is writing there; wait for it or choose another folder"
        ) from None
    except OSError as err:
        raise InputError(f"--out {folder}: cannot lock it ({err.strerror or err})") from None
    return lock


def _clean(folder: Path) -> tuple[str, ...]:
    """Remove the previous run's files (those its marker records, and `report`'s), nothing else."""
    recorded = (recorded_files(folder) or set()) | set(REPORT_FILES)
    removed = []
    try:
        for name in [f for f in written_files(folder) if f in recorded]:
            os.unlink(folder / name)
            removed.append(name.partition("/")[0])
        for name in files_below(folder)[1]:
            os.rmdir(folder / name)
    except OSError as err:
        what = f"--out {folder}: cannot remove the previous run's {err.filename}"
        raise InputError(f"{what} ({err.strerror or err})") from None
    return tuple(dict.fromkeys(removed))


def claim(out: Path | None, prefix: str = "run", *, replace: bool = False) -> RunFolder:
    """Create (or take) the run folder, lock it, check it again, mark it ours and (``replace``)
    clean the previous run's files out of it (`RunFolder.cleaned`)."""
    if out is None:
        path = _unique_default(prefix)
    else:
        path = out
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(f"--out {path}: cannot create the folder ({err.strerror or err})") from None
    lock = _lock(path)
    try:
        entries = [p.name for p in path.iterdir() if p.name != LOCK_NAME]
        if entries and not is_run_folder(path):
            raise InputError(f"--out {path}: no longer empty and not a run folder of this harness")
        if entries and not replace:
            _refuse_earlier_run(path, sorted(entries))
        _check_previous_run(path)
        cleaned = _clean(path) if entries else ()
        write_marker(path)
    except BaseException:
        lock.release()
        raise
    return RunFolder(path, lock, cleaned)
