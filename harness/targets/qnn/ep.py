"""QNN-specific harness part: register the real QNN EP, build a QDQ test model, compile it once
(cached) to an EPContext model, open sessions with ``disable_file_mapped_weights`` "0"/"1", and
read from the EP's own log how it treated file mapping.

How the EP's log is read: see harness/eplog.py (`classify_ep_log`, re-exported here).
onnxruntime/onnx/numpy are imported inside functions so ``import harness.target_qnn`` stays cheap.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shutil
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.targets.qnn.eplog import OPTION_VALUES, check_disable_flag, classify_ep_log

if TYPE_CHECKING:
    import numpy
    import onnxruntime

__all__ = ["OPTION_VALUES", "CompiledModel", "QnnInputError", "QnnUnavailableError",
           "check_disable_flag", "classify_ep_log", "compare_outputs", "compile_epcontext",
           "make_feeds", "make_qdq_model", "qnn_platform_supported", "qnn_session_options",
           "qnn_versions", "reference_output", "register_qnn_ep"]

EP_NAME = "QNNExecutionProvider"
#: Session config key for sharing EP resources (onnxruntime_session_options_config_keys.h).
SHARE_EP_CONTEXTS_KEY = "ep.share_ep_contexts"
_COMPILE_NOTHING = "Unable to compile any nodes"
_register_lock = threading.Lock()


class QnnInputError(ValueError):
    """A problem with the user's model or options, worded as one line the CLI can print."""


class QnnUnavailableError(RuntimeError):
    """onnxruntime-qnn is missing or exposes no QNN device on this machine."""


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


def qnn_platform_supported() -> tuple[bool, str]:
    """onnxruntime-qnn ships wheels for Linux x86_64 (HTP simulator) and Windows ARM64 only."""
    machine = platform.machine().lower()
    if sys.platform.startswith("linux") and machine in ("x86_64", "amd64"):
        return True, "Linux x86_64 (HTP simulator)"
    ok = sys.platform == "win32" and machine in ("arm64", "aarch64")
    return ok, "Windows ARM64" if ok else f"onnxruntime-qnn needs Linux x86_64 or Windows ARM64, " \
                                          f"not {sys.platform} {machine}"


def qnn_versions() -> dict[str, str | None]:
    """Versions for reports: the onnxruntime-qnn wheel and the QNN SDK it bundles. Never raises."""
    out: dict[str, str | None] = {"onnxruntime_qnn": None, "qnn_sdk": None}
    try:
        import onnxruntime_qnn
        from onnxruntime_qnn import build_and_package_info as info

        out["onnxruntime_qnn"] = str(getattr(onnxruntime_qnn, "__version__", "")) or None
        out["qnn_sdk"] = str(getattr(info, "qnn_version", "")) or None
    except Exception:  # noqa: BLE001 - any import problem just means "unknown"
        pass
    return out


def register_qnn_ep() -> list:
    """Register the QNN plugin EP library once per process and return its OrtEpDevices.

    NPU devices are preferred when the EP lists several (a Snapdragon PC may also list a GPU);
    the simulator on Linux reports a single CPU-typed device.
    """
    try:
        import onnxruntime_qnn
    except ImportError as e:
        raise QnnUnavailableError("onnxruntime-qnn is not installed (pip install onnxruntime-qnn; "
                                  "wheels exist for Linux x86_64 and Windows ARM64)") from e
    import onnxruntime as ort

    with _register_lock:
        if not any(d.ep_name == EP_NAME for d in ort.get_ep_devices()):
            try:
                ort.register_execution_provider_library(EP_NAME, onnxruntime_qnn.get_library_path())
            except Exception as e:  # noqa: BLE001 - ORT raises its own Fail type
                if "already registered" not in str(e):
                    raise QnnUnavailableError(f"cannot register the QNN EP library: {e}") from e
        devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    if not devices:
        raise QnnUnavailableError("the QNN EP is registered but exposes no device on this machine")
    npu = [d for d in devices if d.device.type == ort.OrtHardwareDeviceType.NPU]
    return npu or devices


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


def _load_onnx(path: Path) -> Any:
    import onnx

    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - protobuf DecodeError and friends
        raise QnnInputError(f"{path} is not a readable ONNX model ({type(e).__name__})") from e


def _dynamic_inputs(model: Any) -> list[str]:
    """Graph inputs whose shape has a symbolic/unknown dimension, as 'name[d0,d1,...]'."""
    init_names = {t.name for t in model.graph.initializer}
    found = []
    for vi in model.graph.input:
        if vi.name in init_names or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?")
                for d in tt.shape.dim] if tt.HasField("shape") else ["?..."]
        if any(not isinstance(d, int) for d in dims):
            found.append(f"{vi.name}[{','.join(str(d) for d in dims)}]")
    return found


def _source_sha256(src: Path, model: Any) -> str:
    """Hash of the .onnx file and every external-data file it names (the compile's real input)."""
    h = hashlib.sha256()
    files = [src] + sorted({src.parent / e.value for t in model.graph.initializer
                            for e in t.external_data if e.key == "location"})
    for f in files:
        h.update(f.name.encode() + b"\0")
        try:
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 22), b""):
                    h.update(block)
        except OSError as e:
            raise QnnInputError(f"{src.name}: cannot read {f.name}: {e.strerror}") from e
    return h.hexdigest()


def _cached(manifest: Path, sha: str, embed_mode: int) -> CompiledModel | None:
    """The manifest's compilation if it matches (names are relative: out_dir may move)."""
    try:
        m = json.loads(manifest.read_text(encoding="utf-8"))
        if m["source_sha256"] != sha or m["embed_mode"] != embed_mode:
            return None
        onnx_path, bins = manifest.parent / m["onnx"], [manifest.parent / b for b in m["bins"]]
        if not onnx_path.is_file() or (embed_mode == 0 and sum(
                b.stat().st_size for b in bins) != m["context_bytes"]):
            return None
        return CompiledModel(onnx_path, bins, m["context_bytes"], embed_mode, sha, m["compile_s"],
                             True, m["cpu_ops"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _compile(src: Path, out_onnx: Path, embed_mode: int) -> float:
    """Run ORT's compile API with the QNN HTP device; returns seconds spent."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3  # compile-time warnings (e.g. the gate) are not what we classify
    so.add_provider_for_devices(register_qnn_ep(), {"backend_type": "htp"})
    t0 = time.perf_counter()
    try:
        ort.ModelCompiler(so, str(src), bool(embed_mode),
                          flags=ort.OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED
                          ).compile_to_file(str(out_onnx))
    except Exception as e:  # noqa: BLE001 - ORT raises its own Fail type
        if _COMPILE_NOTHING in str(e):
            raise QnnInputError(f"{src.name}: no node was assigned to QNN (the HTP backend takes "
                                "none of its ops as given; it needs static shapes and typically "
                                "a QDQ-quantized model)") from None
        raise RuntimeError(f"QNN compilation of {src} failed: {e}") from e
    return time.perf_counter() - t0


def compile_epcontext(src: Path, out_dir: Path, *, embed_mode: int = 0) -> CompiledModel:
    """Compile `src` for QNN HTP into an EPContext model in `out_dir`, reusing an earlier result.

    Output: ``<stem>_em<mode>_ctx.onnx`` (+ ``..._qnn.bin``, named by the EP, for embed_mode 0)
    and ``<stem>_em<mode>.qnnctx.json``, the cache key (source hash + embed mode). Files are made
    in a scratch folder and moved in, manifest last: a reader never sees half a compilation.
    """
    if embed_mode not in (0, 1):
        raise ValueError(f"embed_mode must be 0 (context in a .bin) or 1 (in the onnx), "
                         f"got {embed_mode!r}")
    src, out_dir = Path(src), Path(out_dir)
    if not src.is_file():
        raise QnnInputError(f"model file not found: {src}")
    model = _load_onnx(src)
    if not model.graph.node:
        raise QnnInputError(f"{src.name}: the graph has no nodes: no node assigned to QNN")
    dynamic = _dynamic_inputs(model)
    if dynamic:
        name = dynamic[0].split("[")[0]
        raise QnnInputError(f"{src.name}: input shape(s) not static: {'; '.join(dynamic)}. QNN HTP "
                            f"needs fixed shapes: pass --shape NAME=1x3x224x224 for each, e.g. "
                            f"--shape {name}=1x3x224x224 (your model's real sizes)")
    sha = _source_sha256(src, model)
    stem = f"{src.stem}_em{embed_mode}"
    manifest = out_dir / f"{stem}.qnnctx.json"
    hit = _cached(manifest, sha, embed_mode)
    if hit is not None:
        return hit
    scratch = out_dir / f".compile-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    scratch.mkdir(parents=True)
    try:
        compile_s = _compile(src, scratch / f"{stem}_ctx.onnx", embed_mode)
        nodes = _load_onnx(scratch / f"{stem}_ctx.onnx").graph.node
        bins: list[str] = []
        embedded = 0
        for node in (n for n in nodes if n.op_type == "EPContext"):
            attrs = {a.name: a for a in node.attribute}
            blob = attrs["ep_cache_context"].s if "ep_cache_context" in attrs else b""
            if "embed_mode" in attrs and attrs["embed_mode"].i == 1:
                embedded += len(blob)
            elif blob and blob.decode() not in bins:
                bins.append(blob.decode())
        if not embedded and not bins:
            raise QnnInputError(f"{src.name}: no node was assigned to QNN (no EPContext node)")
        for name in os.listdir(scratch):  # keep the EP's file names: the onnx refers to them
            os.replace(scratch / name, out_dir / name)
        result = CompiledModel(out_dir / f"{stem}_ctx.onnx", [out_dir / b for b in bins],
                               embedded + sum((out_dir / b).stat().st_size for b in bins),
                               embed_mode, sha, compile_s, False,
                               [n.op_type for n in nodes if n.op_type != "EPContext"])
        record = {"source_sha256": sha, "embed_mode": embed_mode, "onnx": result.onnx_path.name,
                  "bins": bins, "context_bytes": result.context_bytes, "compile_s": compile_s,
                  "cpu_ops": result.cpu_ops, "versions": qnn_versions()}
        tmp = scratch / "manifest.json"
        tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
        os.replace(tmp, manifest)
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def qnn_session_options(*, disable_file_mapped_weights: str, share_ep_contexts: bool = False,
                        log_severity: int = 1) -> onnxruntime.SessionOptions:
    """SessionOptions with the QNN HTP device added and the option under test set explicitly.

    log_severity must be <= 2 (warning): the classification needs the EP's warnings, and at 1
    (info, the default) also its "Mapping DMA data" lines, the positive sign of active mapping.
    """
    value = check_disable_flag(disable_file_mapped_weights)
    if log_severity not in (0, 1, 2):
        raise ValueError(f"log_severity must be 0, 1 or 2 so the EP's file-mapping warnings are "
                         f"visible, got {log_severity!r}")
    import onnxruntime as ort

    devices = register_qnn_ep()
    so = ort.SessionOptions()
    so.log_severity_level = log_severity
    so.add_provider_for_devices(devices, {"backend_type": "htp",
                                          "disable_file_mapped_weights": value})
    if share_ep_contexts:
        so.add_session_config_entry(SHARE_EP_CONTEXTS_KEY, "1")
    return so


def reference_output(model_path: Path, feeds: dict) -> numpy.ndarray:
    """First output of the ORIGINAL (un-compiled) model on the CPU EP: the correctness reference."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def compare_outputs(out: Any, ref: Any, *, quant_step: float | None = None) -> dict:
    """QNN vs CPU reference: ok when cosine >= 0.99 and mean |diff| <= 3 quantization steps.

    Why these bounds: both runs quantize every activation to uint8, so they differ by rounding
    only; measured on the QDQ chain: cosine ~0.998, mean |diff| ~1.2 steps. Wrong weights or a
    garbled graph give cosine near 0. The max |diff| is reported, not gated: a single flipped
    rounding propagates through later layers and can reach ~5 steps legitimately.
    """
    import numpy as np

    a, b = np.asarray(out, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    if a.shape != b.shape:
        return {"ok": False, "reason": f"shape {a.shape} != {b.shape}"}
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    cosine = float(a @ b / denom) if denom else float(np.array_equal(a, b))
    diff = np.abs(a - b)
    res = {"cosine": cosine, "max_abs": float(diff.max()), "mean_abs": float(diff.mean())}
    ok = cosine >= 0.99
    if quant_step:
        res["mean_steps"] = res["mean_abs"] / quant_step
        res["max_steps"] = res["max_abs"] / quant_step
        ok = ok and res["mean_steps"] <= 3.0
    res["ok"] = bool(ok)
    return res
