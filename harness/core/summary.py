"""Result rows -> summary rows -> headline figures. Pure functions over the schema.

This is where "ok", "median", "the largest N" and "the ratio" are defined, once: the terminal
table, the HTML report, the gates, `harness bench` and the tests all quote these, so two places
can never give the same question two answers.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import fits, latency
from .composition import composition
from .metrics import BY_RATIO, PAIR_METRICS, RATIO_COLUMNS, group_figures
from .passes import SEQUENTIAL, memory_view, start_of, timing_view
from .physics import bounded, heap_overhead, memory_budget_ratio, weight_copies
from .schema import ResultRow, SummaryRow
from .slack import short_of
from .vocab import EpState, Mode, PathTaken

#: A system delta is trusted only when it is at least this many times the idle noise measured
#: around its group: noise within a tenth of the delta moves a ratio by ~20 % at worst; noise of
#: the delta's own order can flip its sign (-1.1 GiB to +1.9 GiB was seen between two runs).
SYSTEM_NOISE_FACTOR = 10
#: How many workers a group note names before it says "and K more".
MAX_NAMED = 3


def row_ok(row: ResultRow) -> bool:
    """A worker counts as ok when it produced a correct output, raised nothing and exited
    cleanly (a worker killed by a signal, exit code -9, is not ok whatever else its row says)."""
    return bool(row.output_ok) and not row.error and row.exit_code in (None, 0)


def row_sampled(row: ResultRow) -> bool:
    """Its memory was sampled at the barrier, with the figures every platform gives (RSS and
    USS / private bytes), and the runner found them plausible for the worker's mode."""
    return (
        row.memory_ok is True
        and row.rss_bytes is not None
        and (row.uss_bytes is not None or row.private_bytes is not None)
        and memory_physical(row)
    )


def memory_physical(row: ResultRow) -> bool:
    """The figures physics allows a live process: none zero, USS <= PSS <= RSS within the
    sampling slack (a page a process holds alone is in its PSS at full weight, and PSS never
    exceeds what is resident). A row that says otherwise was not measured, whatever its
    memory_ok says."""
    figures = [row.rss_bytes, row.uss_bytes, row.pss_bytes, row.private_bytes]
    if any(v is not None and v <= 0 for v in figures):
        return False
    ordered = [v for v in (row.uss_bytes, row.pss_bytes, row.rss_bytes) if v is not None]
    return not any(short_of(high, low) for low, high in zip(ordered, ordered[1:], strict=False))


def median(values: Iterable[float | int | None]) -> float | None:
    """Median of the figures present; None when there is none (missing is not zero)."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


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
    return None if all(c is None for c in counted) else sum((c or {}).get(state, 0) for c in counted)


def group_key(row: ResultRow | SummaryRow) -> tuple:
    """(target, mode, N, M, repeat, start): the rows of one group of workers (`passes`)."""
    return (row.target, row.mode, row.processes, row.sessions_per_process, row.repeat, start_of(row))


def _named(rows: list[ResultRow], what: str) -> str:
    names = [str(r.worker) for r in rows[:MAX_NAMED]]
    more = f" and {len(rows) - MAX_NAMED} more" if len(rows) > MAX_NAMED else ""
    return f"worker{'s' if len(rows) > 1 else ''} {', '.join(names)}{more} {what}"


def incomplete_reasons(members: list[ResultRow], processes: int | None) -> list[str]:
    """Why a group of workers is not complete (empty: it is). Complete means all N workers
    reported, finished with a correct output, and were sampled with plausible figures (the
    sequential pass samples no memory: there, all N with a correct output and a time)."""
    reasons = []
    if processes is not None and len(members) != processes:
        reasons.append(f"{len(members)} of {processes} workers reported")
    failed = [r for r in members if not row_ok(r)]
    if failed:
        reasons.append(_named(failed, "failed"))
    ok = [r for r in members if row_ok(r)]
    if members and start_of(members[0]) == SEQUENTIAL:
        untimed = [r for r in ok if r.init_s is None]
        return reasons + ([_named(untimed, "not timed")] if untimed else [])
    unchecked = [r for r in ok if r.memory_ok is None]
    if unchecked:
        reasons.append(_named(unchecked, "not checked for plausibility (rows of an older harness)"))
    bad = [r for r in ok if r.memory_ok is not None and not row_sampled(r)]
    if bad:
        physical = memory_physical(bad[0]) or bad[0].memory_ok is not True
        first = (bad[0].memory_note or "no memory figures").split("; ")[0] if physical else "impossible memory figures"
        reasons.append(_named(bad, f"not sampled or implausible ({first})"))
    return reasons


def system_delta_state(delta: int | None, noise: int | None) -> str:
    """ "" when the system delta can be trusted, else why not (for the summary note)."""
    doubt = _delta_doubt(delta, noise)
    return f"{UNRELIABLE_DELTA}{doubt}" if doubt else ""


#: How the summary note begins the reason a group's system delta is not trusted.
UNRELIABLE_DELTA = "system delta unreliable: "


def _delta_doubt(delta: int | None, noise: int | None) -> str:
    from .units import fmt_bytes

    if delta is None:
        return ""
    if noise is None:
        return "no idle noise measured around it"
    if delta <= 0:
        return (
            f"available memory rose by {fmt_bytes(-delta)} while the workers were alive (idle noise {fmt_bytes(noise)})"
        )
    if noise * SYSTEM_NOISE_FACTOR > delta:
        return f"idle noise {fmt_bytes(noise)} is more than 1/{SYSTEM_NOISE_FACTOR} of the delta {fmt_bytes(delta)}"
    return ""


def delta_doubt(row: SummaryRow) -> str:
    """Why a group's system delta is not trusted, from its figures ("" when it is, or has none)."""
    return _delta_doubt(row.system_delta_bytes, row.system_noise_bytes)


def system_delta_reliable(row: SummaryRow) -> bool:
    return row.system_delta_bytes is not None and not delta_doubt(row)


def _system(value: Any) -> tuple[int | None, int | None]:
    """(delta, noise) from what the runner recorded: a pair, or a bare delta (no noise)."""
    if isinstance(value, tuple):
        return value[0], value[1]
    return value, None


def _measured(system: Mapping[tuple, Any] | None, key: tuple) -> Any:
    """What the runner recorded for a group; a key without the pass (older callers) is the
    concurrent pass's."""
    system = system or {}
    return system.get(key, system.get(key[:5]) if key[5] != SEQUENTIAL else None)


def summarize(rows: Iterable[ResultRow], system: Mapping[tuple, Any] | None = None) -> list[SummaryRow]:
    """Group rows by `group_key`.

    Sums are given for complete groups only (`incomplete_reasons`): a partial sum is not the
    group's memory, and a ratio over one would compare unequal things. ``system`` maps the
    group key to (drop in system available memory, idle noise around it) measured by the
    runner (a bare number is a drop without a noise figure)."""
    groups: dict[tuple, list[ResultRow]] = defaultdict(list)
    for row in rows:
        groups[group_key(row)].append(row)
    out = []
    for key, members in sorted(groups.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        ok = [r for r in members if row_ok(r)]
        paths = sorted({r.ep_file_mapping for r in members if r.ep_file_mapping})
        complete = not (reasons := incomplete_reasons(members, key[2]))
        delta, noise = _system(measured := _measured(system, key))
        unreliable = system_delta_state(delta, noise)
        out.append(
            SummaryRow(
                target=key[0],
                mode=key[1],
                processes=key[2],
                sessions_per_process=key[3],
                repeat=key[4],
                start=key[5],
                page_cache="|".join(sorted({r.page_cache for r in members if r.page_cache})) or None,
                system_delta_bytes=delta,
                weights_bytes=max((r.weights_bytes or 0) for r in members) or None,
                ok_workers=len(ok),
                failed_workers=len(members) - len(ok),
                fallback_workers=sum(1 for r in members if r.path_taken == PathTaken.FALLBACK),
                ep_file_mapping="|".join(paths),
                unknown_sessions=_count_sessions(members, EpState.UNKNOWN),
                retried_sessions=_count_sessions(members, EpState.RETRIED),
                complete=complete,
                system_noise_bytes=noise,
                note="; ".join([*reasons, *([unreliable] if unreliable else [])]) or None,
                **group_figures(members, ok, complete),
                **latency.group_figures(ok),
                **fits.group_figures(ok, measured, members),
                **composition(ok),
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
    """(mapped, heap) summary rows measured at the same target, pass, N, M and repeat."""
    by_key: dict[tuple, dict[str, SummaryRow]] = defaultdict(dict)
    for s in summary:
        by_key[(s.target, start_of(s), s.processes, s.sessions_per_process, s.repeat)][s.mode] = s
    return [(v[Mode.MAPPED], v[Mode.HEAP]) for _, v in sorted(by_key.items()) if set(Mode) <= v.keys()]


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


def timing_pairs(summary: Iterable[SummaryRow]) -> list[tuple[SummaryRow, SummaryRow]]:
    """The (mapped, heap) pairs timing figures come from: the timing pass's (`passes`) at the
    headline's N x M (the concurrent pass's when the run has no timing pass)."""
    rows = list(summary)
    top = headline_pairs(memory_view(rows))
    size = sessions_of(top[0][0]) if top else None
    return [(m, h) for m, h in paired(timing_view(rows)) if sessions_of(m) == size]


def largest_groups(summary: Iterable[SummaryRow]) -> list[SummaryRow]:
    """Every summary row at the largest N x M (any mode): what to show when no pair exists."""
    rows = list(summary)
    if not rows:
        return []
    top = max(sessions_of(s) for s in rows)
    return [s for s in rows if sessions_of(s) == top]


def complete_pair(mapped: SummaryRow, heap: SummaryRow) -> bool:
    return mapped.complete is True and heap.complete is True


def pair_ratio(mapped: SummaryRow, heap: SummaryRow, column: str) -> float | None:
    """mapped / heap of one column for one pair, only where it means something: both groups
    complete, and for the system delta both deltas above their noise."""
    if not complete_pair(mapped, heap):
        return None
    if column == "system_delta_bytes" and not (system_delta_reliable(mapped) and system_delta_reliable(heap)):
        return None
    return ratio(getattr(mapped, column), getattr(heap, column))


def median_ratio(pairs: Sequence[tuple[SummaryRow, SummaryRow]], column: str) -> float | None:
    """THE factor of ``column`` over complete (mapped, heap) pairs: the ratio of the medians
    of the pairs that have one, i.e. of the two figures the sentence, tables and headline.json
    print (a median of per-repeat ratios differs from them: 74.3x beside 80 ms vs 7.27 s)."""
    usable = [(m, h) for m, h in pairs if pair_ratio(m, h, column) is not None]
    return ratio(median(getattr(m, column) for m, _ in usable), median(getattr(h, column) for _, h in usable))


def _peer_init_ratio(summary: Sequence[SummaryRow], pairs: list[tuple[SummaryRow, SummaryRow]]) -> float | None:
    """Mapped init of the run's target over a peer target's mapped init, at the same N x M and
    repeat (a --peer run), median over repeats. Complete groups only."""
    if not pairs:
        return None
    target = pairs[0][0].target
    values = []
    for mapped, _ in pairs:
        peers = [
            s
            for s in summary
            if s.target != target
            and s.mode == Mode.MAPPED
            and s.complete is True
            and s.processes == mapped.processes
            and s.sessions_per_process == mapped.sessions_per_process
            and s.repeat == mapped.repeat
        ]
        for peer in peers:
            values.append(ratio(mapped.init_s_median, peer.init_s_median))
    return median(values)


def _where(row: SummaryRow) -> str:
    return f"{row.mode} N={row.processes} x M={row.sessions_per_process} repeat {row.repeat}"


def headline_with_reasons(summary: Iterable[SummaryRow]) -> tuple[dict[str, float | int | None], dict[str, Any]]:
    """(`headline`, why each missing value is missing). The reasons are what a gate on that
    value says when it fails: a gate must never fail as a bare "not measured" when the harness
    knows that a group was incomplete or a delta lost in noise."""
    summary = list(summary)
    target = primary_target(summary)
    own = [s for s in summary if s.target == target]
    top = headline_pairs(memory_view(own))
    timed = timing_pairs(own)
    result: dict[str, float | int | None] = {
        "failed_workers": sum(s.failed_workers or 0 for s in summary),
        "fallback_workers": sum(s.fallback_workers or 0 for s in summary),
        "unknown_sessions": _total(s.unknown_sessions for s in summary),
        "retried_sessions": _total(s.retried_sessions for s in summary),
    }
    reasons: dict[str, Any] = {}  # a text, or physics' `Refusal`
    pair_keys = [*PAIR_METRICS, "peer_init_ratio"]
    if not top:
        modes = sorted({s.mode for s in own})
        why = (
            f"needs mapped and heap groups at the same N; only {', '.join(modes)} mode was measured"
            if modes
            else "no group was measured"
        )
        return result | dict.fromkeys(pair_keys), dict.fromkeys(pair_keys, why)
    result["processes"] = top[0][0].processes
    result["sessions"] = sessions_of(top[0][0])
    result["contended_groups"] = sum(1 for pair in timed for s in pair if s.contended)
    pairs = [(m, h) for m, h in top if complete_pair(m, h)]
    timed_pairs = [(m, h) for m, h in timed if complete_pair(m, h)]
    if not pairs:
        broken = next(s for pair in top for s in pair if s.complete is not True)
        why = f"incomplete data: {_where(broken)}: {broken.note or 'completeness unknown'}"
        return result | dict.fromkeys(pair_keys), dict.fromkeys(pair_keys, why)
    for name, column in RATIO_COLUMNS.items():  # timings from the timing pass (`passes`)
        result[name] = median_ratio(timed_pairs if BY_RATIO[name].timing else pairs, column)
    if result["system_delta_ratio"] is None:
        noisy = next((s for pair in pairs for s in pair if delta_doubt(s)), None)
        if noisy is not None:
            reasons["system_delta_ratio"] = f"{_where(noisy)}: {UNRELIABLE_DELTA}{delta_doubt(noisy)}"
    copies = [weight_copies(m, h) for m, h in pairs]
    result["mapped_weight_copies"] = median(c[0] for c in copies)
    result["heap_copies_per_session"] = median(c[1] for c in copies)
    result["mapped_memory_budget_ratio"] = median(memory_budget_ratio(m) for m, _ in pairs)
    weights = max((h.weights_bytes or m.weights_bytes or 0) for m, h in pairs) or None
    overhead = median(heap_overhead(h) for _, h in pairs)
    for name in PAIR_METRICS:  # physics first: an impossible figure is no measurement
        result[name], why = bounded(name, result[name], result, weights, overhead)
        if why:
            reasons[name] = why
    result["peer_init_ratio"] = _peer_init_ratio(timing_view(summary), timed_pairs)
    if result["peer_init_ratio"] is None:
        peers = [s for s in summary if s.target != target]
        reasons["peer_init_ratio"] = (
            "no complete --peer group at the headline's N" if peers else "no --peer target was measured"
        )
    return result, reasons


def headline(summary: Iterable[SummaryRow]) -> dict[str, float | int | None]:
    """The figures the report leads with and the gates check, at the largest N x M measured
    in both modes (median over its complete repeats), plus totals over every group. A ratio
    comes only from complete groups; at that N x M, no complete pair means no ratio."""
    return headline_with_reasons(summary)[0]
