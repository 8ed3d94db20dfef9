"""Models the workers load: generated ones (cached by parameters) and bring-your-own ONNX.

Every model the cpu targets load is prepared into one folder holding ``model.onnx`` whose
large initializers live in ONE external ``weights.bin``, each tensor at an offset aligned to
64 KiB (the Windows allocation granularity, a multiple of every POSIX page size), plus
``manifest.json`` saying where each tensor is and ``reference.npz`` with a fixed input and ORT's
own output for it, so every worker can check its first inference.

A user's model goes through (see `harness.prep`): its inputs are resolved (shapes, feeds);
large Constant-node tensors are lifted into initializers, also inside If/Loop/Scan subgraphs;
ORT optimizes the graph once, offline, at the level sessions would use, and the OPTIMIZED
initializers are externalised (a weight ORT rewrites in place under its own name, as the
transpose optimizer does, would otherwise be replaced by the stale original handed over by
name); every element type is externalised as the raw bytes ONNX stores (bf16, float8, packed
int4...). The reference is the ORIGINAL model run by ORT loading its own weights, with the
workers' session settings, twice: an output that differs between the two runs is recorded as
non-deterministic instead of calling every worker wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.cache import CorruptEntry, cached_build, default_cache_dir
from harness.core.errors import InputError
from harness.core.files import write_json_atomic
from harness.prep.inputs import InputRequest
from harness.prep.sessions import SessionSettings

ALIGNMENT = 64 * 1024
#: Tensors smaller than this stay inside the ONNX file (shape tensors, scales...): ORT may need
#: them for graph optimisation, and mapping them buys nothing.
EXTERNAL_THRESHOLD = 1024
MANIFEST_VERSION = 2
#: Bumped when the preparation of user models changes what it writes (a new cache key).
PREP_VERSION = 2


@dataclass
class TensorEntry:
    name: str
    dtype: str  # element type name, e.g. "float32", "bfloat16", "int4"
    shape: list[int]
    offset: int
    length: int  # bytes of data (packed for sub-byte types)
    onnx_type: int = 1  # TensorProto.DataType


@dataclass
class PreparedModel:
    """A model folder ready for workers: paths, tensor table and I/O description."""

    folder: Path
    source: str
    tensors: list[TensorEntry]
    inputs: dict[str, list[int]]  # the concrete shape each input is fed with
    input_types: dict[str, int]  # TensorProto element type of each input
    outputs: list[str]
    weights_bytes: int
    output_types: dict[str, int] = field(default_factory=dict)
    #: The ONNX file sessions load when it is not ``folder/model.onnx`` (a pre-compiled
    #: EPContext model is measured where it is).
    onnx_file: str = ""
    #: Graph optimization level of the sessions: "disabled" for a model optimized offline.
    session_level: str = "all"
    extra: dict = field(default_factory=dict)

    @property
    def onnx_path(self) -> Path:
        """``onnx_file`` (absolute, or relative to the folder), else ``folder/model.onnx``."""
        if not self.onnx_file:
            return self.folder / "model.onnx"
        path = Path(self.onnx_file)
        return path if path.is_absolute() else self.folder / path

    @property
    def weights_path(self) -> Path:
        return self.folder / "weights.bin"

    @property
    def reference_path(self) -> Path:
        return self.folder / "reference.npz"

    @property
    def input_dtypes(self) -> dict[str, str]:
        from harness.prep.tensors import element_type

        return {name: element_type(t).name for name, t in self.input_types.items()}

    @property
    def nondeterministic(self) -> list[str]:
        return list(self.extra.get("nondeterministic") or {})

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
        try:
            load_reference(model)  # arrays only: an object (pickled) array is a corrupt entry
        except Exception as err:  # numpy and zipfile raise several unrelated types
            raise CorruptEntry(
                f"{model.reference_path.name} is not a plain array archive ({type(err).__name__})"
            ) from None
        if model.tensors:
            need = model.weights_extent()
            if not model.weights_path.is_file() or model.weights_path.stat().st_size < need:
                raise CorruptEntry(f"{model.weights_path.name} is missing or shorter than {need} bytes")
        return model

    def weights_extent(self) -> int:
        """Bytes weights.bin must have: every tensor's data, and every in-place view of it."""
        from harness.prep.tensors import view_extent

        return max((t.offset + max(t.length, view_extent(t.onnx_type, t.shape)) for t in self.tensors), default=0)

    def check_weights_file(self) -> None:
        """InputError if weights.bin is missing or shorter than the tensor table says (a
        damaged cache, or a file truncated since it was prepared): a clear message instead of
        a worker reading past the end of the file (a SIGBUS when it is mapped)."""
        if not self.tensors:
            return  # nothing externalised (the qnn target's models keep their weights where they are)
        need = self.weights_extent()
        try:
            size = self.weights_path.stat().st_size
        except OSError:
            size = -1
        if size < need:
            have = "is missing" if size < 0 else f"has {size} bytes"
            raise InputError(
                f"{self.weights_path} {have}, the model needs {need}: the model cache is "
                f"damaged or the file was truncated; delete {self.folder} to rebuild it"
            )


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


def externalise(
    model: Any, weights_path: Path, min_bytes: int = EXTERNAL_THRESHOLD, base_dir: Path | None = None
) -> list[TensorEntry]:
    """Move every initializer (subgraphs included) of at least ``min_bytes`` of data into
    ``weights_path``, aligned, as the raw bytes ONNX stores; the protos become external
    references. Tensors already external (in files under ``base_dir``) are copied file to
    file, in chunks, never loaded whole. The file is padded so an in-place view of any tensor
    stays inside it."""
    from harness.prep.graphs import initializers
    from harness.prep.tensors import STRING, element_type, packed_size, raw_bytes, view_extent

    tensors = []
    end = 0
    with open(weights_path, "wb") as f:
        for _graph, proto in initializers(model):
            size = packed_size(proto.data_type, list(proto.dims)) if proto.data_type != STRING else 0
            if size < min_bytes:
                continue
            pad = (-f.tell()) % ALIGNMENT
            f.write(b"\0" * pad)
            offset = f.tell()
            try:
                if proto.data_location == proto.EXTERNAL:
                    _copy_external(proto, base_dir or weights_path.parent, size, f)
                else:
                    f.write(raw_bytes(proto))
            except ValueError as err:
                raise InputError(f"initializer {err}") from None
            shape = list(proto.dims)
            tensors.append(
                TensorEntry(proto.name, element_type(proto.data_type).name, shape, offset, size, proto.data_type)
            )
            end = max(end, offset + view_extent(proto.data_type, shape))
            proto.CopyFrom(_external_tensor_proto(proto.name, proto.data_type, shape, offset, size))
        if f.tell() < end:
            f.truncate(end)
    return tensors


def _copy_external(proto: Any, base_dir: Path, size: int, out) -> None:
    """Copy an external tensor's ``size`` bytes into ``out`` (ValueError when the file is short)."""
    from harness.core.inputfiles import open_regular
    from harness.prep.containment import tensor_ref

    info = tensor_ref(base_dir, proto, "model")
    length = info.length if info.length else size
    if length != size:
        raise ValueError(f"{proto.name}: {length} bytes of external data for {size} expected")
    with open_regular(info.path, "external data") as src:
        src.seek(info.offset)
        left = size
        while left:
            chunk = src.read(min(left, 16 * 1024**2))
            if not chunk:
                raise ValueError(f"{proto.name}: {info.location} ends {left} bytes early")
            out.write(chunk)
            left -= len(chunk)


def matmul_chain_dims(weights_bytes: int) -> tuple[int, int]:
    """(width D, layers L) of an fp32 MatMul chain holding about ``weights_bytes``."""
    for width in (2048, 1024, 512, 256, 128):
        layers = round(weights_bytes / (width * width * 4))
        if layers >= 4:
            return width, layers
    return 128, max(1, round(weights_bytes / (128 * 128 * 4)))


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
    tag = _settings_tag(settings)
    folder = (cache_dir or default_cache_dir()) / f"matmul-chain-d{width}-l{layers}-s{seed}{tag}"

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
                tensors.append(TensorEntry(f"W{i}", "float32", [width, width], offset, w.nbytes, TensorProto.FLOAT))
                protos.append(_external_tensor_proto(f"W{i}", TensorProto.FLOAT, [width, width], offset, w.nbytes))
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


def _settings_tag(settings: SessionSettings) -> str:
    """Cache-name suffix for non-default session settings (the reference depends on them)."""
    if not settings.config and settings.intra_op_threads is None:
        return ""
    key = json.dumps({"c": settings.config, "t": settings.intra_op_threads}, sort_keys=True).encode()
    return "-" + hashlib.blake2b(key, digest_size=6).hexdigest()


def parse_shapes(specs: list[str]) -> dict[str, list[int]]:
    """``["x=1x3x224x224"]`` -> ``{"x": [1, 3, 224, 224]}``; InputError on a bad spec."""
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        if name in shapes:
            raise InputError(f"--shape {name}: given twice ({'x'.join(map(str, shapes[name]))} and {dims})")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [int(d) for d in dims.lower().split("x")]
            if any(d <= 0 for d in shapes[name]):
                raise ValueError
        except ValueError:
            raise InputError(f"--shape {spec!r}: expected NAME=DIMxDIM..., e.g. x=1x3x224x224") from None
    return shapes


def parse_free_dims(specs: list[str]) -> dict[str, int]:
    """``["batch=1"]`` -> ``{"batch": 1}``; InputError on a bad spec."""
    dims = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            dims[name.strip()] = int(value)
            if dims[name.strip()] <= 0:
                raise ValueError
        except ValueError:
            raise InputError(f"--free-dim {spec!r}: expected NAME=VALUE with VALUE >= 1, e.g. batch=1") from None
    return dims


def parse_input_values(specs: list[str]) -> dict[str, str]:
    """``["sr=16000", "ids=ids.npy"]`` -> ``{"sr": "16000", "ids": "ids.npy"}``."""
    values = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not name.strip() or not value:
            raise InputError(f"--input {spec!r}: expected NAME=FILE.npy or NAME=VALUE, e.g. sr=16000")
        values[name.strip()] = value
    return values


def _file_identity(path: Path) -> str:
    """What makes "the same file" for the cache key: where it is, its size, mtime, inode and a
    hash of its first and last 64 KiB (a same-size rewrite inside one mtime tick is caught)."""
    from mapper_impl._common import identity_of_path

    ident = identity_of_path(str(path))
    return f"{path.resolve()}|{ident.device}|{ident.inode}|{ident.size}|{ident.mtime_ns}|{ident.edge_hash}"


def external_data_files(path: Path, model: Any, label: str | None = None) -> list[Path]:
    """Every external-data file the model reads (initializers, also inside subgraphs),
    resolved, each checked by `harness.prep.containment` (inside the model's folder, a
    regular file, every tensor's range inside it) before anything opens it."""
    from harness.prep.containment import external_refs

    return sorted({ref.path for ref in external_refs(Path(path), model, label or f"--model {path}")})


def source_key(path: Path, model: Any, extra: object = None, files: list[Path] | None = None) -> str:
    """Cache key of a user model: the ONNX file and every external-data file it reads (new
    weights beside an unchanged graph are a new entry), plus ``extra`` (e.g. the shapes)."""
    h = hashlib.blake2b(digest_size=12)
    for file in [path, *external_data_files(path, model), *(files or [])]:
        try:
            h.update(_file_identity(file).encode())
        except FileNotFoundError:
            raise InputError(
                f"--model {path}: external data file {file.name!r} is missing (expected next to the model)"
            ) from None
        except OSError as err:
            raise InputError(f"--model {path}: cannot read {file.name} ({err.strerror or err})") from None
    h.update(json.dumps(extra, sort_keys=True, default=str).encode())
    return h.hexdigest()


def load_onnx(path: Path, *, external_data: bool = True, label: str = "--model") -> Any:
    """The model (with its external data loaded when asked); InputError, one line, naming the
    user's file, for anything that is not a readable model with a graph."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model

    from harness.core.inputfiles import ONNX_MAX_BYTES, read_bytes_bounded
    from harness.prep.graphs import refuse_duplicate_initializers

    path = Path(path)
    if path.is_dir():
        raise InputError(f"{label} {path}: a folder, not an ONNX file")
    if not path.exists():
        raise InputError(f"{label} {path}: model file not found")
    data = read_bytes_bounded(path, label, ONNX_MAX_BYTES)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as err:  # protobuf raises several unrelated types
        raise InputError(f"{label} {path}: not a readable ONNX model ({type(err).__name__})") from None
    del data
    external_data_files(path, model, f"{label} {path}")  # every path it names checked, before any use
    refuse_duplicate_initializers(model, f"{label} {path}")
    if not model.graph.node:  # an empty file, or bytes that happen to parse as an empty message
        raise InputError(f"{label} {path}: not an ONNX model (no graph nodes): no node assigned to QNN or any other EP")
    if not external_data:
        return model
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


def ort_reason(err: BaseException | str) -> str:
    """The first line of an ORT error without its status prefix ("[ONNXRuntimeError] : 2 :
    INVALID_ARGUMENT : "): the reason itself."""
    import re

    text = err if isinstance(err, str) else first_line(err)
    text = re.sub(r"^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*", "", text).strip()
    return _without_source_location(text)


def _without_source_location(text: str) -> str:
    """Drop the "/onnxruntime_src/...graph.cc:1451 onnxruntime::Graph::Graph(<50 parameters>)"
    part of an ORT enforce message: the words after it are the reason."""
    import re

    match = re.search(r"\S+\.(?:cc|cpp|h):\d+ ", text)
    if not match:
        return text
    depth, end = 0, None
    for i in range(match.end(), len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                end = i + 1
                break
    if end is None:
        return text
    return (text[: match.start()] + text[end:].lstrip()).strip()


def resolve_feeds(model: Any, request: InputRequest, label: str) -> tuple[list, dict[str, list[int]], dict]:
    """(inputs, concrete shapes, feeds) of a user model; InputError for what cannot be fed."""
    from harness.prep.inputs import generate_feeds, given_feeds, model_inputs, refuse_unfeedable, resolve_shapes

    inputs = model_inputs(model)
    refuse_unfeedable(inputs, label)
    given = given_feeds([i for i in inputs if i.name in request.values], request)
    shapes = resolve_shapes(inputs, request, given, label)
    return inputs, shapes, generate_feeds(inputs, shapes, given)


def _mappable_bytes(model: Any) -> int:
    """Bytes of every initializer and Constant-node tensor of at least EXTERNAL_THRESHOLD."""
    from harness.prep.graphs import all_graphs
    from harness.prep.tensors import STRING, packed_size

    total = 0
    for graph in all_graphs(model.graph):
        tensors = list(graph.initializer) + [
            a.t for n in graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"
        ]
        for t in tensors:
            size = packed_size(t.data_type, list(t.dims)) if t.data_type != STRING else 0
            total += size if size >= EXTERNAL_THRESHOLD else 0
    return total


def machine_key() -> dict[str, str]:
    """What an offline-optimized model depends on besides the model: ORT's version and this
    CPU (level "all" picks NCHWc block sizes by instruction set)."""
    import platform

    import onnxruntime as ort

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("model name", "flags")):
                    cpu += "|" + line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    break
    except OSError:
        pass
    return {"onnxruntime": ort.__version__, "cpu": hashlib.blake2b(cpu.encode(), digest_size=8).hexdigest()}


def refuse_epcontext(model: Any, label: str, target: str) -> None:
    from harness.prep.epcontext import epcontext_nodes

    if epcontext_nodes(model):
        raise InputError(
            f"{label}: a pre-compiled EPContext model (for an EP such as QNN): --target {target} "
            "cannot load it; use --target qnn, or give the source model"
        )


def prepare_user_model(
    path: Path,
    request: InputRequest | dict | None = None,
    *,
    cache_dir: Path | None = None,
    settings: SessionSettings | None = None,
    target: str = "cpu",
) -> PreparedModel:
    """A user's model prepared for the cpu targets (see the module docstring). Every problem
    is an InputError with a one-line message naming the user's file."""
    path = Path(path)
    if isinstance(request, dict) or request is None:  # the old signature: shapes only
        request = InputRequest(shapes=dict(request or {}))
    settings = settings or SessionSettings()
    label = f"--model {path}"
    graph_only = load_onnx(path, external_data=False)
    refuse_epcontext(graph_only, label, target)
    from harness.prep.inputs import check_request, model_inputs

    check_request(model_inputs(graph_only), request)
    resolve_feeds(graph_only, request, label)  # refuse bad inputs before any work
    key = source_key(
        path,
        graph_only,
        {"request": request.key(), "session": settings.to_dict(), "machine": machine_key(), "prep": PREP_VERSION},
    )
    folder = (cache_dir or default_cache_dir()) / f"user-{path.stem}-{key}"
    return cached_model(folder, lambda tmp: _build_user_model(path, request, settings, tmp, label))


def link_external_data(path: Path, graph: Any, folder: Path) -> None:
    """Make ``path``'s external-data files visible from ``folder`` under the same relative
    names, so a rewritten graph saved there still finds its weights without loading them: a
    hard link (no copy), else a copy (another filesystem). Not a symlink: ORT resolves it and
    refuses external data outside the model's folder ("External data path escapes model
    directory")."""
    from harness.prep.containment import external_refs, inside

    done = set()
    for ref in external_refs(Path(path), graph, f"--model {path}"):
        if ref.location in done:
            continue
        done.add(ref.location)
        target = inside(folder, folder / ref.location)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(ref.path, target)
        except (OSError, NotImplementedError):
            shutil.copyfile(ref.path, target)


def _build_user_model(
    path: Path, request: InputRequest, settings: SessionSettings, tmp: Path, label: str
) -> PreparedModel:
    """Lift, optimize offline, externalise, reference. The weights are never all in this
    process's memory at once: the graph is read without its external data, ORT reads the
    weights itself, and `externalise` copies them file to file."""
    import onnx

    from harness.prep.graphs import lift_constants, unique_initializer_names
    from harness.prep.optimize import OFFLINE_LEVEL, SESSION_LEVEL_AFTER, optimize_offline

    graph = load_onnx(path, external_data=False)
    if not _mappable_bytes(graph):
        raise InputError(
            f"{label}: nothing to map: no initializer and no Constant-node tensor (subgraphs "
            f"included) holds {EXTERNAL_THRESHOLD} bytes or more"
        )
    inputs, shapes, feeds = resolve_feeds(graph, request, label)
    source = path
    lifted = lift_constants(graph, EXTERNAL_THRESHOLD)
    if lifted:  # ORT must see the lifted graph; its external weights stay where they are, linked
        source = tmp / "lifted" / Path(path).name
        source.parent.mkdir()
        link_external_data(path, graph, source.parent)
        onnx.save(graph, str(source))
    del graph
    optimized_path = optimize_offline(source, tmp, settings, min_external_bytes=EXTERNAL_THRESHOLD, label=label)
    optimized = onnx.load(str(optimized_path), load_external_data=False)
    renamed = unique_initializer_names(optimized)
    tensors = externalise(optimized, tmp / "weights.bin", base_dir=tmp)
    onnx.save(optimized, str(tmp / "model.onnx"))
    output_types = {o.name: o.type.tensor_type.elem_type for o in optimized.graph.output}
    del optimized
    shutil.rmtree(tmp / "lifted", ignore_errors=True)
    for leftover in ("optimized.onnx", "optimized.data"):
        (tmp / leftover).unlink(missing_ok=True)
    prepared = PreparedModel(
        tmp,
        str(path),
        tensors,
        shapes,
        {i.name: i.onnx_type for i in inputs},
        list(output_types),
        sum(t.length for t in tensors),
        output_types=output_types,
        session_level=SESSION_LEVEL_AFTER,
        extra={"lifted_constants": lifted, "renamed_initializers": renamed, "optimized_offline": OFFLINE_LEVEL},
    )
    if not tensors:
        raise InputError(
            f"{label}: nothing to map after ORT's optimizations: no initializer of "
            f"{EXTERNAL_THRESHOLD} bytes or more is left"
        )
    write_reference(prepared, path, feeds, settings, level=OFFLINE_LEVEL, label=label)
    return prepared


def write_reference(
    model: PreparedModel,
    run_path: Path,
    feeds: dict,
    settings: SessionSettings | None = None,
    *,
    level: str | None = None,
    label: str | None = None,
) -> None:
    """Run ``run_path`` (the original model) twice on ORT's CPU EP, ORT loading the weights
    itself, with the workers' session settings at ``level``; store input and outputs. Outputs
    that differ between the two runs are recorded as non-deterministic."""
    import onnxruntime as ort

    from harness.prep.outputs import nondeterministic_outputs
    from harness.prep.sessions import cpu_session_options, run_session

    so = cpu_session_options(settings, level=level or model.session_level)
    so.log_severity_level = 4  # the error is reported in one line below, not as ORT's log lines
    try:
        session = ort.InferenceSession(str(run_path), so, providers=["CPUExecutionProvider"])
        runs = [
            dict(
                zip(
                    model.outputs,
                    run_session(session, model.outputs, feeds, model.input_types, model.output_types),
                    strict=True,
                )
            )
            for _ in range(2)
        ]
    except Exception as err:  # ORT raises its own exception types
        hint = ""
        if "cannot load" not in str(err):
            hint = (
                " (if an input needs real values, e.g. a sample rate or token ids, give them with "
                "--input NAME=FILE.npy or --input NAME=VALUE)"
            )
        raise InputError(
            f"{label or 'model ' + model.source}: ONNX Runtime cannot run it: {ort_reason(err)}{hint}"
        ) from None
    unstable = nondeterministic_outputs(runs[0], runs[1])
    if unstable:
        model.extra["nondeterministic"] = unstable
    save_reference(model.reference_path, feeds, runs[0])


def _storable(array: Any) -> Any:
    """numpy can save bfloat16/float8/int4 arrays only as their raw unsigned views."""
    import numpy as np

    array = np.asarray(array)
    if array.dtype == object:  # string tensors: numpy unicode, loadable without pickle
        return array.astype(str)
    if (
        array.dtype.kind == "V"
        or type(array.dtype).__module__.startswith("ml_dtypes")
        or array.dtype.name in ("bfloat16", "int4", "uint4", "int2", "uint2")
        or "float8" in array.dtype.name
    ):
        return array.view(f"u{array.dtype.itemsize}")
    return array


def save_reference(path: Path, feeds: dict, outputs: dict) -> None:
    """The fixed input and the reference output(s), in one ``.npz`` every worker reads."""
    import numpy as np

    np.savez(
        path,
        **{f"in:{k}": _storable(v) for k, v in feeds.items()},
        **{f"out:{k}": _storable(v) for k, v in outputs.items()},
    )


def load_reference(model: PreparedModel) -> tuple[dict, dict]:
    import numpy as np

    from harness.prep.tensors import numpy_dtype

    def typed(array: Any, onnx_type: int | None) -> Any:
        if onnx_type is None:
            return array
        want = numpy_dtype(onnx_type)
        if want.kind == "O":  # strings are stored as numpy unicode (never pickled objects)
            return array.astype(object)
        return array if array.dtype == want else array.view(want)

    with np.load(model.reference_path, allow_pickle=False) as data:
        feeds = {k[3:]: typed(data[k], model.input_types.get(k[3:])) for k in data.files if k.startswith("in:")}
        outputs = {k[4:]: typed(data[k], model.output_types.get(k[4:])) for k in data.files if k.startswith("out:")}
    return feeds, outputs


def prepare_cpu_models(opts: Any, progress: Any = None, *, target: str = "cpu") -> list[PreparedModel]:
    """The model folders of the cpu and ort-native targets: each user model (a pipeline may
    have several) prepared, or the generated fp32 chain."""
    from harness.prep.pipeline import check_pipeline_request, resolve_models

    settings = opts.session_settings()
    if not opts.models:
        return [
            generated_matmul_chain(
                opts.model_size,
                cache_dir=opts.cache_dir,
                settings=settings,
                on_bytes=getattr(progress, "bytes_written", None),
            )
        ]
    paths = resolve_models(opts.models).paths
    request = opts.input_request()
    check_pipeline_request(paths, request)
    models = []
    for path in paths:
        if progress is not None and len(paths) > 1:
            progress.note(f"preparing {path.name}...")
        models.append(
            prepare_user_model(
                path,
                request.for_model(load_onnx(path, external_data=False)),
                cache_dir=opts.cache_dir,
                settings=settings,
                target=target,
            )
        )
    return models
