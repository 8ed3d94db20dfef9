"""`harness bench`: the headline benchmark is a run plus a gates file.

The run: the cpu target (mapped and heap) with the ort-native target as its peer (mapped), at
the same N and model size, repeated (8 times by default: memory criteria use the medians, timing
criteria the 95 % interval over the repeats, because one ms-scale init time on a 2-core machine
is noise). The criteria the project promises are gate expressions in ``bench.gates``,
judged like any run's gates, so the terminal, report.html and ``bench.json`` agree.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from harness.core.errors import InputError
from harness.core.files import write_json_atomic
from harness.core.gates import read_gates_text
from harness.core.schema import FORMAT_VERSION
from harness.runner.options import RunOptions

BENCH_GATES = "bench.gates"


def bench_gates() -> list[str]:
    """The benchmark's criteria, from the packaged ``bench.gates``."""
    return read_gates_text(resources.files("harness").joinpath(BENCH_GATES).read_text(encoding="utf-8"))


def bench_options(
    *,
    model_size: int,
    processes: int,
    repeat: int,
    out: Path | None,
    cache_dir: Path | None,
    command: str,
    replace: bool = False,
) -> RunOptions:
    if processes < 2:
        raise InputError("harness bench: --processes must be >= 2 (sharing needs two processes)")
    return RunOptions(
        target="cpu",
        peer="ort-native",
        model_size=model_size,
        processes=[processes],
        repeat=repeat,
        out=out,
        replace=replace,
        out_prefix="bench",
        cache_dir=cache_dir,
        gates=bench_gates(),
        command=command,
    )


def write_bench_json(out: Path, judgement) -> Path:
    """``bench.json``: each criterion with its measured value and result, format-versioned."""
    criteria = set(bench_gates())
    return write_json_atomic(
        out / "bench.json",
        {
            "format_version": FORMAT_VERSION,
            "run": str(out),
            "verdict": judgement.verdict,
            "criteria": [
                {
                    "gate": g.gate.expr,
                    "status": g.status,
                    "value": g.value,
                    "interval": list(g.interval) if g.interval else None,
                    "repeats": g.repeats,
                    "reason": g.reason,
                }
                for g in judgement.gates
                if g.gate.expr in criteria
            ],
        },
    )
