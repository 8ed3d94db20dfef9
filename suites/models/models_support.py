"""Helpers for the model suites: harness runs on a user model, one-line usage errors, rows.

Every run is a real ``python -m harness run`` with real worker processes (see conftest's
``run_harness``); models are generated into pytest tmp dirs or come from installed packages.
"""

from __future__ import annotations

import csv
from pathlib import Path

from conftest import HarnessOutcome, one_line_error
from conftest import qnn_skip_reason as qnn_skip_reason  # shared with the qnn suites: imported from here

#: Small, fast runs: one worker per mode unless a test needs sharing.
ONE = ("--processes", "1", "--quiet", "--no-report")


def assert_usage_error(outcome: HarnessOutcome, *expected: str) -> str:
    """Exit 2, exactly one stderr line containing every ``expected`` text, no traceback."""
    return one_line_error(outcome, 2, *expected)


def assert_all_ok(outcome: HarnessOutcome, workers: int | None = None) -> list:
    """Exit 0 and every worker row correct; returns the rows."""
    assert outcome.returncode == 0, f"exit {outcome.returncode}\n{outcome.stdout}\n{outcome.stderr}"
    rows = outcome.results()
    assert rows and all(r.output_ok and not r.error for r in rows), [r.error for r in rows]
    if workers is not None:
        assert len(rows) == workers
    return rows


def worker_specs(out: Path) -> list[dict]:
    """The spec every worker of a run was given (its spec files; the control worker of each
    group, control.spec.json, gets the same and is left out)."""
    import json

    return [json.loads(p.read_text()) for p in sorted((out / "workers").rglob("w*.spec.json"))]


def csv_rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))
