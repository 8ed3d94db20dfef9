"""The generate workload's table: TTFT, tokens/s and the KV cache per N and mode, and each worker's
memory split with its KV cache (docs/llm.md: weights shared or copied, KV cache, runtime)."""

from __future__ import annotations

from typing import Any

from harness.core.headline import per_n
from harness.core.metrics import FIGURES
from harness.core.rundata import RunData
from harness.core.schema import GENERATE_COLUMNS
from harness.core.units import fmt_bytes, fmt_value
from harness.core.vocab import Mode, Workload

#: The registry's figures of the generate loop (a worker column of the generate workload).
TOKEN_FIGURES = [f for f in FIGURES if isinstance(f.source, str) and f.source in GENERATE_COLUMNS]
#: Each worker's memory split: label (how it is computed).
SPLIT = ("weights shared (mapped pages)", "weights copied (private beyond the control)", "KV cache (summed / N)",
         "runtime (the control's private memory - its KV cache)")  # fmt: skip


def _split(figures: dict[str, Any], processes: int) -> list[int | None]:
    """One worker's (shared, copied, KV cache, runtime) bytes; None where a part was not measured."""
    kv = figures["sum_kv_cache_bytes"] // processes if figures["sum_kv_cache_bytes"] is not None else None
    runtime = figures["runtime_bytes"]
    rest = runtime - kv if runtime is not None and kv is not None else None
    return [figures["mapped_resident_bytes_median"], figures["copied_bytes_median"], kv, rest]


def generate_table(run: RunData) -> dict[str, Any] | None:
    """Per N x M and mode (complete pairs, medians over repeats): the token figures and the split."""
    if run.run.get("workload") != Workload.GENERATE:
        return None
    rows = []
    for entry in per_n(run.summary, run.target):
        for mode in Mode:
            figures = entry[mode]
            rows.append({
                "size": f"{entry['processes']} x {entry['sessions_per_process']}", "mode": str(mode),
                "tokens": [fmt_value(figures[f.column], f.unit) for f in TOKEN_FIGURES],
                "split": ["-" if v is None else fmt_bytes(v) for v in _split(figures, entry["processes"])],
            })  # fmt: skip
    return {"tokens": [f.label for f in TOKEN_FIGURES], "split": SPLIT, "rows": rows}
