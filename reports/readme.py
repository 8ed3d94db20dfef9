"""The column tables of docs/results.md, generated from `harness.core.schema` (``python -m reports.readme``)."""

from __future__ import annotations

from harness.core.schema import ResultRow, SummaryRow, column_docs
from harness.core.tables import LONG_DTYPES


def column_table(row_type: type) -> str:
    """A Markdown table: column | dtype | unit | meaning, in CSV column order."""
    lines = ["| column | dtype | unit | meaning |", "| --- | --- | --- | --- |"]
    for name, dtype, unit, doc in column_docs(row_type):
        lines.append(f"| `{name}` | {dtype} | {unit or ''} | {doc.replace('|', '&#124;')} |")
    return "\n".join(lines)


def long_table() -> str:
    lines = ["| column | dtype |", "| --- | --- |"]
    lines += [f"| `{name}` | {dtype} |" for name, dtype in LONG_DTYPES.items()]
    return "\n".join(lines)


def column_tables() -> str:
    """All three tables with their headings, as docs/results.md shows them."""
    return "\n\n".join(
        [
            "### results.csv (one row per worker x mode x repeat)",
            column_table(ResultRow),
            "### summary.csv (one row per target x mode x N x M x repeat)",
            column_table(SummaryRow),
            "### results_long.csv (one row per run x worker x metric; missing figures left out)",
            long_table(),
        ]
    )


if __name__ == "__main__":  # pragma: no cover
    print(column_tables())
