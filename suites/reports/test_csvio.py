"""CSV round trips through the schema dataclasses and through pandas with the schema dtypes."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from report_fixtures import MIB, fail_worker, fake_results, metadata

from harness.core.schema import ResultRow, SummaryRow, columns, dtypes
from harness.core.summary import summarize
from harness.core.tables import (
    LONG_DTYPES,
    long_metrics,
    long_records,
    read_frame,
    read_long,
    read_rows,
    write_long,
    write_rows,
    write_run_tables,
)


def awkward_rows() -> list[ResultRow]:
    """Test input: values that break naive CSV handling (commas, quotes, newlines, 'NA')."""
    rows = fail_worker(fake_results(processes=(2,)), 0, error='ValueError: bad "shape", got [1,\n2]')
    rows[1] = replace(
        rows[1],
        memory_note="NA",
        ep_log_tail="line1\nline2, with comma",
        init_s=0.1 + 0.2,
        pss_bytes=None,
        output_ok=None,
    )
    return rows


def test_rows_round_trip_exactly(tmp_path):
    rows = awkward_rows()
    path = write_rows(tmp_path / "results.csv", rows)
    assert read_rows(path, ResultRow) == rows
    header = path.read_text().splitlines()[0].split(",")
    assert header == columns(ResultRow)


def test_summary_round_trip(tmp_path):
    summary = summarize(fake_results())
    path = write_rows(tmp_path / "summary.csv", summary)
    assert read_rows(path, SummaryRow) == summary


def test_frame_has_schema_dtypes_and_values(tmp_path):
    rows = awkward_rows()
    frame = read_frame(write_rows(tmp_path / "r.csv", rows), ResultRow)
    assert list(frame.columns) == columns(ResultRow)
    assert {c: str(t) for c, t in frame.dtypes.items()} == dtypes(ResultRow)
    assert frame.loc[1, "memory_note"] == "NA"  # text, not a missing value
    assert frame.loc[1, "init_s"] == 0.1 + 0.2  # repr keeps the float exact
    assert pd.isna(frame.loc[1, "pss_bytes"]) and pd.isna(frame.loc[1, "output_ok"])
    assert frame.loc[0, "error"] == 'ValueError: bad "shape", got [1,\n2]'
    assert frame["uss_bytes"].sum() == sum(r.uss_bytes or 0 for r in rows)


def test_plain_pandas_read_with_schema_dtypes(tmp_path):
    """What the README tells pandas users to do works without this package."""
    path = write_rows(tmp_path / "r.csv", fake_results())
    frame = pd.read_csv(path, dtype=dtypes(ResultRow), keep_default_na=False, na_values=[""])
    assert len(frame) == len(fake_results())
    assert str(frame["output_ok"].dtype) == "boolean"


def test_missing_and_extra_columns(tmp_path):
    """A newer writer's extra column is ignored and a column added since this format version
    (memory_ok) may be missing; a table without a column every table of this version has is
    not one of ours."""
    path = tmp_path / "old.csv"
    header = [c for c in columns(ResultRow) if c != "memory_ok"] + ["future_column"]
    cells = {"target": "cpu", "mode": "heap", "processes": "2", "future_column": "zzz"}
    path.write_text(",".join(header) + "\n" + ",".join(cells.get(c, "") for c in header) + "\n")
    (row,) = read_rows(path, ResultRow)
    assert (row.target, row.mode, row.processes, row.uss_bytes, row.memory_ok) == ("cpu", "heap", 2, None, None)
    frame = read_frame(path, ResultRow)
    assert columns(ResultRow) == list(frame.columns[: len(columns(ResultRow))])
    assert str(frame["uss_bytes"].dtype) == "Int64"
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("target,mode,processes,future_column\ncpu,heap,2,zzz\n")
    with pytest.raises(ValueError, match=r"foreign\.csv: not a results table of this harness: missing column"):
        read_rows(foreign, ResultRow)


def test_empty_rows_need_a_row_type(tmp_path):
    with pytest.raises(ValueError, match="row_type"):
        write_rows(tmp_path / "x.csv", [])
    path = write_rows(tmp_path / "x.csv", [], SummaryRow)
    assert read_rows(path, SummaryRow) == []
    assert read_frame(path, SummaryRow).empty


def test_bad_cell_names_file_and_column(tmp_path):
    path = tmp_path / "bad.csv"
    header = columns(ResultRow)
    path.write_text(",".join(header) + "\n" + ",".join("lots" if c == "processes" else "" for c in header) + "\n")
    with pytest.raises(ValueError, match=r"bad\.csv:2: column processes"):
        read_rows(path, ResultRow)


def test_failed_write_keeps_previous_file_and_leaves_no_temp(tmp_path):
    path = write_rows(tmp_path / "results.csv", fake_results(processes=(1,)))
    before = path.read_text()
    with pytest.raises(TypeError):
        write_rows(path, [*fake_results(processes=(1,)), object()], ResultRow)
    assert path.read_text() == before
    assert os.listdir(tmp_path) == ["results.csv"]


def test_long_format_loads_directly(tmp_path):
    rows = fail_worker(fake_results())
    path = write_long(tmp_path / "results_long.csv", rows, "run-1")
    frame = pd.read_csv(path)  # no dtype help needed to get numbers
    assert list(frame.columns) == list(LONG_DTYPES)
    typed = read_long(path)
    assert {c: str(t) for c, t in typed.dtypes.items()} == LONG_DTYPES
    metrics = dict(long_metrics())
    assert metrics["uss_bytes"] == "bytes" and metrics["init_s"] == "s"
    assert "pid" not in metrics and "worker" not in metrics
    # every present figure once; the failed worker's missing memory is left out
    expected = sum(1 for r in rows for m in metrics if getattr(r, m) is not None)
    assert len(typed) == expected
    uss = typed[(typed.metric == "uss_bytes") & (typed["mode"] == "heap") & (typed.processes == 1)]
    assert uss["value"].iloc[0] == 72 * MIB + 256 * MIB
    assert set(typed.run_id) == {"run-1"}


def test_the_runner_writes_its_tables_through_the_one_writer(tmp_path):
    """What the runner leaves (`sweep.write_outputs`, which writes the tables with
    `tables.write_run_tables`): the three tables and metadata.json, each read back equal, the
    long table under the folder's name as its run id."""
    from harness.runner.sweep import write_outputs

    out = tmp_path / "run-7"
    out.mkdir()
    rows = fail_worker(fake_results(processes=(1, 2)))
    summary = write_outputs(out, rows, {}, metadata(processes=[1, 2]))
    assert sorted(os.listdir(out)) == ["metadata.json", "results.csv", "results_long.csv", "summary.csv"]
    assert read_rows(out / "results.csv", ResultRow) == rows
    assert read_rows(out / "summary.csv", SummaryRow) == summary == summarize(rows, {})
    long = read_long(out / "results_long.csv")
    assert set(long.run_id) == {"run-7"} and len(long) == len(long_records(rows, "run-7"))
    assert json.loads((out / "metadata.json").read_text())["run"]["run_id"] == "run-7"
    assert (
        write_run_tables(tmp_path / "again", rows, summary, "run-7") if (tmp_path / "again").mkdir() is None else None
    )
    for name in ("results.csv", "summary.csv", "results_long.csv"):
        assert (tmp_path / "again" / name).read_bytes() == (out / name).read_bytes(), name


def test_a_table_the_runner_cannot_write_fails_the_run_naming_it(tmp_path):
    """The runner's guard around each table: a full disk while results_long.csv (the largest)
    is written fails the run naming that file, and metadata.json says so."""
    from test_report_reads_only import file_size_limit

    from harness.core.errors import RunFailed
    from harness.runner.sweep import write_outputs

    out = tmp_path / "run"
    out.mkdir()
    rows = fake_results(processes=(1, 2, 4))
    with file_size_limit(4096), pytest.raises(RunFailed, match="disk full writing results_long.csv"):
        write_outputs(out, rows, {}, metadata())
    status = json.loads((out / "metadata.json").read_text())["status"]
    assert status.startswith("failed: disk full writing results_long.csv"), status


def test_docs_column_tables_follow_the_schema():
    from reports.readme import column_tables

    text = column_tables()
    for name in [*columns(ResultRow), *columns(SummaryRow), *LONG_DTYPES]:
        assert f"| `{name}` |" in text
    assert "| `uss_bytes` | Int64 | bytes |" in text
    docs = (Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text(encoding="utf-8")
    assert text in docs, "docs/results.md column tables are stale: paste `python -m reports.readme` into it"
