"""Older run folders brought up to this format in memory, never rewritten (docs/results.md, "Format versions")."""

from __future__ import annotations

from collections.abc import Callable

from .schema import FORMAT_VERSION, ResultRow, SummaryRow, columns_since
from .tables import RESULTS_CSV, SUMMARY_CSV, TextTable

#: One step: (metadata, tables) -> what it changed (both in place).
Step = Callable[[dict, dict[type, TextTable]], list[str]]
_NAMES = {ResultRow: RESULTS_CSV, SummaryRow: SUMMARY_CSV}


def add_columns(version: int, tables: dict[type, TextTable]) -> list[str]:
    """The columns ``version`` added, appended empty (not measured) to every table that lacks them."""
    done = []
    for row_type, table in tables.items():
        missing = [c for c in columns_since(row_type, version) if c not in table.header]
        if not missing:
            continue
        table.header.extend(missing)
        for row in table.rows:
            row.update(dict.fromkeys(missing, ""))
        done.append(f"{_NAMES.get(row_type, row_type.__name__)} lacked {', '.join(missing)}")
    return done


def update_to_2(meta: dict, tables: dict[type, TextTable]) -> list[str]:
    """Version 1 -> 2: the columns added while the version stayed 1, added empty."""
    return add_columns(2, tables)


def update_to_3(meta: dict, tables: dict[type, TextTable]) -> list[str]:
    """Version 2 -> 3: the timing pass's and the memory container's columns, added empty."""
    return add_columns(3, tables)


MIGRATIONS: dict[int, Step] = {2: update_to_2, 3: update_to_3}  #: ``update_to_N`` per version after the oldest.


def migrate(meta: dict, tables: dict[type, TextTable], version: int) -> list[str]:
    """Bring a run folder of format ``version`` up to `FORMAT_VERSION`; returns what changed."""
    done: list[str] = []
    for target in range(version + 1, FORMAT_VERSION + 1):
        done += MIGRATIONS[target](meta, tables)
        if meta:
            meta["format_version"] = target
    return done
