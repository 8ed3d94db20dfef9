"""docs/field-reports.md (issue 30): every upstream report has a row; every command in it
parses as the harness's own command line does; every test it names exists; and the cheap ones
(cpu target, one process, one mode, no repeat, a small model) run with the exit code the row
states, a verdict and no traceback."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "field-reports.md"
#: The reports issue 30 lists: each must have a row (an upstream report without a case is a gap).
REPORTS = (
    "foundry-local #1124",
    "onnxruntime-qnn #337",
    "onnxruntime-qnn #839",
    "onnxruntime-qnn #677",
    "#847",
    "#848",
    "onnxruntime-qnn #647",
    "microsoft/onnxruntime #27627",
    "microsoft/onnxruntime #27871",
)
COLUMNS = ["report", "what it reports", "command", "exit", "what the harness shows", "pinned by", "faithful?"]


def rows() -> list[dict[str, str]]:
    lines = [ln for ln in PAGE.read_text(encoding="utf-8").splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split(" | ")]
    assert header == COLUMNS, header
    out = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == len(COLUMNS), line
        out.append(dict(zip(COLUMNS, cells, strict=True)))
    return out


def command_of(row: dict[str, str]) -> list[str] | None:
    """The harness arguments of a row's command (after ``python -m harness``), None for none."""
    cell = row["command"]
    if cell == "none":
        return None
    match = re.fullmatch(r"`python -m harness (.+?)`( \(.*\))?", cell)
    assert match, cell
    return shlex.split(match.group(1))


def cheap(argv: list[str]) -> bool:
    """cpu target, one process, one mode, one repeat, at most 8 MiB of weights."""
    text = " ".join(argv)
    return (
        "--target" not in argv
        and "--processes 1" in text
        and "--model-size 8MiB" in text
        and "," not in argv[argv.index("--modes") + 1]
        and "--repeat" not in argv
    )


def test_every_upstream_report_has_a_row_and_every_row_says_why() -> None:
    table = rows()
    for report in REPORTS:
        assert any(report in row["report"] for row in table), f"{report}: no row in docs/field-reports.md"
    for row in table:
        assert row["what the harness shows"] and row["faithful?"], row["report"]
        if command_of(row) is None:
            assert row["faithful?"].startswith("no faithful case"), row["report"]
        else:
            assert row["exit"] in ("0", "1"), row["report"]


def test_every_command_parses_as_the_harness_parses_it() -> None:
    from harness.cli import _options
    from harness.cli_parser import build_parser
    from harness.targets import get_target

    for row in rows():
        argv = command_of(row)
        if argv is None:
            continue
        ns = build_parser().parse_args(argv)  # a bad flag: SystemExit(2), the test fails
        opts = _options(ns, argv)
        get_target(opts.target).check(opts)


def test_every_pinning_test_exists() -> None:
    for row in rows():
        for file, name in re.findall(r"`(test_\w+\.py)::(test_\w+)", row["pinned by"]):
            (path,) = list((ROOT / "suites").rglob(file))
            assert f"def {name}(" in path.read_text(encoding="utf-8"), f"{file}::{name} (row {row['report']})"


CHEAP = [
    (row["report"], command_of(row), int(row["exit"])) for row in rows() if command_of(row) and cheap(command_of(row))
]


@pytest.mark.parametrize(("report", "argv", "code"), CHEAP, ids=[r for r, _, _ in CHEAP])
def test_the_cheap_commands_run_as_the_page_says(run_harness, report: str, argv: list[str], code: int) -> None:
    outcome = run_harness(*argv, "--quiet", check_exit=code, timeout=300)
    assert "verdict:" in outcome.stdout and "Traceback" not in outcome.stdout + outcome.stderr, report
