"""Start-up and latency, mapped vs heap: init alone flatters mapping (its pages are faulted in
by the first inferences), so init + first inference is the honest comparison."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.core.rundata import RunData
from harness.core.summary import headline_pairs, median, ratio
from harness.core.units import fmt_bytes, fmt_ratio, fmt_seconds
from harness.core.vocab import Mode, PageCache, Workload

#: (label, SummaryRow column, how to read it)
ROWS = (
    ("Init (load + create)", "init_s_median", "until the sessions exist"),
    ("First inference", "first_run_s_median", "mapped weights are faulted in here, not at init"),
    ("Init + first inference", "startup_s_median", "the honest start-up comparison"),
    ("Latency p50", "latency_p50_s_median", "steady state, over --runs R inferences"),
    ("Latency p90", "latency_p90_s_median", ""),
    ("Latency p95", "latency_p95_s_median", ""),
    ("Latency p99", "latency_p99_s_median", ""),
    ("Latency mean", "latency_mean_s", "over every timed inference of the group"),
    ("Latency max", "latency_max_s", "the slowest timed inference of the group"),
)
SAME_LATENCY = (0.9, 1.1)  #: Steady-state latency within this ratio is "no difference" (noise on a shared machine).


@dataclass
class StartupView:
    at: str
    page_cache: str
    rows: list[dict[str, str]] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)


def _page_cache_text(run: RunData) -> str:
    asked = str(run.run.get("page_cache") or PageCache.WARM)
    states = sorted({r.page_cache for r in run.results if r.page_cache})
    resident = [r.weights_resident_bytes for r in run.results if r.weights_resident_bytes is not None]
    at_start = f" (at most {fmt_bytes(max(resident))} of the weights resident as a group started)" if resident else ""
    if asked == PageCache.COLD:
        if states == [PageCache.COLD]:
            return f"cold: the weights' pages were evicted before each group and the eviction verified{at_start}"
        return (
            "cold asked, but the eviction could not be verified for every group "
            f"({', '.join(states) or 'no group'}){at_start}: read first-run figures with care"
        )
    return f"warm: the weights were read once before the first group{at_start}"


def startup_view(run: RunData) -> StartupView | None:
    """The table at the headline's N (median over repeats), or None without a mapped/heap pair."""
    own = [s for s in run.summary if s.target == run.target]
    pairs = headline_pairs(own)
    if not pairs:
        return None
    view = StartupView(f"N={pairs[0][0].processes}, median over {len(pairs)} repeat(s)", _page_cache_text(run))
    values: dict[str, tuple[float | None, float | None]] = {}
    for label, column, hint in ROWS:
        m = median(getattr(mp, column) for mp, _ in pairs)
        h = median(getattr(hp, column) for _, hp in pairs)
        values[column] = (m, h)
        if m is None and h is None:
            continue
        diff = h - m if m is not None and h is not None else None
        view.rows.append(
            {
                "label": label,
                "hint": hint,
                Mode.MAPPED: fmt_seconds(m),
                Mode.HEAP: fmt_seconds(h),
                "diff": fmt_seconds(diff) if diff is not None else "–",
                "ratio": fmt_ratio(ratio(m, h)),
            }
        )
    first = values["first_run_s_median"]
    if first[0] is not None and first[1] is not None:
        penalty = first[0] - first[1]
        view.verdicts.append(
            f"First-inference penalty of mapped weights: {fmt_seconds(penalty)} "
            f"({fmt_ratio(ratio(*first))} x heap's first inference)"
            if penalty > 0
            else "Mapped weights' first inference was no slower than heap's."
        )
    p50 = ratio(*values["latency_p50_s_median"])
    if p50 is not None:
        same = SAME_LATENCY[0] <= p50 <= SAME_LATENCY[1]
        view.verdicts.append(
            f"Steady-state latency does not differ between the modes (p50 mapped/heap {fmt_ratio(p50)}, within "
            f"{SAME_LATENCY[0]}-{SAME_LATENCY[1]})"
            if same
            else f"Steady-state latency differs by more than 10% between the modes (p50 mapped/heap {fmt_ratio(p50)}): "
            "a real difference, or noise on a busy machine; --repeat tells them apart"
        )
    elif run.run.get("runs") in (0, None) and run.run.get("workload") != Workload.GENERATE:  # no --runs there
        view.verdicts.append("Steady-state latency was not measured: run with --runs R (e.g. 20).")
    return view
