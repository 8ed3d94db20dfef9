"""The run folder (``--out``): checked before any work, created atomically with a unique name,
held under a lock while the run writes it, and cleaned of a previous run's files.

Why each rule:

- A typo'd or unusable ``--out`` must cost seconds, not a sweep: it is checked (creatable,
  writable, not the model cache) before the model is built.
- Two runs started in the same second without ``--out`` must not share a folder: the default
  folder is made with ``mkdir`` (atomic: exactly one caller creates a name) and a numbered
  suffix when the name is taken.
- An earlier run is never lost without a word: an ``--out`` that holds one is refused in one
  line (exit 2) unless ``--replace`` is given; then its files are removed before the new run
  writes anything (the old ``report.html`` beside new results would mix two runs), and stderr
  says what was removed. Only a folder that IS a run folder of this harness is cleaned, and
  only of the files a run writes; any other non-empty folder is refused, so a mistyped
  ``--out ~/Documents`` deletes nothing, ``--replace`` or not.
- Two runs writing one folder at once would interleave their tables: the run holds an OS lock
  (``.harness.lock`` in the folder) from the moment it claims the folder until its report is
  written; a second run is refused.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import InputError
from harness.core.files import check_creatable, check_writable, real_path

#: Files a run (or `harness report` / `harness bench` on it) writes into its folder.
RUN_FILES = (
    "results.csv",
    "summary.csv",
    "results_long.csv",
    "metadata.json",
    "report.html",
    "bench.json",
    "headline.json",
)
#: Folders a run writes: workers/ (one folder per group: the workers' specs, records and logs)
#: and logs/ (the qnn target's compiler logs).
RUN_FOLDERS = ("workers", "logs")
LOCK_NAME = ".harness.lock"
#: Keys every metadata.json this harness writes holds (`sweep._metadata`).
METADATA_KEYS = ("format_version", "status", "run")
#: A marker file larger than this is not one of ours (metadata.json is a few KiB).
MARKER_MAX_BYTES = 4 << 20


def is_run_folder(folder: Path) -> bool:
    """A folder a run of this harness wrote: its metadata.json is this harness's (a JSON object
    with `METADATA_KEYS`), or its results.csv has this harness's header. A file merely NAMED
    metadata.json or results.csv (a dataset's, another tool's) does not make one: cleaning the
    folder would delete it, and its ``workers/`` with it."""
    return _our_metadata(folder / "metadata.json") or _our_results(folder / "results.csv")


def _regular_text(path: Path, limit: int) -> str | None:
    """The start of ``path`` when it is a regular text file (a FIFO is never waited on: opened
    without blocking and checked with fstat), else None."""
    from harness.core.inputfiles import open_regular

    try:
        with open_regular(path, "") as handle:
            data = handle.read(limit)
        return None if b"\0" in data else data.decode("utf-8")
    except (OSError, UnicodeDecodeError, InputError):
        return None


def _our_metadata(path: Path) -> bool:
    from harness.core.inputfiles import parse_json_bounded

    text = _regular_text(path, MARKER_MAX_BYTES + 1)
    if text is None or len(text) > MARKER_MAX_BYTES:
        return False
    try:
        data = parse_json_bounded(text, str(path), 32)
    except InputError:
        return False
    return isinstance(data, dict) and all(k in data for k in METADATA_KEYS) and isinstance(data["run"], dict)


def _our_results(path: Path) -> bool:
    import csv

    from harness.core.schema import ResultRow
    from harness.core.tables import check_header

    text = _regular_text(path, 64 << 10)
    if not text:
        return False
    try:
        header = next(csv.reader([text.splitlines()[0]]))
        check_header(path, header, ResultRow)
    except (InputError, csv.Error, StopIteration):
        return False
    return True


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file (a device, FIFO or socket)"


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
                f"--out {out}: its {name} is {_kind(mode)}, not what a run leaves there; refusing to replace it"
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
    """Everything that can be refused about ``--out`` before work starts: a folder holding an
    earlier run unless ``replace``. Creates nothing (the probe file is removed at once)."""
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
        _check_previous_run(out)
    check_writable(out, "--out")


@dataclass
class RunFolder:
    """A claimed run folder: ``path``, and the lock that is ours until `release`."""

    path: Path
    lock: Any = None
    cleaned: tuple[str, ...] = ()

    def release(self) -> None:
        lock, self.lock = self.lock, None
        if lock is not None:
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
    """Remove what the previous run left (its files only), so nothing of it can be mistaken
    for this run's results."""
    removed = []
    for name in (*RUN_FILES, *RUN_FOLDERS):
        path = folder / name
        if not os.path.lexists(path):
            continue
        try:
            if name in RUN_FOLDERS:
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError as err:
            raise InputError(
                f"--out {folder}: cannot remove the previous run's {name} ({err.strerror or err})"
            ) from None
        removed.append(name)
    return tuple(removed)


def claim(out: Path | None, prefix: str = "run", *, replace: bool = False) -> RunFolder:
    """Create (or take) the run folder, lock it, and (``replace``) clean a previous run's files
    out of it; `RunFolder.cleaned` names what went. Checked again under the lock: the folder
    may have changed since `check_out`."""
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
    except BaseException:
        lock.release()
        raise
    return RunFolder(path, lock, cleaned)
