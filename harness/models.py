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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.cache import CorruptEntry, cached_build, default_cache_dir
from harness.core.errors import InputError
from harness.core.files import write_json_atomic

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
        write_json_atomic(self.folder / "manifest.json", data)

    @classmethod
    def load(cls, folder: Path, *, check_files: bool = True) -> PreparedModel:
        """The model described by ``folder/manifest.json``. Raises `CorruptEntry` when the
        manifest is missing, unreadable, from another harness version or (``check_files``)
        names missing or short files: the cache rebuilds such an entry. Workers load without
        the file check and call `check_weights_file`, whose message names the remedy."""
        try:
            data = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
            if data.pop("manifest_version", None) != MANIFEST_VERSION:
                raise CorruptEntry("manifest from another harness version")
            data["folder"] = Path(folder)
            data["tensors"] = [TensorEntry(**t) for t in data["tensors"]]
            model = cls(**data)
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise CorruptEntry(f"unreadable manifest.json ({type(err).__name__})") from None
        if not check_files:
            return model
        for path in (model.onnx_path, model.reference_path):
            if not path.is_file():
                raise CorruptEntry(f"{path.name} is missing")
        if model.tensors:
            need = max(t.offset + t.length for t in model.tensors)
            if not model.weights_path.is_file() or model.weights_path.stat().st_size < need:
                raise CorruptEntry(f"{model.weights_path.name} is missing or shorter than {need} bytes")
        return model

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


def cached_model(folder: Path, build) -> PreparedModel:
    """The prepared model cached in ``folder``, built by ``build(scratch) -> PreparedModel``
    on a miss (see `harness.cache`)."""

    def build_into(scratch: Path) -> None:
        model = build(scratch)
        model.folder = scratch
        model.save()

    return cached_build(folder, build_into, PreparedModel.load)


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


def generated_matmul_chain(weights_bytes: int, *, seed: int = 0, cache_dir: Path | None = None,
                           on_bytes=None) -> PreparedModel:
    """An fp32 chain y = x W1 W2 ... WL with random weights scaled by 1/sqrt(D), so values
    stay O(1) through the chain and the reference check is meaningful. ``on_bytes(done,
    total)`` hears how much of the weights file is written (progress display)."""
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
                if on_bytes is not None:
                    on_bytes((i + 1) * w.nbytes, layers * w.nbytes)
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

    return cached_model(folder, build)


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


def _file_identity(path: Path) -> str:
    """What makes "the same file" for the cache key: where it is, its size, mtime, inode and a
    hash of its first and last 64 KiB (a same-size rewrite inside one mtime tick is caught)."""
    from mapper_impl._common import identity_of_path

    ident = identity_of_path(str(path))
    return f"{path.resolve()}|{ident.device}|{ident.inode}|{ident.size}|{ident.mtime_ns}|{ident.edge_hash}"


def external_data_files(path: Path, model: Any) -> list[Path]:
    """Every external-data file the model reads (initializers, also inside subgraphs)."""
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

    names = {ExternalDataInfo(t).location for t in _get_all_tensors(model) if uses_external_data(t)}
    return sorted(path.parent / name for name in names)


def source_key(path: Path, model: Any, extra: object = None) -> str:
    """Cache key of a user model: the ONNX file and every external-data file it reads (new
    weights beside an unchanged graph are a new entry), plus ``extra`` (e.g. the shapes)."""
    h = hashlib.blake2b(digest_size=12)
    for file in [path, *external_data_files(path, model)]:
        try:
            h.update(_file_identity(file).encode())
        except FileNotFoundError:
            raise InputError(f"--model {path}: external data file {file.name!r} is missing (expected next to "
                             "the model)") from None
        except OSError as err:
            raise InputError(f"--model {path}: cannot read {file.name} ({err.strerror or err})") from None
    h.update(json.dumps(extra, sort_keys=True, default=str).encode())
    return h.hexdigest()


def prepare_user_model(path: Path, shapes: dict[str, list[int]], *, cache_dir: Path | None = None) -> PreparedModel:
    """Externalise a user model's large initializers into one aligned weights.bin and fix
    its dynamic input shapes. Every problem is an InputError with a one-line message."""
    if not path.is_file():
        raise InputError(f"--model {path}: {'a folder, not an ONNX file' if path.is_dir() else 'no such file'}")
    graph_only = load_onnx(path, external_data=False)
    folder = (cache_dir or default_cache_dir()) / f"user-{path.stem}-{source_key(path, graph_only, shapes)}"
    return cached_model(folder, lambda tmp: _externalise(path, shapes, tmp))


def load_onnx(path: Path, *, external_data: bool = True, label: str = "--model") -> Any:
    """The model (with its external data loaded when asked); InputError, one line, naming the
    user's file, for anything that is not a readable model with a graph."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{label} {path}: {'a folder, not an ONNX file' if path.is_dir() else 'model file not found'}")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as err:  # protobuf raises several unrelated types
        raise InputError(f"{label} {path}: not a readable ONNX model ({type(err).__name__})") from None
    if not model.graph.node:  # an empty file, or bytes that happen to parse as an empty message
        raise InputError(f"{label} {path}: not an ONNX model (no graph nodes): no node assigned to QNN "
                         "or any other EP")
    if not external_data:
        return model
    for file in external_data_files(path, model):
        if not file.is_file():
            raise InputError(f"{label} {path}: external data file {file.name!r} is missing (expected next to "
                             "the model)")
    try:
        load_external_data_for_model(model, str(path.parent))
    except FileNotFoundError as err:
        raise InputError(f"{label} {path}: external data missing ({err.filename or err})") from None
    except Exception as err:  # onnx raises ValidationError, OSError, ValueError...
        raise InputError(f"{label} {path}: cannot load its external data ({first_line(err)})") from None
    return model


def first_line(err: BaseException) -> str:
    """The first line of an exception's text (ORT and onnx put whole reports in theirs)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def graph_inputs(model: Any) -> list[Any]:
    """The graph inputs that are real inputs (not initializers with a default)."""
    init_names = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in init_names]


def dims_of(value_info: Any) -> list[int | str] | None:
    """Dimensions of a tensor input: ints where fixed, the symbolic name (or "?") where not;
    None when the input declares no shape at all."""
    tt = value_info.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?") for d in tt.shape.dim]


def dynamic_inputs(model: Any) -> list[tuple[str, list[int | str] | None]]:
    """(name, dims) of every tensor input whose shape is not fully fixed."""
    found = []
    for vi in graph_inputs(model):
        if not vi.type.HasField("tensor_type"):
            continue
        dims = dims_of(vi)
        if dims is None or any(not isinstance(d, int) for d in dims):
            found.append((vi.name, dims))
    return found


def shape_hint(dynamic: list[tuple[str, list[int | str] | None]]) -> str:
    """One message naming every dynamic input with a ready ``--shape`` for each."""
    parts, fixes = [], []
    for name, dims in dynamic:
        shown = "?..." if dims is None else ",".join(str(d) for d in dims)
        parts.append(f"{name}[{shown}]")
        example = "1x3x224x224" if dims is None else "x".join(str(d) if isinstance(d, int) else "1" for d in dims)
        fixes.append(f"--shape {name}={example}")
    return (f"input shape(s) not static: {'; '.join(parts)}. Fix each with --shape (your model's real sizes), "
            f"e.g. {' '.join(fixes)}")


def _fix_shapes(model: Any, shapes: dict[str, list[int]], path: Path) -> None:
    """Apply --shape to the graph inputs; InputError for unknown names, rank or fixed-dim clashes."""
    inputs = graph_inputs(model)
    unknown = set(shapes) - {i.name for i in inputs}
    if unknown:
        names = ", ".join(i.name for i in inputs)
        raise InputError(f"--shape names unknown input(s) {sorted(unknown)}; the model's inputs: {names}")
    for inp in inputs:
        fixed = shapes.get(inp.name)
        if fixed is None:
            continue
        dims = inp.type.tensor_type.shape.dim
        if len(fixed) != len(dims):
            raise InputError(f"--shape {inp.name}: model input has rank {len(dims)}, got {len(fixed)} dims")
        for axis, (d, v) in enumerate(zip(dims, fixed, strict=True)):
            if d.dim_value > 0 and d.dim_value != v:
                raise InputError(f"--shape {inp.name}: dimension {axis} is fixed to {d.dim_value} in the model, "
                                 f"got {v}")
            d.ClearField("dim_param")
            d.dim_value = v
    dynamic = dynamic_inputs(model)
    if dynamic:
        raise InputError(f"--model {path}: {shape_hint(dynamic)}")


def _externalise(path: Path, shapes: dict[str, list[int]], tmp: Path) -> PreparedModel:
    import onnx
    from onnx import helper, numpy_helper

    model = load_onnx(path)
    graph = model.graph
    _fix_shapes(model, shapes, path)
    inputs = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in graph_inputs(model)}
    dtypes = {i.name: str(helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)) for i in graph_inputs(model)}
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


def cpu_session_options():
    """ORT CPU EP session options of every cpu/ort-native session AND of the reference run:
    prepacking off (it would copy every weight, and the mapping would buy nothing). The
    reference must use exactly these options: with prepacking on, fp16 and int8 kernels
    round differently and every worker would be called wrong."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_prepacking", "1")
    so.log_severity_level = 2
    return so


def write_reference(model: PreparedModel) -> None:
    """Run the model once on ORT's CPU EP (ORT loading the external data itself, with the
    workers' session options) and store input and outputs: every worker compares its first
    inference against this."""
    import onnxruntime as ort

    feeds = reference_inputs(model)
    try:
        session = ort.InferenceSession(str(model.onnx_path), cpu_session_options(), providers=["CPUExecutionProvider"])
        outputs = session.run(model.outputs, feeds)
    except Exception as err:  # ORT raises its own exception types
        raise InputError(f"model {model.source}: ONNX Runtime cannot run it: {first_line(err)}") from None
    save_reference(model.reference_path, feeds, dict(zip(model.outputs, outputs, strict=True)))


def save_reference(path: Path, feeds: dict, outputs: dict) -> None:
    """The fixed input and the reference output(s), in one ``.npz`` every worker reads."""
    import numpy as np

    np.savez(path, **{f"in:{k}": v for k, v in feeds.items()}, **{f"out:{k}": v for k, v in outputs.items()})


def load_reference(model: PreparedModel) -> tuple[dict, dict]:
    import numpy as np

    with np.load(model.reference_path) as data:
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
        outputs = {k[4:]: data[k] for k in data.files if k.startswith("out:")}
    return feeds, outputs


def prepare_cpu_model(opts: Any, progress: Any) -> PreparedModel:
    """The model folder of the cpu and ort-native targets: the user's model externalised, or
    the generated fp32 chain."""
    if opts.model is not None:
        return prepare_user_model(opts.model, opts.shapes, cache_dir=opts.cache_dir)
    return generated_matmul_chain(opts.model_size, cache_dir=opts.cache_dir,
                                  on_bytes=getattr(progress, "bytes_written", None))
