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

from harness.contract.options import RunOptions
from harness.core.errors import InputError
from harness.core.files import write_json_atomic
from harness.core.gates import read_gates_text
from harness.core.schema import FORMAT_VERSION

BENCH_GATES = "bench.gates"


def bench_gates() -> list[str]:
    """The benchmark's criteria, from the packaged ``bench.gates``."""
    return read_gates_text(resources.files("harness").joinpath(BENCH_GATES).read_text(encoding="utf-8"))


def bench_options(
    *, model_size: int, processes: list[int], repeat: int, out: Path | None, cache_dir: Path | None, command: str
) -> RunOptions:
    """The benchmark's run: ``processes`` is parsed as ``run``'s ``--processes`` (one declaration),
    and the benchmark measures one N of at least 2."""
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
