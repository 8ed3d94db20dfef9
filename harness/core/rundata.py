"""One run folder, loaded and checked: metadata, result rows, summary rows, headline.

The report, the gates and the history all start from a `RunData`, so the input checks (folder
exists, results.csv exists, format_version is one we understand) live here, once, and raise
`InputError` with a one-line message the command line prints as is.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from .errors import InputError
from .fits import stated_system
from .headline import HEADLINE_JSON
from .migrate import migrate
from .schema import FORMAT_VERSION, MODES, OLDEST_FORMAT_VERSION, ResultRow, SummaryRow
from .summary import group_key, headline, primary_target, summarize, system_delta_state
from .tables import RESULTS_CSV, SUMMARY_CSV, TextTable, parse_rows, read_text_table
from .vocab import FAILED_PREFIX, RunStatus

METADATA_JSON = "metadata.json"
#: The largest JSON file of a run folder read (metadata.json, headline.json): the runner's own
#: are a few KiB; a bigger one is not ours and is not read into memory.
MAX_JSON_BYTES = 16 * 1024**2
#: The deepest nesting accepted in those files: the runner's own nest 4 levels deep.
MAX_JSON_DEPTH = 32
#: Summary columns recomputed from results.csv; a summary.csv that says otherwise is refused.
RECOMPUTED = (
    "ok_workers",
    "failed_workers",
    "fallback_workers",
    "complete",
    "sum_rss_bytes",
    "sum_uss_bytes",
    "sum_pss_bytes",
    "sum_private_bytes",
    "init_s_median",
    "create_s_median",
    "first_run_s_median",
)


@dataclass
class RunData:
    """Everything one run folder holds, plus what is derived from it."""

    folder: Path
    meta: dict[str, Any]
    results: list[ResultRow]
    summary: list[SummaryRow]
    #: Problems found while loading that do not stop the report (shown as notes).
    load_notes: list[str] = field(default_factory=list)
    #: The format version the folder was written in (`meta` and the rows are migrated to the
    #: current one, `harness.core.schema.FORMAT_VERSION`).
    written_in: int = FORMAT_VERSION
    #: What migrating it changed, in words (empty: nothing to change).
    migrated: list[str] = field(default_factory=list)

    @property
    def run(self) -> dict[str, Any]:
        return self.meta.get("run") or {}

    @property
    def env(self) -> dict[str, Any]:
        return self.meta.get("env") or {}

    @property
    def target_notes(self) -> list[str]:
        """How the run's target measures, in its own words (recorded by the runner)."""
        return [str(t) for t in self.meta.get("target_notes") or []]

    @property
    def target_options(self) -> dict[str, Any]:
        return dict(self.run.get("target_options") or {})

    @property
    def status(self) -> str:
        """ "complete", "running" or "interrupted" as metadata.json says; "unknown" without it."""
        return str(self.meta.get("status") or "unknown")

    @property
    def run_id(self) -> str:
        return str(self.run.get("run_id") or self.folder.name)

    @property
    def target(self) -> str:
        return str(self.run.get("target") or primary_target(self.summary) or "?")

    @property
    def weights_bytes(self) -> int | None:
        value = self.run.get("weights_bytes")
        if value is None:
            value = max((r.weights_bytes or 0 for r in self.results), default=0) or None
        return value

    @property
    def weights_file_bytes(self) -> int | None:
        """Bytes of the weights files the heap path copies (tensors plus alignment padding);
        None for a run recorded before this was (its sentence then states tensor bytes only)."""
        value = self.run.get("weights_file_bytes")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def gathered_weights_bytes(self) -> int | None:
        """Bytes of the weights read as indexed tables (embeddings), None when not recorded."""
        value = self.run.get("gathered_weights_bytes")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def cpu_count(self) -> int | None:
        """CPUs the workers could run on, as their rows recorded (None before it was)."""
        return max((r.cpu_count or 0 for r in self.results), default=0) or None

    @property
    def modes(self) -> list[str]:
        seen = {r.mode for r in self.results if r.mode}
        return sorted(seen, key=lambda m: (MODES.index(m) if m in MODES else len(MODES), m))

    @property
    def process_counts(self) -> list[int]:
        return sorted({r.processes for r in self.results if r.processes is not None})

    @cached_property
    def headline(self) -> dict[str, float | int | None]:
        return headline(self.summary)

    @cached_property
    def capacity(self) -> Any:
        """The measured capacity of a ``capacity`` run (its capacity.json, checked), or None."""
        from .capacity import load

        return load(self.folder, read_run_json)


def read_run_json(path: Path) -> Any:
    """A JSON file of a run folder, bounded: a regular file (a FIFO is never waited on) of at
    most `MAX_JSON_BYTES`, UTF-8 text without NUL bytes, nested at most `MAX_JSON_DEPTH` deep,
    no NaN or Infinity; InputError (one line, never quoting the file) otherwise."""
    from .inputfiles import json_nesting, parse_json_bounded, read_text_bounded

    text = read_text_bounded(path, "", MAX_JSON_BYTES)
    if json_nesting(text) > MAX_JSON_DEPTH:
        raise InputError(f"{path}: nested deeper than {MAX_JSON_DEPTH} levels: not a file of this harness")
    return parse_json_bounded(text, str(path), MAX_JSON_DEPTH, allow_nan=False)


def format_version(path: Path, meta: dict[str, Any]) -> int:
    """The format version metadata.json says its folder was written in: InputError unless it
    is one this harness reads (`OLDEST_FORMAT_VERSION`..`FORMAT_VERSION`; older ones are
    migrated when loaded, `harness.core.migrate`)."""
    version = meta.get("format_version")
    known = f"this harness reads {OLDEST_FORMAT_VERSION}..{FORMAT_VERSION}"
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise InputError(f"{path}: format_version {version} was written by a newer harness; {known}: update it")
    if isinstance(version, bool) or not isinstance(version, int) or version < OLDEST_FORMAT_VERSION:
        # a number or null said as it is; anything else by its kind (the file's text is never quoted)
        said = repr(version) if isinstance(version, int | float) or version is None else f"a {type(version).__name__}"
        raise InputError(f"{path}: format_version {said} is not a format of this harness; {known}")
    return version


def _read_metadata(folder: Path, notes: list[str]) -> dict[str, Any]:
    from .runmeta import check_metadata

    path = folder / METADATA_JSON
    if os.path.lexists(path) and not path.is_file():  # a FIFO, a device, a folder, a dangling link
        raise InputError(f"{path}: not a regular file: not a run folder of this harness")
    if not path.is_file():
        notes.append(f"{METADATA_JSON} is missing: the header lacks the run's settings.")
        return {}
    meta = read_run_json(path)
    if not isinstance(meta, dict):
        raise InputError(f"{path}: expected a JSON object")
    format_version(path, meta)
    check_metadata(path, meta)
    return meta


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is not b
        return not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a != b


def _where(key: tuple) -> str:
    """A group as a message names it: its target only when it looks like a target's name (the
    column is free text of someone else's file), its mode, N, M and repeat (checked values)."""
    import re

    target = key[0] if isinstance(key[0], str) and re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", key[0]) else "(a target)"
    return f"{target} {key[1]} N={key[2]} M={key[3]} repeat {key[4]}"


def _recomputed_summary(folder: Path, stated: list[SummaryRow], results: list[ResultRow]) -> list[SummaryRow]:
    """The summary recomputed from results.csv (sums, medians, completeness); only what the
    runner measured outside the workers (the system memory delta and its noise) comes from
    summary.csv. InputError when summary.csv contradicts results.csv: a report believes the
    workers' own rows, never a summary of them."""
    if any(s.complete is None for s in stated):  # an older harness: no completeness to compare
        return with_completeness(stated, results)
    system = {group_key(s): (s.system_delta_bytes, s.system_noise_bytes, stated_system(s)) for s in stated}
    fresh = summarize(results, system)
    mine = {group_key(s): s for s in fresh}
    theirs = {group_key(s): s for s in stated}
    for key in sorted(mine.keys() ^ theirs.keys(), key=str):
        where = SUMMARY_CSV if key in theirs else RESULTS_CSV
        raise InputError(f"{folder}: {SUMMARY_CSV} contradicts {RESULTS_CSV}: group {_where(key)} is only in {where}")
    for key, row in theirs.items():
        for column in RECOMPUTED:
            said, found = getattr(row, column), getattr(mine[key], column)
            if _differs(said, found):
                raise InputError(
                    f"{folder}: {SUMMARY_CSV} contradicts {RESULTS_CSV}: group {_where(key)} {column} is "
                    f"{said} there, {found} from the workers' rows"
                )
    return fresh


def _check_against_metadata(folder: Path, meta: dict[str, Any], results: list[ResultRow]) -> None:
    """InputError when a worker row lies outside what metadata.json says the run measured."""
    run = meta.get("run") or {}
    planned: list[tuple[str, set]] = [
        ("target", {run.get("target"), run.get("peer")} - {None} if run.get("target") else set()),
        ("mode", set(run.get("modes") or [])),
        ("processes", set(run.get("processes") or [])),
        ("sessions_per_process", {run["sessions_per_process"]} if run.get("sessions_per_process") else set()),
    ]
    repeats = run.get("repeat")
    for row in results if repeats else []:  # 0..repeat-1, checked without a set of them all
        if row.repeat is not None and not 0 <= row.repeat < repeats:
            raise InputError(
                f"{folder}: {RESULTS_CSV} contradicts {METADATA_JSON}: a worker row has repeat={row.repeat}, "
                f"the run measured repeats 0..{repeats - 1}"
            )
    for column, allowed in planned:
        if not allowed:
            continue
        for row in results:
            value = getattr(row, column)
            if value is not None and value not in allowed:
                if column == "target":  # free text, from either file: named by neither
                    raise InputError(
                        f"{folder}: {RESULTS_CSV} contradicts {METADATA_JSON}: a worker row has a target the run "
                        "did not measure"
                    )
                raise InputError(
                    f"{folder}: {RESULTS_CSV} contradicts {METADATA_JSON}: a worker row has {column}={value}, "
                    f"the run measured {', '.join(map(str, sorted(allowed, key=str)))}"
                )


def _check_headline(folder: Path, meta: dict[str, Any], summary: list[SummaryRow]) -> None:
    """InputError when headline.json states figures or a status the run's own rows and
    metadata do not give (a headline.json of another version is left alone: a note)."""
    path = folder / HEADLINE_JSON
    if not path.is_file():
        return
    from .headline import HEADLINE_FORMAT_VERSION

    data = read_run_json(path)
    if not isinstance(data, dict) or data.get("format_version") != HEADLINE_FORMAT_VERSION:
        return
    if meta and data.get("status") != meta.get("status"):
        raise InputError(
            f"{folder}: {HEADLINE_JSON} contradicts {METADATA_JSON}: status {_shown(data.get('status'))} vs "
            f"{_shown(meta.get('status'))}"
        )
    stated = data.get("headline")
    if not isinstance(stated, dict):
        raise InputError(f"{path}: headline is a {type(stated).__name__}, expected an object")
    for key, value in headline(summary).items():
        said = stated.get(key)
        if said is not None and (isinstance(said, bool) or not isinstance(said, int | float)):
            raise InputError(f"{path}: headline.{key} is {_shown(said)}, expected a number")
        if key in stated and _differs(stated[key], value):
            raise InputError(
                f"{folder}: {HEADLINE_JSON} contradicts {RESULTS_CSV}: {key} is {_shown(stated[key])} there, "
                f"{value} from the workers' rows"
            )


def _shown(value: Any) -> str:
    """A value of a run's JSON as a message may show it: numbers and the run states as they
    are, anything else by its kind (a file's free text does not belong in a message)."""
    from .runmeta import _kind

    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return repr(value)
    if isinstance(value, str) and (value in RunStatus.values() or value.startswith(FAILED_PREFIX.rstrip(": "))):
        return repr(value if len(value) <= 80 else value[:80] + "...")
    return _kind(value)


def same_run(a: RunData, b: RunData) -> bool:
    """Two loaded folders hold the same run (a copy, another path): same id and start."""
    started = a.run.get("started")
    return a.run_id == b.run_id and started is not None and started == b.run.get("started")


def _read_tables(folder: Path, meta: dict[str, Any]) -> tuple[dict[type, TextTable], int, list[str]]:
    """The folder's tables as text, their headers checked against the format version its
    metadata.json states (a folder without one is held to the oldest), then migrated to the
    current version (`harness.core.migrate`): the tables, the version written, what changed."""
    version = meta.get("format_version", OLDEST_FORMAT_VERSION)
    tables = {ResultRow: read_text_table(folder / RESULTS_CSV, ResultRow, version)}
    if (folder / SUMMARY_CSV).is_file():
        tables[SummaryRow] = read_text_table(folder / SUMMARY_CSV, SummaryRow, version)
    return tables, version, migrate(meta, tables, version)


def load_run(folder: Path | str) -> RunData:
    """Load and check one run folder, migrated to the current format version when it is older
    (in memory: the folder is never rewritten); `InputError` (one line) for what stops a
    report: a missing or malformed file, a cell out of its range, files that contradict each
    other."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: no such run folder")
    results_path = folder / RESULTS_CSV
    if not results_path.is_file():
        raise InputError(f"{folder}: no {RESULTS_CSV} (is this a run folder?)")
    notes: list[str] = []
    meta = _read_metadata(folder, notes)
    try:
        tables, version, migrated = _read_tables(folder, meta)
        results = parse_rows(tables[ResultRow], ResultRow)
        _check_against_metadata(folder, meta, results)
        current = True  # tables of this harness's own judging rules (an older one's lack `complete`)
        if SummaryRow in tables:
            stated = parse_rows(tables[SummaryRow], SummaryRow)
            current = all(s.complete is not None for s in stated)
            summary = _recomputed_summary(folder, stated, results)
        else:
            notes.append(
                f"{SUMMARY_CSV} is missing: summarised again from {RESULTS_CSV} (the system memory delta is not in it)."
            )
            summary = summarize(results)
            current = False  # without the system deltas the headline cannot be recomputed whole
        if current:
            _check_headline(folder, meta, summary)
    except OSError as exc:
        raise InputError(f"{folder}: cannot read ({exc})") from None
    if not results:
        notes.append(f"{RESULTS_CSV} has no rows: no worker reported anything.")
    return RunData(folder, meta, results, summary, notes, written_in=version, migrated=migrated)


def with_completeness(summary: list[SummaryRow], results: list[ResultRow]) -> list[SummaryRow]:
    """Summary rows read from a file written before `SummaryRow.complete` existed get it (and
    their sums) recomputed from the results: completeness is never assumed."""
    if all(s.complete is not None for s in summary):
        return summary
    recomputed = {group_key(s): s for s in summarize(results)}
    out = []
    for s in summary:
        fresh = recomputed.get(group_key(s))
        if s.complete is not None:
            out.append(s)
        elif fresh is None:
            out.append(replace(s, complete=False, note="no worker rows for this group in the results"))
        else:
            state = system_delta_state(s.system_delta_bytes, s.system_noise_bytes)
            out.append(
                replace(
                    fresh,
                    system_delta_bytes=s.system_delta_bytes,
                    system_noise_bytes=s.system_noise_bytes,
                    note="; ".join(x for x in (fresh.note, state) if x) or None,
                )
            )
    return out
