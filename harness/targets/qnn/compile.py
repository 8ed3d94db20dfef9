"""The qnn target's models: a generated QDQ uint8 chain (or the user's model), compiled once
by the real QNN EP to an EPContext model (``*_ctx.onnx`` + ``*_qnn.bin``) and cached by content.

The source model's folder also holds ``reference.npz``: the un-compiled model's output on ORT's
CPU EP for a fixed input, which every worker compares with the QNN EP's output.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cache import CorruptEntry, cached_build, default_cache_dir
from harness.core.errors import InputError
from harness.core.files import write_json_atomic
from harness.models import (
    PreparedModel,
    cached_model,
    dynamic_inputs,
    external_data_files,
    first_line,
    load_onnx,
    prepare_user_model,
    save_reference,
    shape_hint,
)

from .ep import QnnUnavailableError, qnn_platform_supported, qnn_versions, register_qnn_ep

if TYPE_CHECKING:
    import numpy

_COMPILE_NOTHING = "Unable to compile any nodes"


@dataclass
class CompiledModel:
    """An EPContext model produced by `compile_epcontext` (paths are in out_dir)."""

    onnx_path: Path
    bin_paths: list[Path]
    context_bytes: int  # size of the .bin files, or of the context embedded in the onnx
    embed_mode: int
    source_sha256: str = ""
    compile_s: float = 0.0  # wall time of the compilation that produced it
    cached: bool = False  # True when this call reused an earlier compilation
    cpu_ops: list[str] = field(default_factory=list)  # nodes left outside QNN (e.g. boundary Q/DQ)


def make_qdq_model(path: Path, weights_bytes: int, *, seed: int = 0) -> dict:
    """Write a static-shape uint8 QDQ MatMul chain of about `weights_bytes` weights.

    Shape: X[1,D] -> Q/DQ -> L x (MatMul with DQ(uint8 W[D,D]) -> Q/DQ) -> Y[1,D]. D is a power of
    two chosen so L <= 16 (fewer requantizations, smaller error against the CPU reference).
    Activation scales are calibrated in numpy so values use most of the uint8 range without
    clipping. Weights are embedded up to 1 GiB (protobuf limit 2 GiB), external beyond.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if weights_bytes < 4096:
        raise ValueError(f"weights_bytes must be >= 4096, got {weights_bytes}")
    dim = max(64, 2 ** math.ceil(math.log2(math.sqrt(weights_bytes / 16))))
    layers = max(1, round(weights_bytes / (dim * dim)))
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (1, dim)).astype(np.float32)  # calibration input
    w_scale = np.float32(math.sqrt(3.0 / dim) / 128.0)  # keeps activation variance ~constant
    inits = [numpy_helper.from_array(np.array(1.0 / 127.0, np.float32), "x_scale"),
             numpy_helper.from_array(np.array(128, np.uint8), "zp")]
    nodes = [helper.make_node("QuantizeLinear", ["X", "x_scale", "zp"], ["x_q"]),
             helper.make_node("DequantizeLinear", ["x_q", "x_scale", "zp"], ["a0"])]
    act, prev, a_scale = x, "a0", 0.0
    for i in range(layers):
        w = rng.integers(0, 256, (dim, dim), dtype=np.uint8)
        acc = np.zeros((1, dim), np.float32)
        for r in range(0, dim, 1024):  # chunked so a big layer never needs a float32 copy
            acc += act[:, r:r + 1024] @ (w[r:r + 1024].astype(np.float32) - 128.0)
        act = acc * w_scale
        a_scale = float(np.abs(act).max() * 1.25 / 127.0) or 1e-3
        out = "Y" if i == layers - 1 else f"a{i + 1}"
        inits += [numpy_helper.from_array(w, f"w{i}"),
                  numpy_helper.from_array(np.array(w_scale, np.float32), f"w{i}_scale"),
                  numpy_helper.from_array(np.array(a_scale, np.float32), f"a{i}_scale")]
        nodes += [helper.make_node("DequantizeLinear", [f"w{i}", f"w{i}_scale", "zp"], [f"wq{i}"]),
                  helper.make_node("MatMul", [prev, f"wq{i}"], [f"mm{i}"]),
                  helper.make_node("QuantizeLinear", [f"mm{i}", f"a{i}_scale", "zp"], [f"mm{i}_q"]),
                  helper.make_node("DequantizeLinear", [f"mm{i}_q", f"a{i}_scale", "zp"], [out])]
        prev = out
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, dim]) for n in ("X", "Y")]
    graph = helper.make_graph(nodes, "qdq_matmul_chain", io[:1], io[1:], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    external = layers * dim * dim > 2**30
    onnx.save_model(model, str(path), save_as_external_data=external, all_tensors_to_one_file=True,
                    location=path.name + ".data", size_threshold=4096)
    return {"input_name": "X", "input_shape": [1, dim], "output_name": "Y",
            "weights_bytes": layers * dim * dim, "layers": layers, "dim": dim,
            "output_scale": a_scale, "external_data": external}


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


def _source_sha256(src: Path, model: Any) -> str:
    """Hash of the .onnx file and every external-data file it names (the compile's real input)."""
    h = hashlib.sha256()
    for f in [src, *external_data_files(src, model)]:
        h.update(f.name.encode() + b"\0")
        try:
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 22), b""):
                    h.update(block)
        except OSError as e:
            raise InputError(f"{src}: cannot read {f.name}: {e.strerror}") from None
    return h.hexdigest()


def _compile(src: Path, out_onnx: Path, embed_mode: int, backend_type: str, label: str) -> float:
    """Run ORT's compile API with the QNN device; returns seconds spent. Every failure is one
    InputError naming the user's model (``label``) and the EP's reason."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3  # compile-time warnings (e.g. the gate) are not what we classify
    so.add_provider_for_devices(register_qnn_ep(), {"backend_type": backend_type})
    t0 = time.perf_counter()
    try:
        ort.ModelCompiler(so, str(src), bool(embed_mode),
                          flags=ort.OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED
                          ).compile_to_file(str(out_onnx))
    except Exception as e:  # ORT raises its own Fail type
        if _COMPILE_NOTHING in str(e):
            raise InputError(f"{label}: no node was assigned to QNN (the {backend_type} backend takes "
                             "none of its ops as given; it needs static shapes and typically "
                             "a QDQ-quantized model)") from None
        raise InputError(f"{label}: QNN compilation failed: {first_line(e)}") from None
    return time.perf_counter() - t0


def _context_files(onnx_path: Path) -> tuple[list[str], int]:
    """(context .bin names, bytes embedded in the onnx) of a compiled EPContext model."""
    bins: list[str] = []
    embedded = 0
    for node in (n for n in load_onnx(onnx_path, external_data=False).graph.node if n.op_type == "EPContext"):
        attrs = {a.name: a for a in node.attribute}
        blob = attrs["ep_cache_context"].s if "ep_cache_context" in attrs else b""
        if "embed_mode" in attrs and attrs["embed_mode"].i == 1:
            embedded += len(blob)
        elif blob and blob.decode() not in bins:
            bins.append(blob.decode())
    return bins, embedded


def _load_compiled(folder: Path, cached: bool = True) -> CompiledModel:
    """A compiled entry of the cache, checked: files present, .bin sizes as recorded."""
    try:
        m = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        onnx_path, bins = folder / m["onnx"], [folder / b for b in m["bins"]]
        if not onnx_path.is_file() or (m["embed_mode"] == 0 and sum(b.stat().st_size for b in bins)
                                       != m["context_bytes"]):
            raise CorruptEntry("compiled files missing or of the wrong size")
        return CompiledModel(onnx_path, bins, m["context_bytes"], m["embed_mode"], m["source_sha256"],
                             m["compile_s"], cached, m["cpu_ops"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CorruptEntry(f"unreadable compile manifest ({type(err).__name__})") from None


def compile_epcontext(src: Path, out_dir: Path, *, embed_mode: int = 0, backend_type: str = "htp",
                      label: str | None = None) -> CompiledModel:
    """Compile `src` for QNN into an EPContext model under `out_dir`, reusing an earlier result.

    The entry is ``out_dir/<stem>_em<mode>-<backend>-<source hash>/``: ``<stem>_em<mode>_ctx.onnx``
    (+ the ``..._qnn.bin`` the EP names, for embed_mode 0) and ``manifest.json``. Built and
    published by the model cache (`harness.cache.cached_build`): a reader never sees half a
    compilation, and a changed source (hash of the .onnx and every external-data file) gets a
    new entry. ``label`` names the user's file in errors (default: ``src``).
    """
    if embed_mode not in (0, 1):
        raise ValueError(f"embed_mode must be 0 (context in a .bin) or 1 (in the onnx), got {embed_mode!r}")
    src, out_dir = Path(src), Path(out_dir)
    label = label or str(src)
    model = load_onnx(src, external_data=False, label="model")
    dynamic = dynamic_inputs(model)
    if dynamic:
        raise InputError(f"{label}: {shape_hint(dynamic)} (QNN needs static shapes)")
    sha = _source_sha256(src, model)
    stem = f"{src.stem}_em{embed_mode}"

    def build(scratch: Path) -> None:
        compile_s = _compile(src, scratch / f"{stem}_ctx.onnx", embed_mode, backend_type, label)
        bins, embedded = _context_files(scratch / f"{stem}_ctx.onnx")
        if not embedded and not bins:
            raise InputError(f"{label}: no node was assigned to QNN (no EPContext node)")
        ops = [n.op_type for n in load_onnx(scratch / f"{stem}_ctx.onnx", external_data=False).graph.node
               if n.op_type != "EPContext"]
        write_json_atomic(scratch / "manifest.json", {
            "source_sha256": sha, "embed_mode": embed_mode, "backend_type": backend_type,
            "onnx": f"{stem}_ctx.onnx", "bins": bins,
            "context_bytes": embedded + sum((scratch / b).stat().st_size for b in bins),
            "compile_s": compile_s, "cpu_ops": ops, "versions": qnn_versions()})

    built: list[bool] = []

    def load(folder: Path) -> CompiledModel:
        return _load_compiled(folder, cached=not built)

    def build_once(scratch: Path) -> None:
        build(scratch)
        built.append(True)

    return cached_build(out_dir / f"{stem}-{backend_type}-{sha[:16]}", build_once, load)


def generated_qdq(size: int, cache_dir: Path) -> PreparedModel:
    """The default qnn source model: a static-shape uint8 QDQ chain with its CPU reference."""
    def build(tmp: Path) -> PreparedModel:
        info = make_qdq_model(tmp / "model.onnx", size)
        feeds = make_feeds(info)
        save_reference(tmp / "reference.npz", feeds, {info["output_name"]: reference_output(tmp / "model.onnx", feeds)})
        source = f"generated:qdq-matmul-chain:{info['layers']}x{info['dim']}x{info['dim']}xuint8"
        return PreparedModel(tmp, source, [], {info["input_name"]: info["input_shape"]},
                             {info["input_name"]: "float32"}, [info["output_name"]], info["weights_bytes"],
                             extra={"quant_step": info["output_scale"]})

    return cached_model(cache_dir / f"qdq-chain-{size}-s0", build)


def _flush_c_stdio() -> None:
    if os.name != "posix":
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def native_stdout_to_stderr() -> Iterator[None]:
    """The QNN libraries print banner lines to fd 1 when they load; stdout carries the
    summary table, so send those lines to stderr (the progress stream) instead."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        _flush_c_stdio()  # the libraries write through C stdio: flush while fd 1 is redirected
        os.dup2(saved, 1)
        os.close(saved)


def prepare_qnn(opts: Any) -> tuple[PreparedModel, CompiledModel]:
    """(source model folder, compiled EPContext model). Every problem the user can fix
    (platform, missing package, dynamic shapes, nothing for QNN) is an InputError."""
    supported, why = qnn_platform_supported()
    if not supported:
        raise InputError(f"--target qnn: {why}")
    try:
        with native_stdout_to_stderr():
            register_qnn_ep()
    except QnnUnavailableError as err:
        raise InputError(f"--target qnn: {err}") from None
    cache_dir = opts.cache_dir or default_cache_dir()
    if opts.model is not None:
        model = prepare_user_model(opts.model, opts.shapes, cache_dir=cache_dir)
    else:
        model = generated_qdq(opts.model_size, cache_dir)
    options = opts.target_options
    compiled = compile_epcontext(model.onnx_path, model.folder / "qnn", embed_mode=options.get("embed_mode", 0),
                                 backend_type=options.get("backend_type", "htp"),
                                 label=str(opts.model) if opts.model is not None else model.source)
    return model, compiled
