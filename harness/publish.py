"""Publishing judged runs (judgement, ``headline.json``, ``report.html``, history): with cli, imports `reports`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.errors import InputError


def report_run(out: Path, *, history: Path | None, render: bool, outcomes: bool, kind: str = "run") -> Any:
    """Judge a run folder, print, render report and history, write headline.json last; `ReportFailed` if one fails."""
    from harness.console import make_console, print_judgement
    from harness.core.errors import ReportFailed
    from harness.core.headline import write_headline
    from harness.core.rundata import load_run
    from harness.core.verdict import judge
    from harness.runner.resources import describe

    judgement = judge(load_run(out))
    console = make_console()
    print_judgement(console, judgement, outcomes=outcomes)
    if render:
        from reports import publish

        try:
            published = publish([judgement], out / "report.html", history=history)
        except OSError as err:
            raise ReportFailed(describe(err, "writing report.html or the history"), out) from err
        console.print(f"report: {published.path}")
    try:
        write_headline(out, judgement, kind=kind)
    except OSError as err:
        raise ReportFailed(describe(err, "writing headline.json"), out) from err
    console.print(f"results: {out}")
    return judgement


def check_history_path(history: Path, out: Path | None) -> None:
    """--history is checked before any work: appendable, a history CSV, and not one of the
    files the run itself writes (appending to its own results.csv would corrupt both)."""
    from harness.core.runfiles import check_output
    from reports import check_history

    check_history(history)
    check_output(history, "--history", runs=[out] if out is not None else [])


def test_record(nodeid: str, outcome: str, folder: str) -> Any:
    """A pytest test and the run folder it produced, as the report shows it (pytest plugin)."""
    from reports import TestRecord

    return TestRecord(nodeid, outcome, folder)


def render_test_session(folders: list[str], out: Path, records: list[Any], counts: dict[str, int]) -> Path:
    """The plugin's --fmw-report-dir page of every loadable run folder of the session with the tests' outcomes."""
    from harness.core.rundata import load_run
    from harness.core.verdict import judge
    from reports import publish

    judgements = []
    for folder in folders:
        try:
            judgements.append(judge(load_run(folder)))
        except InputError:
            continue
    return publish(judgements, out, tests=records, test_counts=counts).path
