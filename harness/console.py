"""The summary table printed on stdout: mapped and heap side by side, with ratios."""

from __future__ import annotations

from harness.core.schema import SummaryRow
from harness.core.summary import paired, ratio
from harness.core.units import fmt_bytes, fmt_ratio, fmt_seconds

#: (label, SummaryRow column, formatter)
TABLE_METRICS = [
    ("sum PSS", "sum_pss_bytes", fmt_bytes),
    ("sum USS", "sum_uss_bytes", fmt_bytes),
    ("sum private", "sum_private_bytes", fmt_bytes),
    ("sum RSS", "sum_rss_bytes", fmt_bytes),
    ("system delta", "system_delta_bytes", fmt_bytes),
    ("median init", "init_s_median", fmt_seconds),
]


def summary_table(summary: list[SummaryRow]):
    """A rich Table: one block of metric lines per (target, N, M, repeat)."""
    from rich.table import Table

    table = Table(title="file-mapped weights: mapped vs heap", show_lines=False)
    for name in ("target", "N x M", "rep", "metric", "mapped", "heap", "mapped/heap"):
        table.add_column(name, justify="left" if name in ("target", "metric") else "right")
    for mapped, heap in paired(summary):
        first = True
        for label, column, fmt in TABLE_METRICS:
            m, h = getattr(mapped, column), getattr(heap, column)
            table.add_row(
                mapped.target if first else "",
                f"{mapped.processes} x {mapped.sessions_per_process}" if first else "",
                str(mapped.repeat) if first else "",
                label, fmt(m), fmt(h), fmt_ratio(ratio(m, h)),
                end_section=column == TABLE_METRICS[-1][1],
            )
            first = False
    unpaired = [s for s in summary if not any(s in p for p in paired(summary))]
    for s in unpaired:
        table.add_row(s.target, f"{s.processes} x {s.sessions_per_process}", str(s.repeat),
                      f"{s.mode} only: sum PSS / init", fmt_bytes(s.sum_pss_bytes),
                      fmt_seconds(s.init_s_median), "-")
    return table


def outcome_table(rows) -> object | None:
    """With faults or retries and --repeat: how each repeat ended, to show determinism."""
    from collections import Counter

    from rich.table import Table

    interesting = [r for r in rows if r.path_taken == "fallback" or (r.map_attempts or 0) > 1
                   or r.ep_file_mapping in ("retried",) or r.error]
    if not interesting:
        return None
    table = Table(title="outcomes per repeat (recovery must be deterministic)")
    for name in ("repeat", "mode", "N", "path_taken", "map_attempts", "ep_file_mapping", "workers", "errors"):
        table.add_column(name)
    counts = Counter((r.repeat, r.mode, r.processes, r.path_taken, r.map_attempts, r.ep_file_mapping,
                      bool(r.error)) for r in rows)
    for (rep, mode, n, path, attempts, ep, err), count in sorted(counts.items(), key=str):
        table.add_row(str(rep), mode, str(n), str(path), str(attempts), ep, str(count), "yes" if err else "")
    return table
