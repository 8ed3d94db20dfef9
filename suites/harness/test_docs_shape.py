"""The docs stay readable as prose: docs/architecture.md is a short table plus paragraphs, so no line
of it runs past 500 characters (its table cells once ran to 1 400), and each table row is one line
per folder."""

from __future__ import annotations

from pathlib import Path

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
MAX_LINE = 500
MAX_TABLE_CELL = 200


def test_no_line_of_the_architecture_page_is_over_the_limit():
    long = [(n, len(line)) for n, line in enumerate(ARCHITECTURE.read_text(encoding="utf-8").splitlines(), 1)]
    assert not [x for x in long if x[1] > MAX_LINE], [x for x in long if x[1] > MAX_LINE]


def test_the_folder_table_says_each_folder_in_one_short_line():
    rows = [line for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines() if line.startswith("| `")]
    assert len(rows) >= 8, rows
    assert all(len(row) <= MAX_TABLE_CELL for row in rows), [row for row in rows if len(row) > MAX_TABLE_CELL]
