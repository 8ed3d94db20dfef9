"""Publishing judged runs: the judgement printed, ``headline.json``, ``report.html`` and the
history, for the command line (`harness.cli`) and the pytest plugin (its --fmw-report-dir page).

With `harness.cli`, the composition roots of the harness: the only modules of `harness` that
import `reports`. The runner records facts, `harness.core` interprets them (one `Judgement`
per run), and this module has `reports` render them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.errors import InputError


def report_run(out: Path, *, history: Path | None, render: bool, outcomes: bool, kind: str = "run") -> Any:
    """Judge a finished run folder, print the judgement, render its report (and history) and
    write headline.json.

    A report reads a run's facts and never writes them: when report.html, the history or
    headline.json cannot be written (a full disk), the run stays what the runner recorded in
    metadata.json, and this raises `ReportFailed` saying which file failed (exit 1). report.html
    comes first and headline.json last, so no headline.json says "pass" for a run whose
    report is missing; `harness report` renders it again later."""
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
    """The pytest plugin's --fmw-report-dir report: every run folder of the session judged and
    rendered into one page with the tests' outcomes. A folder that cannot be loaded (a run
    killed before it wrote its tables) is left out, never fatal: the session must end."""
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
