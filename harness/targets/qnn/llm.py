"""The generate workload on the qnn target: a decoder as the two static graphs the NPU needs, a
prefill of P tokens and a decode of one, over a fixed KV cache of C - 1 tokens (C = P + G), and the
host loop that runs them (`prepare.prepare_generate` compiles them into one weight-sharing binary).

The cache is left-padded: the graphs' past is always full size, the attention mask hides the
empty slots, and each step's present (past + 1 token) drops its oldest slot to become the next
past, so an optimum-layout decoder that concatenates its cache runs unchanged, with real positions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PAST_PREFIX, PRESENT_PREFIX = "past_key_values.", "present."


def _fix(dims: Any, values: list[int | None]) -> None:
    """Set a tensor's dims to ``values`` (None: keep that dim as it is)."""
    for dim, value in zip(dims, values, strict=False):
        if value is not None:
            dim.Clear()
            dim.dim_value = value


def static_graph(src: Path, out: Path, *, tokens: int, past: int) -> Path:
    """``src`` with batch 1, ``tokens`` new tokens and a past of ``past`` slots, its shape
    arithmetic folded by ORT once (QNN takes no Shape/Range: they would split the graph), with
    its weights in ``<out stem>.data``."""
    from harness.prep.onnxfile import load_onnx

    from .shapes import with_static_shapes

    model = load_onnx(src)  # with its weights: the copy is saved in our folder, never beside the user's
    total = past + tokens
    for value in list(model.graph.input) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if value.name.startswith((PAST_PREFIX, PRESENT_PREFIX)):
            _fix(dims, [1, None, past if value.name.startswith(PAST_PREFIX) else total, None])
        elif value.name == "attention_mask":
            _fix(dims, [1, total])
        else:  # input_ids, position_ids, logits
            _fix(dims, [1, tokens])
    import onnx

    from harness.prep.optimize import save_optimized

    fixed = out.with_suffix(".fixed.onnx")
    onnx.save(with_static_shapes(model), str(fixed), save_as_external_data=True, location=fixed.name + ".data")
    config = {
        "session.optimized_model_external_initializers_file_name": out.stem + ".data",
        "session.optimized_model_external_initializers_min_size_in_bytes": "64",
    }
    save_optimized(fixed.resolve(), out, level="basic", config=config, label=str(src))
    for scratch in (fixed, fixed.with_name(fixed.name + ".data")):
        scratch.unlink()
    return out


def static_generate(prefill: Any, decode: Any, prompt: list[int], new_tokens: int, after_prefill: Any = None) -> Any:
    """Greedy ``new_tokens`` after ``prompt`` through two static sessions over a left-padded cache
    (decode past: context - 1 slots, prefill past: context - P); ``after_prefill()`` untimed."""
    import time

    import numpy as np

    from harness.prep.decoder import Generation

    names = {i.name: i for i in prefill.get_inputs()}
    kinds = {n: np.float16 if i.type == "tensor(float16)" else np.float32 for n, i in names.items()}
    out = Generation(kv={n: np.zeros(i.shape, kinds[n]) for n, i in names.items() if n.startswith(PAST_PREFIX)})
    context = 1 + next(i.shape[2] for i in decode.get_inputs() if i.name.startswith(PAST_PREFIX))
    outputs = [o.name for o in prefill.get_outputs()]
    session, step, position = prefill, list(prompt), 0
    for _ in range(new_tokens):
        t0 = time.perf_counter()
        mask = np.zeros((1, context), np.int64)
        mask[0, context - position - len(step) :] = 1
        feeds = {"input_ids": np.array([step], np.int64), "attention_mask": mask, **out.kv}
        if "position_ids" in names:
            feeds["position_ids"] = np.arange(position, position + len(step), dtype=np.int64)[None, :]
        result = dict(zip(outputs, session.run(outputs, feeds), strict=True))
        out.ids.append(int(np.argmax(result["logits"][0, -1])))
        elapsed = time.perf_counter() - t0
        if len(out.ids) > 1:
            out.step_s.append(elapsed)
        else:
            out.ttft_s = elapsed
            if after_prefill is not None:
                after_prefill()
        out.kv = {n: result[PRESENT_PREFIX + n[len(PAST_PREFIX) :]][:, :, 1:] for n in out.kv}
        position, step, session = position + len(step), out.ids[-1:], decode
    return out
