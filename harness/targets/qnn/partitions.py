"""Multi-partition EPContext models: why onnxruntime-qnn 2.7.0 could not load them, and the load
setting that makes them load.

Root cause (reproduced by `make_shape_between_model`, ``python -m harness.targets.qnn.partitions_repro``):
a model the HTP does not take whole compiles into several EPContext nodes with CPU nodes between
them, typically ``Shape`` (the QNN EP takes no Shape op) feeding an int64 partition. The compile
cannot fold that Shape (its input comes out of a partition), so the context binary's graph has
the Shape's output as a runtime input. When the compiled model is LOADED, every tensor between
the EPContext nodes has the static shape written on the node, and ORT's graph optimizers rewrite
the CPU remainder: ``ConstantFolding`` turns the Shape into an initializer and
``CommonSubexpressionElimination`` merges two Shape nodes of one tensor. The QNN EP then builds
the graph's inputs from the EPContext node's non-initializer, distinct inputs, finds fewer than
the context binary's graph declares, and refuses the node: "The count of graph inputs should be
at least the count of tensor_wrapper!" (open_nsfw), or the process aborts with "Tensor name not
found" (the reproducer). Nothing in the harness's compile options, ``ep.context_embed_mode``
(both 0 and 1 fail the same way), node names or paths is involved; microsoft/onnxruntime#24751
fixed a different mismatch (ops whose extra inputs QNN ignores).

The faithful workaround: load an EPContext model of more than one EPContext node with ORT's
graph optimizations disabled (``ORT_DISABLE_ALL``). The compile already optimized the graph before
partitioning; what is left on the CPU then runs exactly as the compile wrote it, and the context
binaries (what file mapping is about) are untouched. `UPSTREAM_STILL_BREAKS` is checked by a
test that fails once a release loads the reproducer with default optimizations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.prep.epcontext import epcontext_nodes

#: What a default-optimized load of a multi-partition EPContext model gives on 2.7.0.
UPSTREAM_ERRORS = ("The count of graph inputs should be at least the count of tensor_wrapper", "Tensor name not found")
#: The graph optimization level (harness.prep.sessions.LEVELS) multi-partition models load with.
MULTI_PARTITION_LEVEL = "disabled"


def partition_count(model: Any) -> int:
    """EPContext nodes of a loaded ONNX model (0 for a plain model)."""
    return len(epcontext_nodes(model))


def partitions_of(onnx_path: Path) -> int:
    """EPContext nodes of the model at ``onnx_path`` (its graph only, no external data)."""
    from harness.prep.onnxfile import load_onnx

    return partition_count(load_onnx(Path(onnx_path), external_data=False))


def load_level(partitions: int) -> str | None:
    """The graph optimization level a compiled model of ``partitions`` EPContext nodes must be
    loaded with, or None for ORT's default (one partition: nothing to rewrite between them)."""
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
    """The minimal reproducer: X[1,4,8,8] -> QDQ Conv -> Y, and S = Shape(Y) - 1 (int64). The
    QNN EP takes the Conv (partition 1) and the int64 Sub (partition 2), not the Shape between."""
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
