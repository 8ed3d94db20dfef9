"""A history CSV across runs: each run's summary rows and headline, for the trend chart.

One file, one table, two kinds of line told apart by the ``record`` column: ``summary`` lines
are the run's `SummaryRow`s; one ``headline`` line carries `harness.core.summary.headline` (whose
totals reuse the SummaryRow column of the same name). Every line also says which run, commit,
date, host and target it came from, so a nightly fleet can append to one shared file and
filter later. Several runs may append at once (a fleet sharing one file): every append reads,
checks and writes under an OS file lock (`filelock`, on ``.<name>.lock`` beside the file), so
no line is lost and no run is recorded twice; a header that no longer matches is rewritten
whole, atomically, under the same lock.
"""

from __future__ import annotations

import csv
from dataclasses import fields
from pathlib import Path
from typing import Any

from harness.core.errors import InputError
from harness.core.files import check_creatable, check_writable, open_append, replaceable_path, write_text_atomic
from harness.core.gates import known_metrics
from harness.core.headline import target_version_labels
from harness.core.inputfiles import HISTORY_MAX_BYTES, HISTORY_MAX_ROWS, check_regular, open_text_capped
from harness.core.rundata import RunData
from harness.core.schema import SummaryRow, columns, dtypes
from harness.core.tables import csv_text, format_cell, neutralise, unneutralise, unneutralise_frame
from harness.core.verdict import Judgement

#: How long an append waits for another process's append before giving up.
LOCK_TIMEOUT_S = 120.0
_RUN_COLUMNS = ("record", "run_id", "date", "commit", "host", "system", "model", "labels", "verdict")


def version_columns(env: dict[str, Any] | None = None) -> tuple[str, ...]:
    """onnxruntime, the targets' own versions as the run recorded them (`Target.version_keys`),
    the machine's."""
    return ("onnxruntime", *target_version_labels(env or {}), "python", "os", "cpu")


def context_columns(env: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The columns that say which run a history line comes from, and on what (a run's ``env``
    adds its targets' version columns)."""
    return (*_RUN_COLUMNS, *version_columns(env))


DEFAULT_TREND_RUNS = 10


def history_columns(env: dict[str, Any] | None = None) -> list[str]:
    """Context columns (with the version columns of the run whose ``env`` is given), then
    SummaryRow's, then headline keys SummaryRow lacks."""
    summary_cols = columns(SummaryRow)
    extra = [k for k in known_metrics() if k not in summary_cols]
    return [*context_columns(env), *summary_cols, *extra]


def history_dtypes() -> dict[str, str]:
    """pandas dtypes of the history file (ratios are Float64, counts Int64)."""
    kinds = {c: "string" for c in context_columns()} | dtypes(SummaryRow)
    for key in history_columns():
        if key not in kinds:
            kinds[key] = "Int64" if key in ("sessions",) else "Float64"
    return kinds


def _context(run: RunData) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "date": run.run.get("started") or "",
        "commit": run.env.get("git_commit") or "",
        "host": run.env.get("hostname") or "",
        "system": run.env.get("system") or run.env.get("os") or "",
        "model": run.run.get("model") or "",
        "labels": ";".join(f"{k}={v}" for k, v in sorted((run.run.get("labels") or {}).items())),
        **{key: run.env.get(key) or "" for key in version_columns(run.env)},
    }


def history_records(judgement: Judgement) -> list[dict[str, Any]]:
    """The lines one run adds: its summary rows, then its headline (with the run's verdict)."""
    run = judgement.run
    context = _context(run)
    records = [{"record": "summary", **context, **{f.name: getattr(s, f.name) for f in fields(s)}} for s in run.summary]
    records.append(
        {"record": "headline", **context, "verdict": judgement.verdict, "target": run.target, **judgement.values}
    )
    return records


def _csv_text(records: list[dict[str, Any]], cols: list[str], header: bool) -> str:
    kinds = history_dtypes()
    lines = ([format_cell(record.get(c), kinds.get(c, "string")) for c in cols] for record in records)
    return csv_text(cols if header else [], lines)


def read_history(path: Path | str) -> tuple[list[str], list[dict[str, str]]]:
    """(header, raw rows as text dicts, text cells un-neutralised); ([], []) when the file does
    not exist yet. InputError (one line) for a file that is not a history CSV, or whose rows do
    not match its header (a torn line, a line glued to another), before anything is appended."""
    path = replaceable_path(path, "--history")
    if not path.is_file() or path.stat().st_size == 0:
        return [], []
    check_regular(path, "--history", HISTORY_MAX_BYTES)
    rows = []
    try:
        with open_text_capped(path, "--history", HISTORY_MAX_BYTES) as handle:
            reader = csv.DictReader(handle)
            header = list(reader.fieldnames or [])
            for row in reader:
                if len(rows) >= HISTORY_MAX_ROWS:
                    raise InputError(f"--history {path}: more than {HISTORY_MAX_ROWS} lines; start a new history file")
                rows.append(_checked_row(path, reader.line_num, header, row))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise InputError(f"--history {path}: not a readable history CSV ({type(err).__name__})") from None
    if "record" not in header or "run_id" not in header:
        raise InputError(f"--history {path}: not a history CSV of this harness (no record/run_id columns)")
    kinds = history_dtypes()
    for row in rows:
        for name, text in row.items():
            if kinds.get(name, "string") == "string":
                row[name] = unneutralise(text)
    return header, rows


def _checked_row(path: Path, line: int, header: list[str], row: dict) -> dict[str, str]:
    """A history row whose cells match the header one to one (InputError otherwise)."""
    if None in row or None in row.values():
        cells = len(header) + len(row.get(None) or []) if None in row else sum(v is not None for v in row.values())
        raise InputError(
            f"--history {path}:{line}: {cells} cells under a {len(header)}-column header "
            "(a torn or glued line): repair or remove that line"
        )
    return row


def _ends_with_newline(path: Path) -> bool:
    """False when the last write to ``path`` was cut before its line end (a torn last line)."""
    from harness.core.inputfiles import open_regular

    with open_regular(path, "--history", HISTORY_MAX_BYTES) as handle:
        handle.seek(-1, 2)
        return handle.read(1) in (b"\n", b"\r")


def check_history(path: Path | str) -> None:
    """Refuse (InputError) a --history that could not be appended to, before any work: a
    folder, a device, a FIFO, a foreign or corrupt file, a file or folder we may not write."""
    path = Path(path)
    check_creatable(path, "--history", folder=False)
    read_history(path)
    check_writable(path, "--history", folder=False)


def history_lock(path: Path | str) -> Any:
    """The OS lock every append to ``path`` holds (``.<name>.lock`` beside it; a symlinked
    history is refused before, by `replaceable_path`)."""
    from filelock import FileLock

    path = replaceable_path(path, "--history")
    return FileLock(str(path.with_name(f".{path.name}.lock")), timeout=LOCK_TIMEOUT_S)


def append_history(path: Path | str, judgement: Judgement) -> bool:
    """Append a judged run to the history file; False when that run (id + date) is already in it.

    The duplicate check makes re-rendering a report idempotent for the trend. Read, check and
    write happen under `history_lock`, so concurrent appenders never lose each other's lines."""
    from filelock import Timeout

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with history_lock(path):
            return _append_locked(path, judgement)
    except Timeout:
        raise InputError(f"--history {path}: another process held its lock for {LOCK_TIMEOUT_S:g} s") from None


def _append_locked(path: Path, judgement: Judgement) -> bool:
    cols = history_columns(judgement.run.env)
    header, rows = read_history(path)
    run = judgement.run
    context = _context(run)
    if any(
        r.get("record") == "headline" and r.get("run_id") == context["run_id"] and r.get("date", "") == context["date"]
        for r in rows
    ):
        return False
    records = history_records(judgement)
    if not header:
        write_text_atomic(path, _csv_text(records, cols, header=True), newline="", what="--history")
    elif header == cols:
        # a last line whose cells are all there but whose line end is not (an editor, a cut
        # write) would get our first row glued to it: start on a line of our own
        lead = "" if _ends_with_newline(path) else "\n"
        with open_append(path, "--history", create=False) as handle:
            handle.write(lead + _csv_text(records, cols, header=False))
    else:  # written by another version: keep old columns, rewrite the file whole
        merged = cols + [c for c in header if c not in cols]
        kinds = history_dtypes()
        old = csv_text(merged, ([_old_cell(r.get(c) or "", kinds.get(c, "string")) for c in merged] for r in rows))
        write_text_atomic(path, old + _csv_text(records, merged, header=False), newline="", what="--history")
    return True


def _old_cell(text: str, kind: str) -> str:
    """An old row's cell as it was written: numbers as is, text neutralised again."""
    return neutralise(text) if kind == "string" else text


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def trend(
    path: Path | str,
    k: int = DEFAULT_TREND_RUNS,
    *,
    target: str | None = None,
    host: str | None = None,
) -> list[dict[str, Any]]:
    """The last ``k`` runs' headline figures, oldest first, for `charts.ratio_trend`.

    Filtered to one target (and host, when given) because ratios from different devices or
    targets on one line would read as a regression that is not one."""
    _, rows = read_history(path)
    heads = [
        r
        for r in rows
        if r.get("record") == "headline"
        and (target is None or r.get("target") == target)
        and (host is None or r.get("host") == host)
    ]
    heads.sort(key=lambda r: r.get("date") or "")
    out = []
    for row in heads[-k:] if k > 0 else []:
        point: dict[str, Any] = {c: row.get(c, "") for c in context_columns()}
        point["target"] = row.get("target", "")
        for key in known_metrics():
            point[key] = _float(row.get(key))
        commit = (row.get("commit") or "")[:7]
        point["label"] = " ".join(x for x in ((row.get("date") or "")[:10], commit) if x) or (row.get("run_id") or "?")
        out.append(point)
    return out


def read_history_frame(path: Path | str) -> Any:
    """The history file as a DataFrame with `history_dtypes` (for notebooks)."""
    import pandas as pd

    kinds = history_dtypes()
    return unneutralise_frame(pd.read_csv(path, dtype=kinds, keep_default_na=False, na_values=[""]), kinds)
