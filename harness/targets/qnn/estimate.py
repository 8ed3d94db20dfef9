"""How long a qnn preparation will take on the simulated HTP, said before it starts (docs/models-and-cache.md)."""

from __future__ import annotations

import contextlib
import json
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

OPS_PER_STEP = {"LSTM": 12, "GRU": 10, "RNN": 3}  #: Ops a recurrent node becomes per step, unrolled by the HTP compile.
RECURRENT = ("LSTM", "GRU", "RNN")  #: Recurrent ops: MACs per step per direction are gates x H x (I + H).
KEEP_TIMINGS = 50  #: Recorded timings kept per machine (the last ones; older lines are dropped).
TIMINGS_FILE = "qnn-timings.jsonl"
LONG_S = 30.0  #: Below this (seconds on this machine) the preparation is not long: nothing is said.


@dataclass(frozen=True)
class Rates:
    """CPU seconds on the simulated HTP (see `GraphCost.compile_cpu_s` and `run_cpu_s`)."""

    compile_fixed_s: float
    per_op_s: float
    per_recurrent_s: float  # per (recurrent mega-MAC) ** 1.5
    run_fixed_s: float
    per_million_activations_s: float
    per_step_s: float
    per_gmac_s: float
    source: str


#: Least squares over 10 compiles of 6 real models here (QNN 2.51, soc_model 60, CPU time; docs/models-and-cache.md).
DEFAULT_RATES = Rates(0.97, 0.00041, 0.0163, 0.20, 0.287, 0.0233, 1.46, "rates measured on the project's machine")


@dataclass(frozen=True)
class GraphCost:
    """What the HTP compile and one inference on the simulator cost, from the graph."""

    ops: int  # ops the compile builds (recurrent ones unrolled over their steps)
    macs: int  # multiply-accumulates of one inference
    recurrent_macs: int  # of them, the recurrent ops'
    steps: int  # steps of the recurrent ops, summed (0: none)
    activations: int  # elements every op writes in one inference

    def compile_cpu_s(self, rates: Rates) -> float:
        recurrent = (self.recurrent_macs / 1e6) ** 1.5  # an LSTM of 16, 32, 64 steps: 4.0, 9.1, 27.1 s
        return rates.compile_fixed_s + rates.per_op_s * self.ops + rates.per_recurrent_s * recurrent

    def run_cpu_s(self, rates: Rates) -> float:
        return (
            rates.run_fixed_s
            + rates.per_million_activations_s * self.activations / 1e6
            + rates.per_step_s * self.steps
            + rates.per_gmac_s * self.macs / 1e9
        )


def _dims(value_info: Any) -> list[int] | None:
    shape = value_info.type.tensor_type.shape
    dims = [d.dim_value if d.HasField("dim_value") else 0 for d in shape.dim]
    return dims if dims and all(d > 0 for d in dims) else None


def graph_cost(model_path: Path) -> GraphCost:
    """`GraphCost` of a static-shape model (its shapes inferred again; no weight is read)."""
    import onnx

    from harness.prep.onnxfile import load_onnx

    graph = onnx.shape_inference.infer_shapes(load_onnx(model_path, external_data=False)).graph
    shapes = {vi.name: _dims(vi) for vi in [*graph.input, *graph.value_info, *graph.output]}
    shapes.update({t.name: list(t.dims) for t in graph.initializer})
    ops = macs = recurrent = steps = activations = 0
    for node in graph.node:
        if node.op_type == "Constant":
            continue
        outs = [shapes.get(n) for n in node.output]
        node_macs, node_steps = _node_macs(node, [shapes.get(n) for n in node.input], outs)
        macs += node_macs
        recurrent += node_macs if node_steps else 0
        steps += node_steps
        activations += sum(math.prod(o) for o in outs if o)
        ops += node_steps * OPS_PER_STEP.get(node.op_type, 1) if node_steps else 1
    return GraphCost(ops, macs, recurrent, steps, activations)


def _node_macs(node: Any, ins: list, outs: list) -> tuple[int, int]:
    """(multiply-accumulates, recurrent steps) of one node; 0 where a shape is unknown."""
    out = outs[0] if outs else None
    if node.op_type in ("Conv", "ConvTranspose") and out and len(ins) > 1 and ins[1]:
        w = ins[1]  # Conv: [Cout, Cin/g, k...]; ConvTranspose: [Cin, Cout/g, k...]
        per_output = math.prod(w[1:]) if node.op_type == "Conv" else math.prod(w[2:]) * w[0] // max(out[1], 1)
        return math.prod(out) * per_output, 0
    if node.op_type in ("MatMul", "Gemm") and out and ins and ins[0]:
        trans_a = any(a.name == "transA" and a.i for a in node.attribute)
        k = ins[0][0] if node.op_type == "Gemm" and trans_a else ins[0][-1]
        return math.prod(out) * k, 0
    if node.op_type in RECURRENT and ins and ins[0] and len(ins) > 2 and ins[2]:
        seq, batch, width = ins[0]  # [seq, batch, input] (layout 0, the exporters' default)
        dirs, rows, hidden = ins[2]  # R: [directions, gates x hidden, hidden]
        return seq * batch * rows * (width + hidden) * dirs, seq * dirs
    return 0, 0


def load_rates(cache_dir: Path) -> Rates:
    """`DEFAULT_RATES` scaled by this machine's recorded compiles (median ratio of 3+), else the defaults."""
    records = [_parsed(line) for line in _recorded(cache_dir)[-KEEP_TIMINGS:]]
    compile_ratios, run_ratios = [], []
    for r in records:
        cost = _cost_of(r)
        if cost is None:
            continue
        if isinstance(r.get("compile_cpu_s"), (int, float)) and r["compile_cpu_s"] > 0:
            compile_ratios.append(r["compile_cpu_s"] / cost.compile_cpu_s(DEFAULT_RATES))
        if isinstance(r.get("first_run_cpu_s"), (int, float)) and r["first_run_cpu_s"] > 0:
            run_ratios.append(r["first_run_cpu_s"] / cost.run_cpu_s(DEFAULT_RATES))
    if len(compile_ratios) < 3 or len(run_ratios) < 3:
        return DEFAULT_RATES
    c, f, d = statistics.median(compile_ratios), statistics.median(run_ratios), DEFAULT_RATES
    return Rates(
        *(v * c for v in (d.compile_fixed_s, d.per_op_s, d.per_recurrent_s)),
        *(v * f for v in (d.run_fixed_s, d.per_million_activations_s, d.per_step_s, d.per_gmac_s)),
        f"rates measured on this machine ({len(compile_ratios)} earlier compiles)",
    )


MAX_TIMINGS_BYTES = 1 << 20  #: The record is a few KiB; anything larger is not ours and is not read.


def _recorded(cache_dir: Path) -> list[str]:
    """The record's lines; [] when absent, not a regular file (no link followed) or too large."""
    import os
    import stat

    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(cache_dir / TIMINGS_FILE, flags)
    except OSError:
        return []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_TIMINGS_BYTES:
            return []
        data = os.read(fd, MAX_TIMINGS_BYTES)
    except OSError:
        return []
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace").splitlines()


def _parsed(line: str) -> Any:
    """One recorded line, None when it is damaged (a cut write, another program's text)."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def _cost_of(record: Any) -> GraphCost | None:
    """The `GraphCost` a recorded line holds (None: not one of ours)."""
    names = ("ops", "macs", "recurrent_macs", "steps", "activations")
    if not isinstance(record, dict) or not all(isinstance(record.get(k), int) for k in names):
        return None
    return GraphCost(*(int(record[k]) for k in names))


def record_timings(cache_dir: Path, cost: GraphCost, result: dict) -> None:
    """Append one compile's measured CPU times to the machine's record (never fails the run)."""
    from harness.core.errors import InputError
    from harness.core.files import write_text_atomic

    entry = {**asdict(cost), **{k: result[k] for k in ("compile_cpu_s", "first_run_cpu_s") if k in result}}
    lines = [*_recorded(cache_dir)[-(KEEP_TIMINGS - 1) :], json.dumps(entry)]
    with contextlib.suppress(OSError, InputError):  # a link or folder at the name is not ours to write
        cache_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cache_dir / TIMINGS_FILE, "\n".join(lines) + "\n", what="compile timings")


@dataclass
class CompilePlan:
    """What the notice needs: where timings are kept, each group's N, where to say it."""

    cache_dir: Path
    groups: list[int]
    say: Callable[[str], None]


def notice(cost: GraphCost, plan: CompilePlan, rates: Rates, label: str, load: float | None = None) -> str | None:
    """What will happen and roughly how long, with the quicker ways; None when not long."""
    import os

    compile_s, run_s = cost.compile_cpu_s(rates), cost.run_cpu_s(rates)
    cpus, load = os.cpu_count() or 1, _load() if load is None else load
    stretch = max(1.0, load / cpus)
    total = (compile_s + run_s + sum(run_s * math.ceil(n / cpus) for n in plan.groups)) * stretch
    if total < LONG_S:
        return None
    busy = (
        f"; this machine is busy (load {load:.1f} on {cpus} CPUs): about {stretch:.0f}x that" if stretch > 1.5 else ""
    )
    rnn = f" (recurrent ops unrolled over {cost.steps} steps)" if cost.steps else ""
    workers = sum(plan.groups)
    # --quantize qdq is not offered: no quicker on the simulator (measured: docs/models-and-cache.md).
    quicker = [f"--processes 1 (2 workers, not {workers})"] if workers > 2 else []
    quicker.append("a pre-compiled EPContext model (--model X_ctx.onnx: no compile)")
    return (
        f"{label}: the simulated HTP compiles {cost.ops} ops{rnn} and runs {cost.macs / 1e9:.2f} GMAC per "
        f"inference: expect about {_rough(compile_s)} to compile and {_rough(run_s)} per inference (CPU time, "
        f"{rates.source}{busy}); the compile's check runs 1 inference and each of the {workers} workers 1: about "
        f"{_rough(total)} in all. To wait less: {', '.join(quicker)}"
    )


def _rough(seconds: float) -> str:
    """An estimate's precision: whole seconds below 2 min, then minutes to a half."""
    if seconds < 120:
        return f"{max(1, round(seconds))} s"
    return f"{round(seconds / 30) / 2:g} min"


def _load() -> float:
    import os

    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):  # Windows has no load average
        return 0.0
