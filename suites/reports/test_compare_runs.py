"""`report --baseline` on real runs of identical code (issue 34 item 6): three back-to-back runs
of the same command (4 MiB, N=1,2, 3 repeats) compared with the first call no change and exit 0
under --fail-on-regression. Before, one such pair gave "mapped summed PSS +3.5 MiB, p<0.0001,
REGRESSION", exit 1: the t-test over repeats called the run-to-run PSS offset that other
processes sharing ORT's pages cause a change, and a nightly would have gone red on noise."""

from __future__ import annotations

import json

import pytest

from reports import report_main

pytestmark = [pytest.mark.slow, pytest.mark.memory]
ARGS = ("run", "--model-size", "4MiB", "--processes", "1,2", "--repeat", "3", "--quiet", "--no-report")


def test_identical_runs_call_no_memory_change(run_harness, tmp_path, capsys):
    runs = [run_harness(*ARGS, out=tmp_path / f"r{i}", check_exit=0).out for i in range(3)]
    for run in runs[1:]:
        out = tmp_path / f"{run.name}.json"
        code = report_main(
            [str(run), "--baseline", str(runs[0]), "--no-default-gates", "--fail-on-regression", "--json", str(out)]
        )
        text = capsys.readouterr().out
        figures = {f["key"]: f for f in json.loads(out.read_text())["comparisons"][0]["figures"]}
        memory = [f for f in figures.values() if f["unit"] == "bytes"]
        assert not [f["key"] for f in memory if f["changed"]], text
        assert code == 0 or all(f["kind"] == "time" for f in figures.values() if f["regression"]), text
        assert figures["mapped_fair"]["not_called_because"]  # PSS is in the table, not called
