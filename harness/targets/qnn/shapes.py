"""Static shapes inside a shape-fixed graph, before the QNN compile.

Fixing a model's input shapes leaves its internal ``value_info`` as the exporter wrote it:
tf2onnx, jax and Paddle exports keep symbolic or unknown dims there, and the QNN compiler then
refuses the graph although every shape follows from the inputs. ONNX's shape inference with
data propagation (``infer_shapes(data_prop=True)``, what ORT's QNN documentation suggests
alongside ``symbolic_shape_infer``) recomputes them from the fixed inputs, Shape/Gather/Concat
chains included (94 of 94 internal shapes static on one such model in issue 22).
"""

from __future__ import annotations

from typing import Any


def dynamic_value_infos(model: Any) -> int:
    """Internal tensors whose declared shape is missing a concrete dim."""
    return sum(
        1
        for vi in model.graph.value_info
        if vi.type.HasField("tensor_type") and any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)
    )


def with_static_shapes(model: Any) -> Any:
    """``model`` with its internal shapes inferred again from its (fixed) inputs; the model as
    it was when ONNX's inference cannot run on it (the compile then reports what it refuses)."""
    import onnx
    from onnx import ModelProto

    fresh = ModelProto()
    fresh.CopyFrom(model)
    del fresh.graph.value_info[:]  # the exporter's stale symbolic dims would win otherwise
    try:
        return onnx.shape_inference.infer_shapes(fresh, data_prop=True)
    except Exception:  # onnx raises several types (InferenceError, ValidationError, RuntimeError)
        return model
