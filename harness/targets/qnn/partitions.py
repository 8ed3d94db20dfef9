"""Multi-partition EPContext models: ORT rewrites the CPU nodes between partitions and 2.7.0 refuses them,
so they load with ``ORT_DISABLE_ALL`` (`make_shape_between_model` reproduces it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.prep.epcontext import epcontext_nodes

#: What a default-optimized load of a multi-partition EPContext model gives on 2.7.0.
UPSTREAM_ERRORS = ("The count of graph inputs should be at least the count of tensor_wrapper", "Tensor name not found")
MULTI_PARTITION_LEVEL = "disabled"  #: The optimization level multi-partition models load with.


def partition_count(model: Any) -> int:
    """EPContext nodes of a loaded ONNX model (0 for a plain model)."""
    return len(epcontext_nodes(model))


def partitions_of(onnx_path: Path) -> int:
    """EPContext nodes of the model at ``onnx_path`` (its graph only, no external data)."""
    from harness.prep.onnxfile import load_onnx

    return partition_count(load_onnx(Path(onnx_path), external_data=False))


def load_level(partitions: int) -> str | None:
    """The optimization level for a model of ``partitions`` EPContext nodes, or None for ORT's default."""
    return MULTI_PARTITION_LEVEL if partitions > 1 else None


def apply_load_level(so: Any, partitions: int) -> Any:
    """Put `load_level` on the SessionOptions ``so``; returns it."""
    level = load_level(partitions)
    if level is not None:
        from harness.prep.sessions import ort_level

        so.graph_optimization_level = ort_level(level)
    return so


def load_note(partitions: int) -> str:
    """The target note that says what the workaround changes."""
    return (
        f"compiled into {partitions} QNN partitions: loaded with ORT's graph optimizations disabled, "
        "because ORT's ConstantFolding/CommonSubexpressionElimination rewrite the CPU nodes between "
        "the EPContext nodes and onnxruntime-qnn then refuses the partition ('The count of graph inputs "
        "should be at least the count of tensor_wrapper!'); the context binaries are untouched"
    )


def make_shape_between_model(path: Path) -> Path:
    """The minimal reproducer: QDQ Conv -> Y and Shape(Y) - 1 (int64), the Shape between two partitions."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        numpy_helper.from_array(np.array(128, np.uint8), "zp"),
        numpy_helper.from_array(rng.integers(0, 256, (4, 4, 3, 3), dtype=np.uint8), "w"),
        numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
        numpy_helper.from_array(np.ones(4, np.int64), "ones"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["X", "s", "zp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["x"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "zp"], ["wd"]),
        helper.make_node("Conv", ["x", "wd"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "s", "zp"], ["cq"]),
        helper.make_node("DequantizeLinear", ["cq", "s", "zp"], ["Y"]),
        helper.make_node("Shape", ["Y"], ["shape"]),
        helper.make_node("Sub", ["shape", "ones"], ["S"]),
    ]
    graph = helper.make_graph(
        nodes,
        "shape_between_partitions",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4, 8, 8])],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4, 8, 8]),
            helper.make_tensor_value_info("S", TensorProto.INT64, [4]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path
