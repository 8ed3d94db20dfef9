"""A figure the OS cannot give is "not measurable here", not a failure (issue 44 item 1): under
Wine psutil's USS is refused ("Invalid parameter (OS error 87)") in every worker, so the cpu
target's default `mapped_uss_ratio` gate is skipped with that reason while the platform's own
figure (private bytes) is judged. A figure the OS should give and did not still fails.

The rows are test inputs built from a known law (report_fixtures); the same rule over a real
Windows run is the Wine lane's cpu-run step (the README's default job)."""

from __future__ import annotations

from dataclasses import replace

from report_fixtures import fake_results, metadata, write_run

from harness.core.rundata import load_run
from harness.core.verdict import judge
from harness.runner.memory import refused_figure
from harness.targets.cpu import WINDOWS_PRIVATE_GATE

USS_GATE = "mapped_uss_ratio<=0.5 if processes>=2 and weights_bytes>=128MiB"


def _wine_error() -> OSError:
    err = OSError(22, "Invalid parameter")
    err.winerror = 87  # what psutil's memory_full_info raises under Wine
    return err


def _windows_run(tmp_path, refused_in_every_worker: bool = True):
    """A Windows run (its default gates: no PSS gate, the private-bytes one) whose USS the OS
    refused: in every worker, or in all but one that simply has none."""
    note = f"{refused_figure('USS', _wine_error())}; no PSS on Windows: private bytes is the figure"
    rows = [replace(r, uss_bytes=None, pss_bytes=None, memory_note=note) for r in fake_results(processes=(4,))]
    if not refused_in_every_worker:
        rows[0] = replace(rows[0], memory_note="no PSS on Windows: private bytes is the figure")
    meta = metadata("cpu", processes=[4])
    meta["default_gates"] = [
        {"expr": WINDOWS_PRIVATE_GATE[0], "why": WINDOWS_PRIVATE_GATE[1]} if g["expr"].startswith("mapped_pss") else g
        for g in meta["default_gates"]
    ]
    return judge(load_run(write_run(tmp_path / "run", rows, meta)))


def _gate(judgement, expr: str):
    return next(g for g in judgement.gates if g.gate.expr == expr)


def test_a_figure_the_os_refuses_everywhere_is_not_measurable_and_the_platform_figure_is_judged(tmp_path):
    judgement = _windows_run(tmp_path)
    uss = _gate(judgement, USS_GATE)
    assert uss.status == "skip" and uss.passed, uss
    assert uss.reason == (
        "not measurable here: USS not measured: Invalid parameter (OS error 87), refused by the OS in all 8 workers"
    )
    private = _gate(judgement, WINDOWS_PRIVATE_GATE[0])
    assert private.status == "pass" and private.value < 0.5, private
    assert not [g for g in judgement.gates if g.failed], judgement.gates
    assert judgement.verdict != "fail", judgement.reasons


def test_a_figure_missing_without_the_os_refusing_it_still_fails(tmp_path):
    judgement = _windows_run(tmp_path, refused_in_every_worker=False)
    uss = _gate(judgement, USS_GATE)
    assert uss.status == "fail" and uss.reason.startswith("not measured"), uss
    assert judgement.verdict == "fail"


def test_a_missing_pss_on_linux_is_still_a_failure(tmp_path):
    """Linux gives PSS: rows without it (and no refusal) fail its gate, as before."""
    rows = [replace(r, pss_bytes=None) for r in fake_results(processes=(4,))]
    judgement = judge(load_run(write_run(tmp_path / "run", rows, metadata("cpu", processes=[4]))))
    pss = next(g for g in judgement.gates if g.gate.check.metric == "mapped_pss_ratio")
    assert pss.status == "fail" and pss.reason.startswith("not measured"), pss
