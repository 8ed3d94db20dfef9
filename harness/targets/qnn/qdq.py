"""The qnn target's generated model: a static-shape uint8 QDQ MatMul chain, its input and CPU reference."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy


def make_qdq_model(path: Path, weights_bytes: int, *, seed: int = 0) -> dict:
    """Write a uint8 QDQ MatMul chain of about `weights_bytes` weights (L <= 16 layers; external past 1 GiB)."""
    import numpy as np
    from onnx import helper, numpy_helper

    if weights_bytes < 4096:
        raise ValueError(f"weights_bytes must be >= 4096, got {weights_bytes}")
    dim = max(64, 2 ** math.ceil(math.log2(math.sqrt(weights_bytes / 16))))
    layers = max(1, round(weights_bytes / (dim * dim)))
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (1, dim)).astype(np.float32)  # calibration input
    w_scale = np.float32(math.sqrt(3.0 / dim) / 128.0)  # keeps activation variance ~constant
    inits = [
        numpy_helper.from_array(np.array(1.0 / 127.0, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "zp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["X", "x_scale", "zp"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "zp"], ["a0"]),
    ]
    act, prev, a_scale = x, "a0", 0.0
    for i in range(layers):
        w = rng.integers(0, 256, (dim, dim), dtype=np.uint8)
        acc = np.zeros((1, dim), np.float32)
        for r in range(0, dim, 1024):  # chunked so a big layer never needs a float32 copy
            acc += act[:, r : r + 1024] @ (w[r : r + 1024].astype(np.float32) - 128.0)
        act = acc * w_scale
        a_scale = float(np.abs(act).max() * 1.25 / 127.0) or 1e-3
        out = "Y" if i == layers - 1 else f"a{i + 1}"
        inits += [
            numpy_helper.from_array(w, f"w{i}"),
            numpy_helper.from_array(np.array(w_scale, np.float32), f"w{i}_scale"),
            numpy_helper.from_array(np.array(a_scale, np.float32), f"a{i}_scale"),
        ]
        nodes += [
            helper.make_node("DequantizeLinear", [f"w{i}", f"w{i}_scale", "zp"], [f"wq{i}"]),
            helper.make_node("MatMul", [prev, f"wq{i}"], [f"mm{i}"]),
            helper.make_node("QuantizeLinear", [f"mm{i}", f"a{i}_scale", "zp"], [f"mm{i}_q"]),
            helper.make_node("DequantizeLinear", [f"mm{i}_q", f"a{i}_scale", "zp"], [out]),
        ]
        prev = out
    external = _save_chain(Path(path), nodes, inits, dim, external=layers * dim * dim > 2**30)
    return {
        "input_name": "X",
        "input_shape": [1, dim],
        "output_name": "Y",
        "weights_bytes": layers * dim * dim,
        "layers": layers,
        "dim": dim,
        "output_scale": a_scale,
        "external_data": external,
    }


def _save_chain(path: Path, nodes: list, inits: list, dim: int, *, external: bool) -> bool:
    """The chain as an opset-21 model, weights in ``<name>.data`` when ``external``; returns ``external``."""
    import onnx
    from onnx import TensorProto, helper

    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, dim]) for n in ("X", "Y")]
    graph = helper.make_graph(nodes, "qdq_matmul_chain", io[:1], io[1:], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=external,
        all_tensors_to_one_file=True,
        location=path.name + ".data",
        size_threshold=4096,
    )
    return external


def make_feeds(info: dict, *, seed: int = 1) -> dict:
    """A random input in [-1, 1] for a model from `make_qdq_model` (its calibrated range)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return {info["input_name"]: rng.uniform(-1.0, 1.0, info["input_shape"]).astype(np.float32)}


def reference_output(model_path: Path, feeds: dict) -> numpy.ndarray:
    """First output of the ORIGINAL (un-compiled) model on the CPU EP: the correctness reference."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]
