"""Command-line contract of `python -m harness run`: usage and input errors are one line on
stderr with exit code 2 and no traceback, before any worker starts."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--processes", "0"], "must be >= 1"),
        (["--processes", "two"], "expected a list like 1,2,4,8"),
        (["--model-size", "lots"], "expected a number with a unit"),
        (["--modes", "mapped,copied"], "modes are mapped,heap"),
        (["--target", "gpu"], "invalid choice"),
        (["--repeat", "-1"], "must be >= 1"),
        (["--worker-timeout", "0"], "must be a finite number of seconds > 0"),
        (["--worker-timeout", "nan"], "must be a finite number of seconds > 0"),
        (["--worker-timeout", "inf"], "must be a finite number of seconds > 0"),
        (["--shape", "x=1x4"], "--shape fixes inputs of --model"),
        (["--map-failures", "2", "--target", "ort-native"], "only applies to --target cpu"),
        (["--share-ep-contexts"], "only applies to --target qnn"),
        (["--model", "/nonexistent/model.onnx"], "no such file"),
        (["--model-size", "1GiB", "--processes", "200"], "is available"),
        (["--gates-file", "/nonexistent/gates.txt"], "no such file"),
        (["--bogus"], "unrecognized arguments"),
        (["--gate", "mapped_pss_ratio<=1GiB"], "is not a number for mapped_pss_ratio (units allowed: none)"),
        (["--gate", "init_ratio<=1e999"], "is not a finite number"),
        (["--label", "device=a", "--label", "device=b"], "--label device: given twice"),
        (["--model-size", "1"], "needs at least 64 KiB of weights"),
        (["--no-report", "--history", "h.csv"], "drop --no-report"),
    ],
)
def test_usage_errors_are_one_line_exit_2(run_harness, args, expected):
    """Each bad input gives exit 2 and exactly one stderr line naming the problem."""
    outcome = run_harness("run", "--quiet", *args)
    assert outcome.returncode == 2, outcome.stderr
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1, outcome.stderr
    assert expected in lines[0]
    assert "Traceback" not in outcome.stderr
    assert not (outcome.out / "results.csv").exists()


def test_no_subcommand_is_a_usage_error(run_harness):
    """Exit 2 with the commands listed (test_wording.py checks what they say), no traceback."""
    outcome = run_harness()
    assert outcome.returncode == 2
    assert outcome.stderr.startswith("usage: python -m harness COMMAND") and "Traceback" not in outcome.stderr


def test_help_lists_the_contract(run_harness):
    """--help documents every option of the contract."""
    outcome = run_harness("run", "--help")
    assert outcome.returncode == 0
    for option in (
        "--target",
        "--model",
        "--model-size",
        "--shape",
        "--processes",
        "--sessions-per-process",
        "--modes",
        "--repeat",
        "--map-failures",
        "--worker-timeout",
        "--out",
        "--embed-mode",
        "--share-ep-contexts",
    ):
        assert option in outcome.stdout
