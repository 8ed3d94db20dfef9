"""What a run folder is made of, how the harness proves one is its own (`MARKER_NAME`), and
the one check every output path of every command goes through (`check_output`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from .errors import InputError
from .files import real_path, replaceable_path

#: Files a run (or `report`, `bench`, `capacity` on it) writes into its folder.
RUN_FILES = (
    "results.csv",
    "summary.csv",
    "results_long.csv",
    "metadata.json",
    "report.html",
    "bench.json",
    "headline.json",
    "capacity.json",
)
#: Folders a run writes: workers/ (one per group) and logs/ (the qnn target's compiler logs).
RUN_FOLDERS = ("workers", "logs")
LOCK_NAME = ".harness.lock"
#: What `report` writes into a run folder (it changes none of the run's files, the marker neither).
REPORT_FILES = ("report.html", "headline.json")
#: Written only by the harness when it claims a folder; lists at release every file the run wrote.
MARKER_NAME = ".harness-run.json"
MARKER_ID = "qnn-fmw-harness run folder"
MARKER_MAX_BYTES = 64 << 20  # a record of about a million files


def recorded_files(folder: Path) -> set[str] | None:
    """The files the marker says the harness wrote under RUN_FOLDERS; None: no valid marker."""
    from .inputfiles import parse_json_bounded, read_text_bounded

    try:
        data = parse_json_bounded(read_text_bounded(folder / MARKER_NAME, "", MARKER_MAX_BYTES), "marker", 4)
    except (InputError, OSError):
        return None
    files = data.get("files") if isinstance(data, dict) and data.get("harness") == MARKER_ID else None
    if not isinstance(files, list) or not all(isinstance(f, str) and _ours_by_name(f) for f in files):
        return None
    return set(files)


def _ours_by_name(name: str) -> bool:
    parts = name.split("/")
    below = len(parts) > 1 and parts[0] in RUN_FOLDERS and all(p not in ("", ".", "..") for p in parts)
    return below or name in RUN_FILES


def is_run_folder(folder: Path) -> bool:
    """A folder this harness claimed (its marker is there and well formed)."""
    return recorded_files(folder) is not None


def files_below(folder: Path) -> tuple[list[str], list[str]]:
    """(files, folders deepest first) below ``folder``'s RUN_FOLDERS, as ``workers/g/x``; no link followed."""
    files: list[str] = []
    folders: list[str] = []
    for top in RUN_FOLDERS:
        if not os.path.isdir(folder / top) or os.path.islink(folder / top):
            continue
        for root, dirs, names in os.walk(folder / top, topdown=False):
            rel = Path(root).relative_to(folder).as_posix()
            files += [f"{rel}/{n}" for n in names]
            files += [f"{rel}/{d}" for d in dirs if os.path.islink(os.path.join(root, d))]
            folders.append(rel)
    return files, folders


def written_files(folder: Path) -> list[str]:
    """What a run leaves to record: its run files present and every file below its folders."""
    return [n for n in RUN_FILES if os.path.lexists(folder / n)] + files_below(folder)[0]


def write_marker(folder: Path, files: Iterable[str] = ()) -> None:
    from .files import write_json_atomic

    write_json_atomic(folder / MARKER_NAME, {"harness": MARKER_ID, "files": sorted(files)}, what="--out")


def _looks_like_run(folder: Path) -> bool:
    """Worth protecting (generous, unlike `is_run_folder`, which decides what may be removed)."""
    return any(os.path.lexists(folder / name) for name in (MARKER_NAME, "metadata.json", "results.csv"))


def check_output(
    path: Path | str, option: str, *, runs: Iterable[Path] = (), inputs: Iterable[Path] = (), may_be: str = ""
) -> Path:
    """``path`` as an output of ``option``, refused before any work (InputError, one line) when
    its folder is missing, when it is a file of a run folder (``runs``, or one it sits in; only
    ``may_be`` allowed) or below its folders, when it is one of ``inputs``, or not a regular file."""
    path = Path(path)
    resolved = real_path(path)
    for folder in [real_path(f) for f in runs] + [p for p in resolved.parents if _looks_like_run(p)]:
        own = resolved.parent == folder and resolved.name in (*RUN_FILES, MARKER_NAME, LOCK_NAME)
        below = any(folder / d in resolved.parents for d in RUN_FOLDERS)
        if (own and resolved.name != may_be) or below:
            raise InputError(f"{option} {path}: is one of the run's own files (in {folder}); refusing to write over it")
    if not path.parent.is_dir():
        raise InputError(f"{option} {path}: output folder does not exist ({path.parent})")
    if any(resolved == real_path(p) for p in inputs):
        raise InputError(
            f"{option} {path}: is one of the input files (or the report itself); refusing to write over it"
        )
    replaceable_path(path, option)
    return path


def kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a symlink" if stat.S_ISLNK(mode) else "not a regular file (a device, FIFO or socket)"
