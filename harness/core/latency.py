"""Latency per worker and per group, as `onnxruntime_perf_test` reports it (mean, stdev, min,
p50, p90, p95, p99, max, inferences/s after ``--warmup K``): what the feature costs per inference.
A group pools the mean and stdev over every timed inference (exact from the workers' counts);
the other statistics are declared in `harness.core.metrics` (percentiles: medians over workers).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .metrics import LATENCY_STATS
from .vocab import Mode

#: Per-worker latency figures (WorkerRecord and ResultRow share these names).
WORKER_FIELDS = (
    "warmup",
    "concurrency",
    "latency_mean_s",
    "latency_stdev_s",
    "latency_min_s",
    "latency_p95_s",
    "latency_max_s",
    "inferences_per_s",
)
#: The statistics (`metrics.LATENCY_STATS`, keys of `LatencyStats`) in the order tables show them.
SHOWN = ("mean", "stdev", "min", "p50", "p90", "p95", "p99", "max")


@dataclass
class LatencyStats:
    """One worker's timed inferences (seconds), or a group's (see the module docstring)."""

    runs: int
    mean: float
    stdev: float | None
    min: float
    p50: float
    p90: float
    p95: float
    p99: float
    max: float
    inferences_per_s: float | None


def percentile(ordered: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, linear between the two closest ranks
    (numpy's default, so figures match ``np.percentile``)."""
    if not ordered:
        raise ValueError("percentile of no values")
    at = (len(ordered) - 1) * q / 100
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def stats(samples: Sequence[float], wall_s: float | None = None) -> LatencyStats:
    """The figures of ``samples``; inferences/s is the count over ``wall_s`` (the wall time of
    the timed phase: with C threads it is C times what one thread's latency gives)."""
    import statistics  # not at import: the worker imports this module before its timed runs

    ordered = sorted(samples)
    p = {q: percentile(ordered, q) for q in (50, 90, 95, 99)}
    return LatencyStats(
        runs=len(ordered),
        mean=statistics.fmean(ordered),
        stdev=statistics.stdev(ordered) if len(ordered) > 1 else None,
        min=ordered[0],
        p50=p[50],
        p90=p[90],
        p95=p[95],
        p99=p[99],
        max=ordered[-1],
        inferences_per_s=len(ordered) / wall_s if wall_s else None,
    )


def timed_runs(run_once: Callable[[], Any], runs: int, concurrency: int = 1) -> tuple[list[float], float]:
    """``runs`` timed calls of ``run_once`` spread over ``concurrency`` threads (as
    ``onnxruntime_perf_test -c``: the same session, concurrent Run calls). Returns the
    latencies and the wall time of the whole phase. A thread's exception is re-raised."""
    samples: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    shares = [runs // concurrency + (1 if i < runs % concurrency else 0) for i in range(concurrency)]

    def work(count: int) -> None:
        mine = []
        try:
            for _ in range(count):
                t0 = time.perf_counter()
                run_once()
                mine.append(time.perf_counter() - t0)
        except BaseException as err:  # handed to the caller below
            errors.append(err)
        with lock:
            samples.extend(mine)

    t0 = time.perf_counter()
    if concurrency == 1:
        work(runs)
    else:
        threads = [threading.Thread(target=work, args=(n,), name=f"inference-{i}") for i, n in enumerate(shares)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return samples, wall


def record_stats(record: Any, found: LatencyStats) -> None:
    """Copy a worker's figures into its record (the ResultRow column names)."""
    record.runs = found.runs
    record.latency_p50_s, record.latency_p90_s, record.latency_p99_s = found.p50, found.p90, found.p99
    record.latency_mean_s, record.latency_stdev_s, record.latency_min_s = found.mean, found.stdev, found.min
    record.latency_p95_s, record.latency_max_s = found.p95, found.max
    record.inferences_per_s = found.inferences_per_s


def pooled_stdev(rows: Sequence[Any]) -> float | None:
    """The stdev of every timed inference of ``rows``, from each worker's count, mean and
    stdev (exact: the within-worker and between-worker sums of squares)."""
    parts = [
        (r.runs, r.latency_mean_s, r.latency_stdev_s or 0.0) for r in rows if r.runs and r.latency_mean_s is not None
    ]
    total = sum(n for n, _, _ in parts)
    if total < 2:
        return None
    mean = sum(n * m for n, m, _ in parts) / total
    squares = sum((n - 1) * s * s + n * (m - mean) ** 2 for n, m, s in parts)
    return math.sqrt(squares / (total - 1))


def group_figures(ok: Sequence[Any]) -> dict[str, Any]:
    """The pooled SummaryRow latency columns of one group (the others: `metrics.FIGURES`)."""
    timed = [r for r in ok if r.runs and r.latency_mean_s is not None]
    total = sum(r.runs for r in timed)
    return {
        "latency_mean_s": sum(r.runs * r.latency_mean_s for r in timed) / total if total else None,
        "latency_stdev_s": pooled_stdev(timed),
    }


def mode_block(row: Any) -> dict[str, Any]:
    """One group's latency and start-up figures for headline.json (seconds; None: not measured)."""
    block: dict[str, Any] = {key: getattr(row, LATENCY_STATS[key]) for key in SHOWN}
    block["inferences_per_s"] = row.inferences_per_s
    block["init_s"] = row.init_s_median
    block["first_run_s"] = row.first_run_s_median
    block["init_plus_first_run_s"] = row.startup_s_median
    p50 = row.latency_p50_s_median
    first = row.first_run_s_median
    # the first inference's extra cost over a steady one: mapped pages are faulted in there
    block["first_run_penalty_s"] = first - p50 if first is not None and p50 is not None else None
    return block


def headline_latency(pairs: Sequence[tuple[Any, Any]], run_meta: dict[str, Any]) -> dict[str, Any] | None:
    """headline.json's ``latency`` key: the headline's first complete pair (the median over
    repeats is in ``per_n``), with the page-cache state the first inference met."""
    if not pairs:
        return None
    mapped, heap = pairs[0]
    return {
        "processes": mapped.processes,
        "sessions_per_process": mapped.sessions_per_process,
        "repeat": mapped.repeat,
        "runs": run_meta.get("runs"),
        "warmup": run_meta.get("warmup"),
        "concurrency": run_meta.get("concurrency"),
        "page_cache": mapped.page_cache,
        Mode.MAPPED: mode_block(mapped),
        Mode.HEAP: mode_block(heap),
    }


def latency_lines(pairs: Sequence[tuple[Any, Any]], fmt: Callable[[float | None], str]) -> list[str]:
    """The terminal's latency table (after the memory table): one line per mode and repeat at
    the headline's N x M, plus init, first inference and init + first inference."""
    timed = [(m, h) for m, h in pairs if m.latency_p50_s_median is not None or h.latency_p50_s_median is not None]
    if not timed:
        return []
    head = ["mode", "rep", *SHOWN, "inf/s", "init", "first", "init+first"]
    rows = [head]
    for mapped, heap in timed:
        for row in (mapped, heap):
            cells = [row.mode, str(row.repeat), *[fmt(getattr(row, LATENCY_STATS[key])) for key in SHOWN]]
            rate = row.inferences_per_s
            cells += [f"{rate:.1f}" if rate is not None else "-"]
            cells += [fmt(row.init_s_median), fmt(row.first_run_s_median), fmt(row.startup_s_median)]
            rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    first = timed[0][0]
    title = (
        f"latency per inference, N={first.processes} x M={first.sessions_per_process} "
        f"(page cache {first.page_cache or 'unknown'}; stats over every worker's timed runs, "
        "percentiles and inf/s medians over workers)"
    )
    return [title, *("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows)]
