"""What the terminal says (issue 34 item 5): the program without a command shows the commands,
the gates line counts skipped gates apart from passed ones, the sentence leads with memory and
marks a factor timed on a contended machine as indicative."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

from conftest import ROOT


def test_the_program_alone_shows_its_commands():
    proc = subprocess.run([sys.executable, "-m", "harness"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "the following arguments are required" not in proc.stderr and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("usage: python -m harness COMMAND")
    for command in ("run", "bench", "report", "cache", "doctor"):
        assert any(line.split()[:1] == [command] for line in lines), (command, proc.stderr)


def _judged(tmp_path, gates=(), contended=False):
    import sys as _sys

    _sys.path.insert(0, str(ROOT / "suites" / "reports"))
    from report_fixtures import fake_results, metadata, write_run

    from harness.core.rundata import load_run
    from harness.core.verdict import judge

    rows = fake_results(processes=(2,))
    if contended:  # the load average the rows recorded: above the CPU count
        rows = [replace(r, load_avg=5.0, cpu_count=2) for r in rows]
    meta = metadata(processes=[2])
    meta["gates"] = list(gates)
    meta["default_gates"] = []
    return judge(load_run(write_run(tmp_path / "run", rows, meta)))


def test_the_gates_line_counts_passed_and_skipped_apart(tmp_path):
    """Before: "gates: 5 of 5 passed or skipped" with 3 of them skipped (a skipped gate checked
    nothing)."""
    from harness.core.verdict import gates_summary_line

    judgement = _judged(
        tmp_path, ["failed_workers==0", "mapped_pss_ratio<=0.9 if processes>=8", "init_ratio<=0.5 if processes>=8"]
    )
    assert [g.status for g in judgement.gates] == ["pass", "skip", "skip"]
    assert gates_summary_line([judgement]) == "gates: 3 in all: 1 passed, 2 skipped (not checked), 0 failed"


def test_the_sentence_leads_with_memory_and_marks_a_contended_factor_indicative(tmp_path):
    from harness.console import spread_lines
    from harness.core.headline import factor_problem, headline_sentence

    quiet = headline_sentence(_judged(tmp_path / "quiet"))
    busy_judgement = _judged(tmp_path / "busy", contended=True)
    busy = headline_sentence(busy_judgement)
    assert "indicatively" not in quiet and "sessions started" in quiet
    memory, factor = busy.index("less summed PSS than heap"), busy.index("x faster (")
    assert memory < busy.index("indicatively (timed on a contended machine), sessions started") < factor
    assert not factor_problem(busy)  # the factor is still the ratio of the times it prints
    assert all(line.endswith("; indicative: timed on a contended machine") for line in spread_lines(busy_judgement))
