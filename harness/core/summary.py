"""Result rows -> summary rows -> headline figures. Pure functions over the schema.

This is where "ok", "median", "the largest N" and "the ratio" are defined, once: the terminal
table, the HTML report, the gates, `harness bench` and the tests all quote these, so two places
can never give the same question two answers.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from .schema import ResultRow, SummaryRow

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
#: Headline metrics that are not mapped/heap ratios, with what they mean (docs and gates).
OTHER_METRICS = {
    "mapped_weight_copies": "mapped summed PSS (private bytes where there is no PSS) minus the heap "
    "run's non-weight overhead, in weights: ~1 when every session shares one copy",
    "heap_copies_per_session": "heap summed PSS (private bytes where there is no PSS) over sessions x "
    "weights: >= 1 when every heap session holds its own copy",
    "peer_init_ratio": "median init of the mapped target over the peer target's mapped init (--peer)",
    "failed_workers": "workers that crashed, hung, raised or were wrong, over every group",
    "unknown_sessions": "sessions whose EP log gave no file-mapping evidence, over every group (qnn; not "
    "measured elsewhere)",
    "retried_sessions": "sessions where the EP retried with a direct read, over every group (qnn)",
    "fallback_workers": "workers whose weights fell back to the heap, over every group",
    "processes": "N of the headline (the largest N x M measured in both modes)",
    "sessions": "N x M of the headline",
}


def row_ok(row: ResultRow) -> bool:
    """A worker counts as ok when it produced a correct output and raised nothing."""
    return bool(row.output_ok) and not row.error


def median(values: Iterable[float | int | None]) -> float | None:
    """Median of the figures present; None when there is none (missing is not zero)."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _sum(values: Iterable[int | None]) -> int | None:
    values = list(values)
    if not values or any(v is None for v in values):
        return None  # a missing figure makes the sum meaningless: report it empty
    return int(sum(values))


def session_counts(row: ResultRow) -> dict[str, int] | None:
    """The EP verdict counts of a worker's sessions ("active=3 retried=1"), None when the row
    carries no EP evidence (targets other than qnn, or a worker that died first)."""
    if not row.ep_sessions:
        return None
    counts: dict[str, int] = {}
    for part in row.ep_sessions.split():
        state, _, n = part.partition("=")
        if n.isdigit():
            counts[state] = counts.get(state, 0) + int(n)
    return counts


def _count_sessions(members: list[ResultRow], state: str) -> int | None:
    counted = [session_counts(r) for r in members]
    if all(c is None for c in counted):
        return None
    return sum((c or {}).get(state, 0) for c in counted)


def group_key(row: ResultRow | SummaryRow) -> tuple:
    """(target, mode, N, M, repeat): the rows of one group of workers alive together."""
    return (row.target, row.mode, row.processes, row.sessions_per_process, row.repeat)


def summarize(
    rows: Iterable[ResultRow], system_deltas: Mapping[tuple, int | None] | None = None
) -> list[SummaryRow]:
    """Group rows by `group_key`.

    Memory sums only use workers that got as far as the barrier (``ok`` rows); a crashed
    worker's memory would otherwise be counted as zero. ``system_deltas`` maps the same group
    key to the drop in system available memory measured by the runner."""
    groups: dict[tuple, list[ResultRow]] = defaultdict(list)
    for row in rows:
        groups[group_key(row)].append(row)
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
                init_s_median=median(r.init_s for r in ok),
                create_s_median=median(r.create_s for r in ok),
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
                unknown_sessions=_count_sessions(members, "unknown"),
                retried_sessions=_count_sessions(members, "retried"),
            )
        )
    return out


def _total(values: Iterable[int | None]) -> int | None:
    """Sum of the figures present; None when no group measured it (no evidence is not zero)."""
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def ratio(mapped: float | None, heap: float | None) -> float | None:
    """mapped / heap, or None when either side is missing or heap is zero."""
    if mapped is None or heap is None or heap == 0:
        return None
    return mapped / heap


def sessions_of(row: SummaryRow) -> int:
    """N x M of a summary row (the "size" of a group)."""
    return int(row.processes or 0) * int(row.sessions_per_process or 1)


def paired(summary: Iterable[SummaryRow]) -> list[tuple[SummaryRow, SummaryRow]]:
    """(mapped, heap) summary rows measured at the same target, N, M and repeat."""
    by_key: dict[tuple, dict[str, SummaryRow]] = defaultdict(dict)
    for s in summary:
        by_key[(s.target, s.processes, s.sessions_per_process, s.repeat)][s.mode] = s
    return [(v["mapped"], v["heap"]) for _, v in sorted(by_key.items()) if {"mapped", "heap"} <= v.keys()]


def primary_target(summary: Sequence[SummaryRow]) -> str | None:
    """The run's own target: the one measured in both modes (a --peer is measured mapped only)."""
    pairs = paired(summary)
    if pairs:
        return pairs[0][0].target
    return summary[0].target if summary else None


def headline_pairs(summary: Iterable[SummaryRow]) -> list[tuple[SummaryRow, SummaryRow]]:
    """The (mapped, heap) pairs the headline is about: the largest N x M measured in both
    modes (one pair per repeat)."""
    pairs = paired(summary)
    if not pairs:
        return []
    top = max(sessions_of(m) for m, _ in pairs)
    return [(m, h) for m, h in pairs if sessions_of(m) == top]


def largest_groups(summary: Iterable[SummaryRow]) -> list[SummaryRow]:
    """Every summary row at the largest N x M (any mode): what to show when no pair exists."""
    rows = list(summary)
    if not rows:
        return []
    top = max(sessions_of(s) for s in rows)
    return [s for s in rows if sessions_of(s) == top]


def _fair_bytes(row: SummaryRow) -> int | None:
    """The figure that charges shared pages fairly: PSS, or private bytes where there is none."""
    return row.sum_pss_bytes if row.sum_pss_bytes is not None else row.sum_private_bytes


def weight_copies(mapped: SummaryRow, heap: SummaryRow) -> tuple[float | None, float | None]:
    """(mapped copies of the weights, heap copies per session), from one mapped/heap pair.

    The heap run holds S = N x M copies of the weights W plus an overhead O (Python, ORT, the
    sessions): O = heap - S x W. Whatever the mapped run holds beyond O is its weights, so
    (mapped - O) / W counts how many copies it really keeps (1 = all share one)."""
    weights = heap.weights_bytes or mapped.weights_bytes
    m, h = _fair_bytes(mapped), _fair_bytes(heap)
    sessions = sessions_of(heap)
    if not weights or m is None or h is None or not sessions:
        return None, None
    overhead = h - sessions * weights
    return (m - overhead) / weights, h / (sessions * weights)


def _peer_init_ratio(summary: Sequence[SummaryRow], pairs: list[tuple[SummaryRow, SummaryRow]]) -> float | None:
    """Mapped init of the run's target over a peer target's mapped init, at the same N x M and
    repeat (a --peer run), median over repeats."""
    if not pairs:
        return None
    target = pairs[0][0].target
    values = []
    for mapped, _ in pairs:
        peers = [s for s in summary if s.target != target and s.mode == "mapped"
                 and s.processes == mapped.processes and s.sessions_per_process == mapped.sessions_per_process
                 and s.repeat == mapped.repeat]
        for peer in peers:
            values.append(ratio(mapped.init_s_median, peer.init_s_median))
    return median(values)


def headline(summary: Iterable[SummaryRow]) -> dict[str, float | int | None]:
    """The figures the report leads with and the gates check, at the largest N x M measured
    in both modes (median over repeats), plus totals over every group."""
    summary = list(summary)
    target = primary_target(summary)
    own = [s for s in summary if s.target == target]
    pairs = headline_pairs(own)
    result: dict[str, float | int | None] = {
        "failed_workers": sum(s.failed_workers or 0 for s in summary),
        "fallback_workers": sum(s.fallback_workers or 0 for s in summary),
        "unknown_sessions": _total(s.unknown_sessions for s in summary),
        "retried_sessions": _total(s.retried_sessions for s in summary),
    }
    if not pairs:
        return result | dict.fromkeys([*RATIO_COLUMNS, "mapped_weight_copies", "heap_copies_per_session",
                                       "peer_init_ratio"])
    result["processes"] = pairs[0][0].processes
    result["sessions"] = sessions_of(pairs[0][0])
    for name, column in RATIO_COLUMNS.items():
        result[name] = median(ratio(getattr(m, column), getattr(h, column)) for m, h in pairs)
    copies = [weight_copies(m, h) for m, h in pairs]
    result["mapped_weight_copies"] = median(c[0] for c in copies)
    result["heap_copies_per_session"] = median(c[1] for c in copies)
    result["peer_init_ratio"] = _peer_init_ratio(summary, pairs)
    return result
