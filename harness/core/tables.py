"""The single reader/writer of the run's tables, driven by `harness.core.schema`; writes are atomic."""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .cells import cell_problem
from .errors import InputError
from .files import write_text_atomic
from .schema import OLDEST_FORMAT_VERSION, ResultRow, SummaryRow, columns, dtypes, required_columns, row_from_dict

RESULTS_CSV = "results.csv"
TABLE_MAX_BYTES = 128 * 1024**2  #: The largest run table read: a bigger file is not one run's table.
TABLE_MAX_ROWS = 65_536  #: The most rows read from one table (about 0.2 ms a row).
SUMMARY_CSV = "summary.csv"
LONG_CSV = "results_long.csv"

TABLE_KINDS = {ResultRow: "results", SummaryRow: "summary"}  #: What a table of each row type is called in messages.
#: Columns that say *which* measurement a long-format line belongs to.
LONG_ID_COLUMNS = ("target", "mode", "processes", "sessions_per_process", "repeat", "worker", "pid")
#: Long-format columns and the pandas dtypes to read them with.
LONG_DTYPES = {
    "run_id": "string",
    "target": "string",
    "mode": "string",
    "processes": "Int64",
    "sessions_per_process": "Int64",
    "repeat": "Int64",
    "worker": "Int64",
    "pid": "Int64",
    "metric": "string",
    "value": "Float64",
    "unit": "string",
}
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")  #: Characters that make a spreadsheet read a formula (OWASP).
NEUTRAL_PREFIX = "'"  #: Its prefix; a text starting with it is prefixed too, so reading back strips exactly one.
_INTEGER = re.compile(r"-?[0-9]{1,19}")


def neutralise(text: str) -> str:
    """A text cell a spreadsheet shows as text: ``'`` before a formula trigger; numbers untouched."""
    return NEUTRAL_PREFIX + text if text.startswith((*FORMULA_TRIGGERS, NEUTRAL_PREFIX)) else text


def unneutralise(text: str) -> str:
    """What `neutralise` wrote, back: one leading ``'`` removed."""
    return text[1:] if text.startswith(NEUTRAL_PREFIX) else text


def format_cell(value: Any, dtype: str) -> str:
    """One value -> CSV text: None/NaN empty, floats by ``repr`` (exact round trip)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if dtype == "Float64":
        return repr(float(value))
    if dtype == "Int64":
        return str(int(value))
    if dtype == "boolean":
        return "True" if value else "False"
    return neutralise(str(value))


def parse_cell(text: str, dtype: str) -> Any:
    """CSV text -> value of the column's dtype (empty: None); a ValueError never quotes the cell."""
    if text == "":
        return None
    if dtype == "Int64":
        if not _INTEGER.fullmatch(text):
            raise ValueError(f"not an integer ({_described(text)})")
        return int(text)
    if dtype == "Float64":
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"not a number ({_described(text)})") from None
        if not math.isfinite(value):
            raise ValueError(f"not a finite number ({_described(text)})")
        return value
    if dtype == "boolean":
        lowered = text.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ValueError(f"not a boolean ({_described(text)})")
    return unneutralise(text)


def _described(text: str) -> str:
    """What a rejected cell looks like without its content."""
    lowered = text.strip().lower().lstrip("+-")
    if lowered in ("nan", "inf", "infinity"):
        return lowered
    return f"a {len(text)}-character cell"


def csv_text(header: list[str], lines: Iterable[list[str]]) -> str:
    """The one CSV dialect of every table: ``\\n`` line ends, a line with a CR in a cell fully quoted."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    quoted = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)
    if header:
        writer.writerow(header)
    for line in lines:
        (quoted if any("\r" in cell for cell in line) else writer).writerow(line)
    return buffer.getvalue()


def rows_to_csv_text(rows: Iterable[Any], row_type: type) -> str:
    """Rows of one schema dataclass -> CSV text with the header in `schema.columns` order."""
    kinds = dtypes(row_type)
    names = columns(row_type)

    def cells(row: Any) -> list[str]:
        if not isinstance(row, row_type):
            raise TypeError(f"expected {row_type.__name__}, got {type(row).__name__}")
        return [format_cell(getattr(row, n), kinds[n]) for n in names]

    return csv_text(names, (cells(r) for r in rows))


def write_rows(path: Path | str, rows: Iterable[Any], row_type: type | None = None) -> Path:
    """Write ``rows`` to ``path`` atomically; ``row_type`` needed only for no rows."""
    rows = list(rows)
    if row_type is None:
        if not rows:
            raise ValueError("write_rows needs row_type when there are no rows (the header needs it)")
        row_type = type(rows[0])
    return write_text_atomic(path, rows_to_csv_text(rows, row_type), newline="")


def check_header(path: Path, header: list[str] | None, row_type: type, version: int = OLDEST_FORMAT_VERSION) -> None:
    """InputError unless ``header`` is a ``row_type`` header of format ``version`` (never quoting it)."""
    kind = TABLE_KINDS.get(row_type, row_type.__name__)
    if not header:
        raise InputError(f"{path}: empty file, no header: not a {kind} table of this harness")
    twice = len(header) - len(set(header))
    if twice:  # counted, not named: a header is the file's own text
        raise InputError(f"{path}: {twice} column name(s) appear twice: not a {kind} table of this harness")
    missing = [c for c in required_columns(row_type, version) if c not in header]
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise InputError(
            f"{path}: not a {kind} table of this harness: missing column(s) {shown} "
            f"(format version {version}; its first line has {len(header)} cells)"
        )


@dataclass
class TextTable:
    """A table as its file holds it, cells still text (what `migrate` updates)."""

    path: Path
    header: list[str]
    rows: list[dict[str, str]]
    lines: list[int]  # the file line of each row, for messages


def read_text_table(
    path: Path | str,
    row_type: type,
    version: int = OLDEST_FORMAT_VERSION,
    *,
    max_rows: int = TABLE_MAX_ROWS,
    max_bytes: int = TABLE_MAX_BYTES,
) -> TextTable:
    """The checked header and cells of a table; InputError naming the file, never quoting it."""
    from .inputfiles import open_text_capped

    path = Path(path)
    try:
        with open_text_capped(path, "", max_bytes) as handle:
            reader = csv.DictReader(handle)
            check_header(path, reader.fieldnames, row_type, version)
            header = list(reader.fieldnames or [])
            table = TextTable(path, header, [], [])
            for data in reader:
                if len(table.rows) >= max_rows:
                    raise InputError(f"{path}: more than {max_rows} rows: not the table of one run of this harness")
                if None in data or None in data.values():
                    width = len(header)
                    cells = (
                        width + len(data.get(None) or []) if None in data else sum(v is not None for v in data.values())
                    )
                    raise InputError(f"{path}:{reader.line_num}: {cells} cells, the header has {width}")
                table.rows.append(data)
                table.lines.append(reader.line_num)
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text: not a table of this harness") from None
    except csv.Error:
        raise InputError(f"{path}: not a CSV table of this harness (malformed CSV)") from None
    return table


def parse_rows(table: TextTable, row_type: type) -> list[Any]:
    """``row_type`` objects from a `TextTable`, every cell parsed and checked; InputError otherwise."""
    kinds = dtypes(row_type)
    out = []
    for data, line in zip(table.rows, table.lines, strict=True):
        values: dict[str, Any] = {}
        for name, text in data.items():
            if name not in kinds:
                continue
            try:
                values[name] = parse_cell(text, kinds[name])
            except ValueError as exc:
                raise InputError(f"{table.path}:{line}: column {name}: {exc}") from None
            problem = cell_problem(row_type, name, values[name])
            if problem:
                raise InputError(f"{table.path}:{line}: column {name}: {problem}")
        out.append(row_from_dict(row_type, values))
    return out


def read_rows(
    path: Path | str,
    row_type: type,
    version: int = OLDEST_FORMAT_VERSION,
    *,
    max_rows: int = TABLE_MAX_ROWS,
    max_bytes: int = TABLE_MAX_BYTES,
) -> list[Any]:
    """Read a CSV written by `write_rows` back into ``row_type`` objects."""
    table = read_text_table(path, row_type, version, max_rows=max_rows, max_bytes=max_bytes)
    return parse_rows(table, row_type)


def read_frame(path: Path | str, row_type: type) -> Any:
    """A run CSV as a DataFrame with the schema's dtypes; only empty cells are missing."""
    import pandas as pd

    kinds = dtypes(row_type)
    frame = pd.read_csv(path, dtype=kinds, keep_default_na=False, na_values=[""])
    for name, kind in kinds.items():
        if name not in frame.columns:
            frame[name] = pd.Series([pd.NA] * len(frame), dtype=kind)
    extra = [c for c in frame.columns if c not in kinds]
    return unneutralise_frame(frame[[*kinds, *extra]], kinds)


def unneutralise_frame(frame: Any, kinds: dict[str, str]) -> Any:
    """The text columns of a frame read by pandas, with `neutralise`'s prefix removed."""
    for name, kind in kinds.items():
        if kind == "string" and name in frame.columns:
            frame[name] = frame[name].map(unneutralise, na_action="ignore").astype("string")
    return frame


def long_metrics(row_type: type = ResultRow) -> list[tuple[str, str]]:
    """(metric, unit) pairs of the long format: the schema's numeric columns with a unit."""
    return [
        (f.name, f.metadata["unit"])
        for f in fields(row_type)
        if f.metadata["dtype"] in ("Int64", "Float64") and f.metadata["unit"] and f.name not in LONG_ID_COLUMNS
    ]


def long_records(rows: Iterable[ResultRow], run_id: str) -> list[dict[str, Any]]:
    """One dict per run x worker x measured metric; missing figures are left out (tidy data)."""
    metrics = long_metrics()
    out = []
    for row in rows:
        ident = {"run_id": run_id, **{c: getattr(row, c) for c in LONG_ID_COLUMNS}}
        for metric, unit in metrics:
            value = getattr(row, metric)
            if value is not None:
                out.append({**ident, "metric": metric, "value": value, "unit": unit})
    return out


def _long_cell(value: Any, dtype: str) -> str:
    """Integer figures (bytes, counts) stay integers in the text; pandas reads them as Float64."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return format_cell(value, dtype)


def write_long(path: Path | str, rows: Iterable[ResultRow], run_id: str) -> Path:
    """Write ``results_long.csv`` (columns of `LONG_DTYPES`) atomically."""
    lines = ([_long_cell(record[c], LONG_DTYPES[c]) for c in LONG_DTYPES] for record in long_records(rows, run_id))
    return write_text_atomic(path, csv_text(list(LONG_DTYPES), lines), newline="")


def read_long(path: Path | str) -> Any:
    """``results_long.csv`` -> DataFrame with `LONG_DTYPES` (what ``pd.read_csv`` would need)."""
    import pandas as pd

    return unneutralise_frame(pd.read_csv(path, dtype=LONG_DTYPES, keep_default_na=False, na_values=[""]), LONG_DTYPES)


def write_run_tables(
    run_dir: Path | str,
    results: list[ResultRow],
    summary: list[Any],
    run_id: str | None = None,
    *,
    guard: Callable[[str], AbstractContextManager[Any]] | None = None,
) -> dict[str, Path]:
    """Write results.csv, summary.csv and results_long.csv of one run folder (``guard`` wraps each write)."""
    run_dir = Path(run_dir)
    run_id = run_id or run_dir.name
    guard = guard or (lambda name: nullcontext())
    written = {}
    with guard(RESULTS_CSV):
        written[RESULTS_CSV] = write_rows(run_dir / RESULTS_CSV, results, ResultRow)
    with guard(SUMMARY_CSV):
        written[SUMMARY_CSV] = write_rows(run_dir / SUMMARY_CSV, summary, SummaryRow)
    with guard(LONG_CSV):
        written[LONG_CSV] = write_long(run_dir / LONG_CSV, results, run_id)
    return written
