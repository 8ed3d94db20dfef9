"""Run folders of older format versions, brought up to this harness's when they are loaded.

A run folder says which format it was written in (metadata.json's ``format_version``). Each
change of a file's shape bumps `harness.core.schema.FORMAT_VERSION` and adds a step here,
``update_to_N``, that turns a folder of version N-1 into one of version N, as asv migrates its
result files. `migrate` runs the steps from the folder's version up to the current one, on the
folder as read (metadata and text cells), in memory: a run folder is never rewritten (a report
reads a run's facts, only the runner writes them), and the readers after it see one format.

The versions (docs/results.md, "Format versions"):

1. What the harness wrote up to commit a15ff72. Columns were added during version 1 without a
   bump, so a version-1 table may lack any column declared ``since=2`` (``memory_ok``,
   ``complete``, the start-up peak, the latency statistics, the memory split, contention...).
2. Every table of the folder has every column of the schema (a missing one is refused); from
   here on each change of a file's shape is a version of its own.
3. The columns of the timing pass (``start``, ``foreign_cpus``, ``floor_s`` and their summary
   figures: a group key now includes its pass) and of the memory container (``memory_limit_bytes``,
   ``oom_killed``, ``container_peak_bytes``, ``oom_workers``). A version-2 folder has neither: its
   rows are the concurrent pass, run without a limit.
4. The generate workload's columns (``ttft_s``, ``decode_tokens_per_s``, ``token_latency_*``,
   ``kv_cache_bytes``, ``generated_tokens``, ``tokens_ok``): a version-3 folder ran the infer workload.
"""

from __future__ import annotations

from collections.abc import Callable

from .schema import FORMAT_VERSION, ResultRow, SummaryRow, columns_since
from .tables import RESULTS_CSV, SUMMARY_CSV, TextTable

#: One step: (metadata.json as a dict, the folder's tables by row type) -> what it changed, in
#: words for the report. The metadata is changed in place, so are the tables.
Step = Callable[[dict, dict[type, TextTable]], list[str]]
_NAMES = {ResultRow: RESULTS_CSV, SummaryRow: SUMMARY_CSV}


def add_columns(version: int, tables: dict[type, TextTable]) -> list[str]:
    """The columns ``version`` added, appended empty to every table that lacks them: an empty
    cell is a figure not measured, which is what an older harness's table says about it."""
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
    """Version 1 -> 2: the columns added while the version stayed 1 are added empty (a table
    of version 2 has them all). metadata.json kept its shape: its newer entries (default
    gates, target notes, version labels) were and are read as absent when missing."""
    return add_columns(2, tables)


def update_to_3(meta: dict, tables: dict[type, TextTable]) -> list[str]:
    """Version 2 -> 3: the timing pass's and the memory container's columns, added empty (an
    empty ``start`` reads as the concurrent pass, an empty limit as none)."""
    return add_columns(3, tables)


def update_to_4(meta: dict, tables: dict[type, TextTable]) -> list[str]:
    """Version 3 -> 4: the generate workload's columns, added empty (the infer workload)."""
    return add_columns(4, tables)


#: ``update_to_N`` for every N after the oldest version: `migrate` runs them in order.
MIGRATIONS: dict[int, Step] = {2: update_to_2, 3: update_to_3, 4: update_to_4}


def migrate(meta: dict, tables: dict[type, TextTable], version: int) -> list[str]:
    """Bring a run folder of format ``version`` up to `FORMAT_VERSION` (in place, in memory);
    returns what the steps changed (empty for a current folder)."""
    done: list[str] = []
    for target in range(version + 1, FORMAT_VERSION + 1):
        done += MIGRATIONS[target](meta, tables)
        if meta:
            meta["format_version"] = target
    return done
