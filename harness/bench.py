"""`harness bench`: the headline benchmark, one run, medians and ratios side by side.

It runs the cpu target (mapped and heap) and the ort-native peer (mapped) at the same N and
model size, then checks the figures the project promises, computed from that one run:

- mapped sum of PSS <= 1.25 x weights + the heap run's non-weight overhead
- heap sum of PSS >= N x weights
- mapped median init <= 5 % of heap's
- mapped median init within 2x of ort-native's

Performance claims live here, not in timed test assertions that would flake on a noisy
machine. Writes ``bench.json`` (format-versioned) next to the two run folders.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from harness.core.errors import InputError
from harness.core.schema import FORMAT_VERSION, SummaryRow
from harness.core.units import fmt_bytes, fmt_ratio, fmt_seconds
from harness.runner.spec import write_json_atomic


@dataclass
class Criterion:
    name: str
    measured: float | None
    limit: float | None
    passed: bool
    detail: str


def _pick(summary: list[SummaryRow], target: str, mode: str, n: int) -> SummaryRow | None:
    rows = [s for s in summary if s.target == target and s.mode == mode and s.processes == n]
    if not rows:
        return None
    def median_over_repeats(attr: str):
        values = [getattr(r, attr) for r in rows if getattr(r, attr) is not None]
        return statistics.median(values) if values else None

    attrs = ("sum_pss_bytes", "sum_private_bytes", "init_s_median", "create_s_median")
    return replace(rows[0], **{attr: median_over_repeats(attr) for attr in attrs})


def _pss(row: SummaryRow) -> int | None:
    """PSS where the OS has it; private bytes (USS) elsewhere."""
    return row.sum_pss_bytes if row.sum_pss_bytes is not None else row.sum_private_bytes


def evaluate(cpu: list[SummaryRow], native: list[SummaryRow], n: int) -> list[Criterion]:
    mapped, heap = _pick(cpu, "cpu", "mapped", n), _pick(cpu, "cpu", "heap", n)
    peer = _pick(native, "ort-native", "mapped", n)
    if mapped is None or heap is None or peer is None:
        raise InputError("benchmark incomplete: a group produced no summary (see the run folders)")
    weights = heap.weights_bytes or 0
    heap_pss, mapped_pss = _pss(heap), _pss(mapped)
    out = []
    if heap_pss is not None and mapped_pss is not None:
        overhead = heap_pss - n * weights
        limit = 1.25 * weights + overhead
        out.append(Criterion("mapped sum PSS <= 1.25 x weights + heap overhead", mapped_pss, limit,
                             mapped_pss <= limit, f"{fmt_bytes(mapped_pss)} vs limit {fmt_bytes(limit)} "
                             f"(weights {fmt_bytes(weights)}, heap overhead {fmt_bytes(overhead)})"))
        out.append(Criterion(f"heap sum PSS >= {n} x weights", heap_pss, n * weights, heap_pss >= n * weights,
                             f"{fmt_bytes(heap_pss)} vs {fmt_bytes(n * weights)}"))
    init_ratio = mapped.init_s_median / heap.init_s_median if heap.init_s_median else None
    out.append(Criterion("mapped median init <= 5% of heap's", init_ratio, 0.05,
                         init_ratio is not None and init_ratio <= 0.05,
                         f"{fmt_seconds(mapped.init_s_median)} vs {fmt_seconds(heap.init_s_median)} "
                         f"(ratio {fmt_ratio(init_ratio)})"))
    peer_ratio = mapped.init_s_median / peer.init_s_median if peer.init_s_median else None
    out.append(Criterion("mapped init within 2x of ort-native", peer_ratio, 2.0,
                         peer_ratio is not None and peer_ratio <= 2.0,
                         f"{fmt_seconds(mapped.init_s_median)} vs ort-native {fmt_seconds(peer.init_s_median)} "
                         f"(ratio {fmt_ratio(peer_ratio)})"))
    return out


def run_bench(*, model_size: int, processes: int, repeat: int, out: Path | None, cache_dir: Path | None,
              command: str) -> int:
    """Run both targets, print the criteria table, write bench.json; 1 if a criterion failed."""
    from rich.console import Console
    from rich.table import Table

    from harness.runner.progress import Progress
    from harness.runner.sweep import RunOptions, default_out_dir, execute

    if processes < 2:
        raise InputError("harness bench: --processes must be >= 2 (sharing needs two processes)")
    out = out or default_out_dir().with_name(default_out_dir().name.replace("run-", "bench-"))
    progress = Progress()
    common = dict(model_size=model_size, processes=[processes], repeat=repeat, cache_dir=cache_dir, command=command)
    cpu = execute(RunOptions(target="cpu", out=out / "cpu", **common), progress)
    native = execute(RunOptions(target="ort-native", modes=["mapped"], out=out / "ort-native", **common), progress)
    criteria = evaluate(cpu.summary, native.summary, processes)
    table = Table(title=f"benchmark: cpu target, {fmt_bytes(model_size)} model, {processes} processes")
    for column in ("criterion", "measured", "result"):
        table.add_column(column)
    for c in criteria:
        table.add_row(c.name, c.detail, "[green]pass[/]" if c.passed else "[bold red]FAIL[/]")
    from harness.console import summary_table

    console = Console(highlight=False)
    console.print(summary_table(cpu.summary + native.summary))
    console.print(table)
    write_json_atomic(out / "bench.json", {
        "format_version": FORMAT_VERSION, "model_size": model_size, "processes": processes, "repeat": repeat,
        "criteria": [asdict(c) for c in criteria],
        "runs": {"cpu": str(cpu.out), "ort-native": str(native.out)},
    })
    console.print(f"bench: {out / 'bench.json'}")
    return 1 if cpu.exit_code or native.exit_code or not all(c.passed for c in criteria) else 0
