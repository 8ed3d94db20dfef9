"""`harness bench`: the headline run (cpu mapped/heap, ort-native peer, repeated, timed) judged by ``bench.gates``."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from harness.contract.options import RunOptions
from harness.core.errors import InputError
from harness.core.files import write_json_atomic
from harness.core.gates import read_gates_text

BENCH_GATES = "bench.gates"
BENCH_FORMAT_VERSION = 1  #: bench.json's own format version (not the run folder's): keys only added within it.


def bench_gates() -> list[str]:
    """The benchmark's criteria, from the packaged ``bench.gates``."""
    return read_gates_text(resources.files("harness").joinpath(BENCH_GATES).read_text(encoding="utf-8"))


def bench_options(
    *,
    model_size: int,
    processes: list[int],
    repeat: int,
    out: Path | None,
    cache_dir: Path | None,
    command: str,
    replace: bool = False,
    intra_op_threads: int | None = None,
) -> RunOptions:
    """The benchmark's run: ``processes`` parsed as ``run``'s ``--processes``, one N of at least 2."""
    if len(processes) != 1:
        shown = ",".join(map(str, processes))
        raise InputError(f"harness bench: --processes takes one N, not {shown} (a sweep is `harness run`'s)")
    if processes[0] < 2:
        raise InputError("harness bench: --processes must be >= 2 (sharing needs two processes)")
    return RunOptions(
        target="cpu",
        peer="ort-native",
        model_size=model_size,
        processes=list(processes),
        repeat=repeat,
        out=out,
        replace=replace,
        out_prefix="bench",
        cache_dir=cache_dir,
        gates=bench_gates(),
        command=command,
        sequential_timing=True,
        intra_op_threads=intra_op_threads,
    )


#: The rows of the limits table: (label, target, mode, what it is); the floor comes first.
LIMIT_ROWS = (
    ("mapped", "cpu", "mapped", "mapper_impl maps the file, ORT's session over the mapping"),
    ("peer", "ort-native", "mapped", "ORT maps its own external data"),
    ("heap", "cpu", "heap", "direct read, the runtime's own copy"),
)


def limits(summary: list) -> list[dict]:
    """Start-up against its limits at the headline's N: median init of each pass and its multiple of the floor."""
    from harness.core.passes import memory_view, timing_view
    from harness.core.summary import median, sessions_of

    complete = [s for s in summary if s.complete is True]
    if not complete:
        return []
    size = max(sessions_of(s) for s in complete)
    timed = [s for s in timing_view(complete) if sessions_of(s) == size]
    together = [s for s in memory_view(complete) if sessions_of(s) == size]
    floor = median(s.floor_s_median for s in timed if s.target in ("cpu", "ort-native"))
    rows = [
        {
            "row": "floor",
            "what": "map the weights file read-only, touch nothing",
            "init_s": floor,
            "concurrent_init_s": None,
            "times_floor": 1.0 if floor else None,
        }
    ]
    for label, target, mode, what in LIMIT_ROWS:
        init = median(s.init_s_median for s in timed if (s.target, s.mode) == (target, mode))
        both = median(s.init_s_median for s in together if (s.target, s.mode) == (target, mode))
        rows.append(
            {
                "row": label,
                "what": what,
                "init_s": init,
                "concurrent_init_s": both,
                "times_floor": init / floor if init is not None and floor else None,
            }
        )
    return rows


def limits_lines(rows: list[dict], threads: int | None = None) -> list[str]:
    """The limits table for the terminal (``threads``: the sessions' intra-op threads, None: ORT's choice)."""
    from harness.core.units import fmt_seconds

    if not rows:
        return ["start-up against the limits: not measured (no complete group)"]
    pool = "ORT's intra-op threads" if threads is None else f"{threads} intra-op thread{'s' * (threads != 1)}"
    lines = [
        f"start-up against the limits (median init, sessions with {pool}; timing pass: one worker at a time; "
        "concurrent: all N starting together):",
        f"  {'':7} {'timing pass':>12} {'x floor':>9} {'concurrent':>12}  what",
    ]
    for r in rows:
        times = f"{r['times_floor']:.1f}x" if r["times_floor"] is not None else "-"
        together = fmt_seconds(r["concurrent_init_s"]) if r["concurrent_init_s"] is not None else "-"
        lines.append(f"  {r['row']:7} {fmt_seconds(r['init_s']):>12} {times:>9} {together:>12}  {r['what']}")
    return lines


def write_bench_json(out: Path, judgement) -> Path:
    """``bench.json``: each criterion with its measured value and result, format-versioned."""
    criteria = set(bench_gates())
    return write_json_atomic(
        out / "bench.json",
        {
            "format_version": BENCH_FORMAT_VERSION,
            "run": str(out),
            "verdict": judgement.verdict,
            "limits": limits(judgement.run.summary),
            "criteria": [
                {
                    "gate": g.gate.expr,
                    "status": g.status,
                    "value": g.value,
                    "interval": list(g.interval) if g.interval else None,
                    "repeats": g.repeats,
                    "repeats_to_decide": g.repeats_to_decide,
                    "reason": g.reason,
                }
                for g in judgement.gates
                if g.gate.expr in criteria
            ],
        },
    )
