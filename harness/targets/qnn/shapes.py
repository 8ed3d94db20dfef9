"""Static shapes inside a shape-fixed graph before the QNN compile (``infer_shapes(data_prop=True)``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def dynamic_value_infos(model: Any) -> int:
    """Internal tensors whose declared shape is missing a concrete dim."""
    return sum(
        1
        for vi in model.graph.value_info
        if vi.type.HasField("tensor_type") and any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)
    )


def with_static_shapes(model: Any) -> Any:
    """``model`` with its internal shapes inferred again from its inputs; as it was when inference fails."""
    import onnx
    from onnx import ModelProto

    fresh = ModelProto()
    fresh.CopyFrom(model)
    del fresh.graph.value_info[:]  # the exporter's stale symbolic dims would win otherwise
    try:
        return onnx.shape_inference.infer_shapes(fresh, data_prop=True)
    except Exception:  # onnx raises several types (InferenceError, ValidationError, RuntimeError)
        return model


def fold_if_still_dynamic(path: Path) -> Path:
    """The copy at ``path`` or, when shapes stay dynamic, ORT's basic-optimized copy (folds Shape -> Slice chains)."""
    import onnx

    from harness.prep.onnxfile import external_data_files, load_onnx
    from harness.prep.optimize import save_optimized

    graph = load_onnx(path, external_data=False)
    if dynamic_value_infos(graph) == 0:
        return path
    out = path.with_name(path.stem + ".folded.onnx")
    config = {}
    if external_data_files(path, graph):  # keep the weights out of the graph file (2 GiB limit)
        config["session.optimized_model_external_initializers_file_name"] = out.stem + ".data"
        config["session.optimized_model_external_initializers_min_size_in_bytes"] = "1024"
    try:  # in a child process: a long ORT call stays interruptible (harness.prep.ortjob)
        save_optimized(path, out, level="basic", config=config, label=str(path))
        folded = onnx.load(str(out), load_external_data=False)
    except Exception:  # InputError from ORT, onnx raises its own types: the compile reports the problem
        return path
    del folded.graph.value_info[:]
    onnx.save(_inferred(folded), str(out))
    return out


def _inferred(model: Any) -> Any:
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # as in with_static_shapes
        return model
