"""Models no package ships, generated for the tests (in pytest tmp dirs): weights of every element
type ORT's CPU EP computes with, string inputs, several dynamic inputs, Constant-node weights.

Each builder writes one model and returns its path. Weights are random but seeded; every model
has at least one tensor of 1 KiB or more of the type it is about, consumed by an op that uses
it as it is (so ORT's offline optimization keeps it in that type).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OPSET = 21


def _save(graph, path: Path, opset: int = OPSET, ir_version: int = 10, extra_opsets=()) -> Path:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    model.ir_version = ir_version
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def fp16_model(path: Path) -> Path:
    """An fp16 embedding table (Gather) and an fp16 MatMul weight: ids + x -> fp16 outputs."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(16)
    table = numpy_helper.from_array((rng.standard_normal((256, 32)) * 0.5).astype(np.float16), "table")
    w = numpy_helper.from_array((rng.standard_normal((32, 64)) / 8).astype(np.float16), "w")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"]),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "fp16", [helper.make_tensor_value_info("ids", T.INT64, [1, 8]),
                                              helper.make_tensor_value_info("x", T.FLOAT16, [1, 32])],
                              [helper.make_tensor_value_info("emb", T.FLOAT16, [1, 8, 32]),
                               helper.make_tensor_value_info("y", T.FLOAT16, [1, 64])], [table, w])
    return _save(graph, path)


def bf16_model(path: Path) -> Path:
    """A bfloat16 embedding table (Gather keeps it bf16), output cast to float and bf16."""
    from onnx import TensorProto as T
    from onnx import helper

    rng = np.random.default_rng(17)
    import ml_dtypes

    values = (rng.standard_normal((128, 16)) * 0.5).astype(ml_dtypes.bfloat16)
    table = helper.make_tensor("table", T.BFLOAT16, [128, 16], values.view(np.uint16).tobytes(), raw=True)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"]),
             helper.make_node("Cast", ["emb"], ["emb32"], to=T.FLOAT)]
    graph = helper.make_graph(nodes, "bf16", [helper.make_tensor_value_info("ids", T.INT64, [2, 4])],
                              [helper.make_tensor_value_info("emb", T.BFLOAT16, [2, 4, 16]),
                               helper.make_tensor_value_info("emb32", T.FLOAT, [2, 4, 16])], [table])
    return _save(graph, path)


def int8_qdq_model(path: Path) -> Path:
    """A static int8 QDQ MatMul (activations and weights quantized, as a QDQ export has them)."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(8)
    w = numpy_helper.from_array(rng.integers(-127, 128, (64, 64)).astype(np.int8), "w_q")
    inits = [w, numpy_helper.from_array(np.array(0.02, np.float32), "x_scale"),
             numpy_helper.from_array(np.array(0, np.int8), "x_zp"),
             numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
             numpy_helper.from_array(np.array(0, np.int8), "w_zp"),
             numpy_helper.from_array(np.array(0.05, np.float32), "y_scale"),
             numpy_helper.from_array(np.array(0, np.int8), "y_zp")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["wd"]),
             helper.make_node("MatMul", ["xd", "wd"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "y_scale", "y_zp"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zp"], ["y"])]
    graph = helper.make_graph(nodes, "int8_qdq", [helper.make_tensor_value_info("x", T.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [4, 64])], inits)
    return _save(graph, path)


def int4_model(path: Path) -> Path:
    """Packed int4 and uint4 weights, dequantized per tensor, then MatMul."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(4)
    w4 = helper.make_tensor("w4", T.INT4, [64, 64], rng.integers(-8, 8, 64 * 64).tolist())
    u4 = helper.make_tensor("u4", T.UINT4, [64, 32], rng.integers(0, 16, 64 * 32).tolist())
    inits = [w4, u4, numpy_helper.from_array(np.array(0.05, np.float32), "s")]
    nodes = [helper.make_node("DequantizeLinear", ["w4", "s"], ["wd"]),
             helper.make_node("DequantizeLinear", ["u4", "s"], ["ud"]),
             helper.make_node("MatMul", ["x", "wd"], ["h"]),
             helper.make_node("MatMul", ["h", "ud"], ["y"])]
    graph = helper.make_graph(nodes, "int4", [helper.make_tensor_value_info("x", T.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [2, 32])], inits)
    return _save(graph, path)
