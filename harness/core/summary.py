"""Result rows -> summary rows -> headline ratios. Pure functions over the schema.

The headline ratios are what the stdout table, the HTML report and the gates all quote, so
they are computed here once: mapped figure / heap figure at the same target, N and repeat.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping

from harness.core.schema import ResultRow, SummaryRow

#: Headline metric -> SummaryRow column whose mapped/heap ratio it is.
RATIO_COLUMNS = {
    "mapped_pss_ratio": "sum_pss_bytes",
    "mapped_uss_ratio": "sum_uss_bytes",
    "mapped_rss_ratio": "sum_rss_bytes",
    "mapped_private_ratio": "sum_private_bytes",
    "system_delta_ratio": "system_delta_bytes",
    "init_ratio": "init_s_median",
    "create_ratio": "create_s_median",
}


def row_ok(row: ResultRow) -> bool:
    """A worker counts as ok when it produced a correct output and raised nothing."""
    return bool(row.output_ok) and not row.error


def _sum(values: Iterable[int | None]) -> int | None:
    values = list(values)
    if not values or any(v is None for v in values):
        return None  # a missing figure makes the sum meaningless: report it empty
    return int(sum(values))


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(
    rows: Iterable[ResultRow], system_deltas: Mapping[tuple, int | None] | None = None
) -> list[SummaryRow]:
    """Group rows by (target, mode, processes, sessions_per_process, repeat).

    Memory sums only use workers that got as far as the barrier (``ok`` rows); a crashed
    worker's memory would otherwise be counted as zero. ``system_deltas`` maps the same group
    key to the drop in system available memory measured by the runner."""
    groups: dict[tuple, list[ResultRow]] = defaultdict(list)
    for row in rows:
        key = (row.target, row.mode, row.processes, row.sessions_per_process, row.repeat)
        groups[key].append(row)
    out = []
    for key, members in sorted(groups.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        ok = [r for r in members if row_ok(r)]
        paths = sorted({r.ep_file_mapping for r in members if r.ep_file_mapping})
        out.append(
            SummaryRow(
                target=key[0],
                mode=key[1],
                processes=key[2],
                sessions_per_process=key[3],
                repeat=key[4],
                init_s_median=_median(r.init_s for r in ok),
                create_s_median=_median(r.create_s for r in ok),
                sum_rss_bytes=_sum(r.rss_bytes for r in ok) if ok else None,
                sum_uss_bytes=_sum(r.uss_bytes for r in ok) if ok else None,
                sum_pss_bytes=_sum(r.pss_bytes for r in ok) if ok else None,
                sum_private_bytes=_sum(r.private_bytes for r in ok) if ok else None,
                system_delta_bytes=(system_deltas or {}).get(key),
                weights_bytes=max((r.weights_bytes or 0) for r in members) or None,
                ok_workers=len(ok),
                failed_workers=len(members) - len(ok),
                fallback_workers=sum(1 for r in members if r.path_taken == "fallback"),
                ep_file_mapping="|".join(paths),
            )
        )
    return out


def ratio(mapped: float | None, heap: float | None) -> float | None:
    """mapped / heap, or None when either side is missing or heap is zero."""
    if mapped is None or heap is None or heap == 0:
        return None
    return mapped / heap


def paired(summary: Iterable[SummaryRow]) -> list[tuple[SummaryRow, SummaryRow]]:
    """(mapped, heap) summary rows measured at the same target, N, M and repeat."""
    by_key: dict[tuple, dict[str, SummaryRow]] = defaultdict(dict)
    for s in summary:
        by_key[(s.target, s.processes, s.sessions_per_process, s.repeat)][s.mode] = s
    return [(v["mapped"], v["heap"]) for _, v in sorted(by_key.items()) if {"mapped", "heap"} <= v.keys()]


def headline(summary: Iterable[SummaryRow]) -> dict[str, float | int | None]:
    """The ratios the report leads with and the gates check, at the largest N measured
    (median over repeats), plus the total of failed workers over every group."""
    summary = list(summary)
    pairs = paired(summary)
    result: dict[str, float | int | None] = {
        "failed_workers": sum(s.failed_workers or 0 for s in summary),
        "fallback_workers": sum(s.fallback_workers or 0 for s in summary),
    }
    if not pairs:
        return result | dict.fromkeys(RATIO_COLUMNS)
    top = max(m.processes * m.sessions_per_process for m, _ in pairs)
    at_top = [(m, h) for m, h in pairs if m.processes * m.sessions_per_process == top]
    result["processes"] = at_top[0][0].processes
    result["sessions"] = top
    for name, column in RATIO_COLUMNS.items():
        values = [ratio(getattr(m, column), getattr(h, column)) for m, h in at_top]
        result[name] = _median(values)
    return result
