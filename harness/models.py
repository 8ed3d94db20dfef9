"""Models the workers load: generated ones (cached by parameters) and bring-your-own ONNX.

Every model is prepared into one folder holding ``model.onnx`` whose large initializers live
in ONE external ``weights.bin``, each tensor at an offset aligned to 64 KiB (the Windows
allocation granularity, a multiple of every POSIX page size), plus ``manifest.json`` saying
where each tensor is and ``reference.npz`` with a fixed input and the CPU EP's output for
it, so every worker can check its first inference.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.core.errors import InputError

ALIGNMENT = 64 * 1024
#: Initializers smaller than this stay inside the ONNX file (shape tensors, scales...): ORT
#: may need them for graph optimisation, and mapping them buys nothing.
EXTERNAL_THRESHOLD = 1024
MANIFEST_VERSION = 1


@dataclass
class TensorEntry:
    name: str
    dtype: str  # numpy dtype string, e.g. "float32"
    shape: list[int]
    offset: int
    length: int


@dataclass
class PreparedModel:
    """A model folder ready for workers: paths, tensor table and I/O description."""

    folder: Path
    source: str
    tensors: list[TensorEntry]
    inputs: dict[str, list[int]]
    input_dtypes: dict[str, str]
    outputs: list[str]
    weights_bytes: int
    extra: dict = field(default_factory=dict)

    @property
    def onnx_path(self) -> Path:
        return self.folder / "model.onnx"

    @property
    def weights_path(self) -> Path:
        return self.folder / "weights.bin"

    @property
    def reference_path(self) -> Path:
        return self.folder / "reference.npz"

    def save(self) -> None:
        data = asdict(self) | {"folder": None, "manifest_version": MANIFEST_VERSION}
        (self.folder / "manifest.json").write_text(json.dumps(data, indent=1))

    @classmethod
    def load(cls, folder: Path) -> PreparedModel:
        data = json.loads((folder / "manifest.json").read_text())
        if data.pop("manifest_version", None) != MANIFEST_VERSION:
            raise InputError(f"{folder}: model cache from another harness version; delete it")
        data["folder"] = folder
        data["tensors"] = [TensorEntry(**t) for t in data["tensors"]]
        return cls(**data)

    def check_weights_file(self) -> None:
        """InputError if weights.bin is missing or shorter than the tensor table says (a
        damaged cache, or a file truncated since it was prepared): a clear message instead of
        a worker reading past the end of the file (a SIGBUS when it is mapped)."""
        if not self.tensors:
            return  # nothing externalised (the qnn target's source model keeps its weights inline)
        need = max(t.offset + t.length for t in self.tensors)
        try:
            size = self.weights_path.stat().st_size
        except OSError:
            size = -1
        if size < need:
            have = "is missing" if size < 0 else f"has {size} bytes"
            raise InputError(f"{self.weights_path} {have}, the model needs {need}: the model cache is "
                             f"damaged or the file was truncated; delete {self.folder} to rebuild it")


def default_cache_dir() -> Path:
    """``$HARNESS_CACHE_DIR`` or ``~/.cache/qnn-fmw-harness``: generated models are big and
    deterministic, so they are built once per machine."""
    env = os.environ.get("HARNESS_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "qnn-fmw-harness"


def _cached(folder: Path, build) -> PreparedModel:
    """Return the prepared model in ``folder``, building it into a temp folder and renaming
    it into place first if needed (a crash mid-build never leaves a half model behind)."""
    if (folder / "manifest.json").exists():
        model = PreparedModel.load(folder)
        model.check_weights_file()
        return model
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".tmp-", dir=folder.parent))
    except OSError as err:
        raise InputError(f"model cache {folder.parent}: cannot create a folder there "
                         f"({err.strerror or err}); choose another with --cache-dir") from None
    try:
        try:
            model = build(tmp)
            model.folder = tmp
            model.save()
        except OSError as err:  # disk full, quota, a cache folder gone read-only mid-build
            raise InputError(f"model cache {folder.parent}: cannot write the model "
                             f"({err.strerror or err}); free space or choose another --cache-dir") from None
        try:
            os.replace(tmp, folder)
        except OSError:  # another process won the race: use theirs
            shutil.rmtree(tmp, ignore_errors=True)
        return PreparedModel.load(folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _write_aligned(f, data: bytes | memoryview) -> int:
    """Pad ``f`` to the next aligned offset, write ``data``, return where it starts."""
    pad = (-f.tell()) % ALIGNMENT
    if pad:
        f.write(b"\0" * pad)
    offset = f.tell()
    f.write(data)
    return offset


def _external_tensor_proto(name: str, onnx_dtype: int, shape: list[int], offset: int, length: int):
    from onnx import TensorProto

    t = TensorProto()
    t.name = name
    t.data_type = onnx_dtype
    t.dims.extend(shape)
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "weights.bin"), ("offset", str(offset)), ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def matmul_chain_dims(weights_bytes: int) -> tuple[int, int]:
    """(width D, layers L) of an fp32 MatMul chain holding about ``weights_bytes``."""
    for width in (2048, 1024, 512, 256, 128):
        layers = round(weights_bytes / (width * width * 4))
        if layers >= 4:
            return width, layers
    return 128, max(1, round(weights_bytes / (128 * 128 * 4)))


def generated_matmul_chain(weights_bytes: int, *, seed: int = 0, cache_dir: Path | None = None) -> PreparedModel:
    """An fp32 chain y = x W1 W2 ... WL with random weights scaled by 1/sqrt(D), so values
    stay O(1) through the chain and the reference check is meaningful."""
    width, layers = matmul_chain_dims(weights_bytes)
    folder = (cache_dir or default_cache_dir()) / f"matmul-chain-d{width}-l{layers}-s{seed}"

    def build(tmp: Path) -> PreparedModel:
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
                offset = _write_aligned(f, w.data)
                tensors.append(TensorEntry(f"W{i}", "float32", [width, width], offset, w.nbytes))
                protos.append(_external_tensor_proto(f"W{i}", TensorProto.FLOAT, [width, width], offset, w.nbytes))
                nodes.append(helper.make_node("MatMul", ["x" if i == 0 else f"h{i - 1}", f"W{i}"],
                                              ["y" if i == layers - 1 else f"h{i}"]))
        graph = helper.make_graph(
            nodes, "matmul_chain",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
            protos,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 9
        onnx.save(model, str(tmp / "model.onnx"))
        prepared = PreparedModel(tmp, f"generated:matmul-chain:{layers}x{width}x{width}xfp32", tensors,
                                 {"x": [1, width]}, {"x": "float32"}, ["y"], layers * width * width * 4)
        write_reference(prepared)
        return prepared

    return _cached(folder, build)


def parse_shapes(specs: list[str]) -> dict[str, list[int]]:
    """``["x=1x3x224x224"]`` -> ``{"x": [1, 3, 224, 224]}``; InputError on a bad spec."""
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [int(d) for d in dims.lower().split("x")]
            if any(d <= 0 for d in shapes[name]):
                raise ValueError
        except ValueError:
            raise InputError(f"--shape {spec!r}: expected NAME=DIMxDIM..., e.g. x=1x3x224x224") from None
    return shapes


def _file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=12)
    st = path.stat()
    h.update(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()


def prepare_user_model(path: Path, shapes: dict[str, list[int]], *, cache_dir: Path | None = None) -> PreparedModel:
    """Externalise a user model's large initializers into one aligned weights.bin and fix
    its dynamic input shapes. Every problem is an InputError with a one-line message."""
    if not path.is_file():
        raise InputError(f"--model {path}: {'a folder, not an ONNX file' if path.is_dir() else 'no such file'}")
    key = _file_digest(path) + hashlib.blake2b(json.dumps(shapes, sort_keys=True).encode(), digest_size=6).hexdigest()
    folder = (cache_dir or default_cache_dir()) / f"user-{path.stem}-{key}"
    return _cached(folder, lambda tmp: _externalise(path, shapes, tmp))


def _load_onnx(path: Path):
    """The model with its external data loaded; InputError naming a missing external file."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, load_external_data_for_model, uses_external_data

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as err:  # noqa: BLE001 - protobuf raises several unrelated types
        raise InputError(f"--model {path}: not a readable ONNX model ({type(err).__name__})") from None
    if not model.graph.node:  # an empty file, or bytes that happen to parse as an empty message
        raise InputError(f"--model {path}: not an ONNX model (no graph nodes)")
    for tensor in model.graph.initializer:
        if uses_external_data(tensor):
            location = ExternalDataInfo(tensor).location
            if not (path.parent / location).is_file():
                raise InputError(f"--model {path}: external data file {location!r} of tensor "
                                 f"{tensor.name!r} is missing (expected next to the model)")
    try:
        load_external_data_for_model(model, str(path.parent))
    except FileNotFoundError as err:
        raise InputError(f"--model {path}: external data missing ({err.filename or err})") from None
    except Exception as err:  # noqa: BLE001 - onnx raises ValidationError, OSError, ValueError...
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(f"--model {path}: cannot load its external data ({first})") from None
    return model


def _externalise(path: Path, shapes: dict[str, list[int]], tmp: Path) -> PreparedModel:
    from onnx import helper, numpy_helper

    model = _load_onnx(path)
    graph = model.graph
    init_names = {t.name for t in graph.initializer}
    real_inputs = [i for i in graph.input if i.name not in init_names]
    unknown = set(shapes) - {i.name for i in real_inputs}
    if unknown:
        names = ", ".join(i.name for i in real_inputs)
        raise InputError(f"--shape names unknown input(s) {sorted(unknown)}; the model's inputs: {names}")
    inputs, dtypes = {}, {}
    for inp in real_inputs:
        dims = inp.type.tensor_type.shape.dim
        fixed = shapes.get(inp.name)
        if fixed is not None:
            if len(fixed) != len(dims):
                raise InputError(f"--shape {inp.name}: model input has rank {len(dims)}, got {len(fixed)} dims")
            for axis, (d, v) in enumerate(zip(dims, fixed, strict=True)):
                if d.dim_value > 0 and d.dim_value != v:
                    raise InputError(f"--shape {inp.name}: dimension {axis} is fixed to {d.dim_value} "
                                     f"in the model, got {v}")
                d.ClearField("dim_param")
                d.dim_value = v
        if any(d.dim_value <= 0 for d in dims):
            shown = ", ".join(d.dim_param or "?" if d.dim_value <= 0 else str(d.dim_value) for d in dims)
            example = "x".join(str(d.dim_value) if d.dim_value > 0 else "1" for d in dims)
            raise InputError(
                f"input {inp.name!r} has dynamic shape [{shown}]: fix it with --shape, "
                f"e.g. --shape {inp.name}={example}"
            )
        inputs[inp.name] = [d.dim_value for d in dims]
        dtypes[inp.name] = str(helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type))
    tensors = []
    with open(tmp / "weights.bin", "wb") as f:
        for proto in graph.initializer:
            array = numpy_helper.to_array(proto)
            if array.nbytes < EXTERNAL_THRESHOLD or array.dtype == object:
                continue
            data = array.tobytes()
            offset = _write_aligned(f, data)
            tensors.append(TensorEntry(proto.name, str(array.dtype), list(array.shape), offset, len(data)))
            new = _external_tensor_proto(proto.name, proto.data_type, list(array.shape), offset, len(data))
            proto.CopyFrom(new)
    if not tensors:
        raise InputError(f"--model {path}: no initializer of {EXTERNAL_THRESHOLD} bytes or more to map")
    import onnx

    onnx.save(model, str(tmp / "model.onnx"))
    prepared = PreparedModel(tmp, str(path), tensors, inputs, dtypes, [o.name for o in graph.output],
                             sum(t.length for t in tensors))
    write_reference(prepared)
    return prepared


def reference_inputs(model: PreparedModel) -> dict:
    """A fixed, seeded input per model input (integers in a small range for int inputs)."""
    import numpy as np

    rng = np.random.default_rng(1234)
    feeds = {}
    for name, shape in model.inputs.items():
        dtype = np.dtype(model.input_dtypes[name])
        if dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[name] = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            feeds[name] = np.zeros(shape, dtype=dtype)
    return feeds


def write_reference(model: PreparedModel) -> None:
    """Run the model once on ORT's CPU EP (ORT loading the external data itself) and store
    input and outputs: every worker compares its first inference against this."""
    import numpy as np
    import onnxruntime as ort

    feeds = reference_inputs(model)
    try:
        session = ort.InferenceSession(str(model.onnx_path), providers=["CPUExecutionProvider"])
        outputs = session.run(model.outputs, feeds)
    except Exception as err:  # noqa: BLE001 - ORT raises its own exception types
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(f"model {model.source}: ONNX Runtime cannot run it: {first}") from None
    np.savez(model.reference_path, **{f"in:{k}": v for k, v in feeds.items()},
             **{f"out:{k}": v for k, v in zip(model.outputs, outputs, strict=True)})


def load_reference(model: PreparedModel) -> tuple[dict, dict]:
    import numpy as np

    with np.load(model.reference_path) as data:
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
        outputs = {k[4:]: data[k] for k in data.files if k.startswith("out:")}
    return feeds, outputs
