"""The generated model: an fp32 MatMul chain of about the asked weights size, cached by its
parameters (width, layers, seed, session settings)."""

from __future__ import annotations

from pathlib import Path

from harness.cache import default_cache_dir

from .cachekeys import settings_tag
from .externalise import external_tensor_proto, write_aligned
from .folder import PreparedModel, TensorEntry, cached_model
from .reference import write_reference
from .sessions import SessionSettings


def matmul_chain_dims(weights_bytes: int) -> tuple[int, int]:
    """(width D, layers L) of an fp32 MatMul chain holding ``weights_bytes``: exactly, with
    the widest D that divides it into at least 4 layers (600MiB: 150 layers of 1024 x 1024),
    else about (whole layers; the run's notes then say what was built)."""
    widths = (2048, 1024, 512, 256, 128)
    for width in widths:
        layers, left = divmod(weights_bytes, width * width * 4)
        if layers >= 4 and not left:
            return width, layers
    for width in widths:
        layers = round(weights_bytes / (width * width * 4))
        if layers >= 4:
            return width, layers
    return 128, max(1, round(weights_bytes / (128 * 128 * 4)))


def size_note(asked: int, built: int, source: str = "") -> str | None:
    """What the run's notes say when the generated model cannot hold exactly ``asked`` bytes."""
    if built == asked:
        return None
    from harness.core.units import fmt_bytes

    if "llama" in source:
        return f"--model-size {fmt_bytes(asked)}: the generated decoder ({source}) holds {fmt_bytes(built)}"
    width, layers = matmul_chain_dims(asked)
    return (
        f"--model-size {fmt_bytes(asked)} ({asked} bytes) is not a whole number of {width} x {width} fp32 "
        f"layers: the generated model holds {layers} of them, {fmt_bytes(built)} ({built} bytes)"
    )


def generated_matmul_chain(
    weights_bytes: int,
    *,
    seed: int = 0,
    cache_dir: Path | None = None,
    settings: SessionSettings | None = None,
    on_bytes=None,
) -> PreparedModel:
    """An fp32 chain y = x W1 W2 ... WL with random weights scaled by 1/sqrt(D), so values
    stay O(1) through the chain and the reference check is meaningful. ``on_bytes(done,
    total)`` hears how much of the weights file is written (progress display)."""
    width, layers = matmul_chain_dims(weights_bytes)
    return generated_chain(width, layers, seed=seed, cache_dir=cache_dir, settings=settings, on_bytes=on_bytes)


def generated_chain(
    width: int,
    layers: int,
    *,
    seed: int = 0,
    cache_dir: Path | None = None,
    settings: SessionSettings | None = None,
    on_bytes=None,
) -> PreparedModel:
    """The chain of `generated_matmul_chain` with explicit dimensions (deep-chain tests)."""
    settings = settings or SessionSettings()
    tag = settings_tag(settings)
    folder = (cache_dir or default_cache_dir()) / f"matmul-chain-d{width}-l{layers}-s{seed}{tag}"

    def build(tmp: Path) -> PreparedModel:
        from onnx import TensorProto

        tensors = _write_chain(tmp, width, layers, seed, on_bytes)
        prepared = PreparedModel(
            tmp,
            f"generated:matmul-chain:{layers}x{width}x{width}xfp32",
            tensors,
            {"x": [1, width]},
            {"x": TensorProto.FLOAT},
            ["y"],
            layers * width * width * 4,
            output_types={"y": TensorProto.FLOAT},
        )
        from harness.prep.inputs import InputInfo, generate_feeds

        feeds = generate_feeds([InputInfo("x", "tensor", TensorProto.FLOAT, [1, width])], prepared.inputs, {})
        write_reference(prepared, prepared.onnx_path, feeds, settings)
        return prepared

    return cached_model(folder, build)


def _write_chain(tmp: Path, width: int, layers: int, seed: int, on_bytes) -> list[TensorEntry]:
    """``weights.bin`` (each layer's fp32 weights, aligned) and ``model.onnx`` pointing into it;
    returns the tensor table of the weights file."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    scale = np.float32(1.0 / np.sqrt(width))
    tensors, protos, nodes = [], [], []
    with open(tmp / "weights.bin", "wb") as f:
        for i in range(layers):
            w = rng.standard_normal((width, width), dtype=np.float32)
            w *= scale
            offset = write_aligned(f, w.data)
            tensors.append(TensorEntry(f"W{i}", "float32", [width, width], offset, w.nbytes, TensorProto.FLOAT))
            protos.append(external_tensor_proto(f"W{i}", TensorProto.FLOAT, [width, width], offset, w.nbytes))
            nodes.append(
                helper.make_node(
                    "MatMul", ["x" if i == 0 else f"h{i - 1}", f"W{i}"], ["y" if i == layers - 1 else f"h{i}"]
                )
            )
            if on_bytes is not None:
                on_bytes((i + 1) * w.nbytes, layers * w.nbytes)
    graph = helper.make_graph(
        nodes,
        "matmul_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        protos,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(tmp / "model.onnx"))
    return tensors
