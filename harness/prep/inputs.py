"""A model's inputs: what they are, the concrete shape each is fed with, and the feed itself.

Shapes come from, in order: the model (fixed dimensions), ``--free-dim NAME=VALUE`` (a named
symbolic dimension, across every input, as onnxruntime_perf_test's ``-f``), ``--input
NAME=FILE.npy`` (the array's own shape), ``--shape NAME=DIMxDIM``. Whatever is still unknown is
reported in ONE error naming every such input, each with a ready ``--shape``: a user never
learns about a second dynamic input on a second try.

The graph itself is NOT rewritten for the cpu targets: ORT runs dynamic inputs as they are,
and fixing a shape in the graph can make a model invalid (silero VAD's untaken 8 kHz If branch
stops type-checking). Only the qnn target, which needs static shapes to compile, writes a
shape-fixed copy (`fixed_shape_copy`).

Feeds are seeded and deterministic: floats N(0, 1), integers 0 or 1, bools, strings a fixed
text. Inputs whose valid values are constrained (a sample rate, token ids, a mask) can be given
real values with ``--input NAME=FILE.npy`` or ``--input NAME=VALUE``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import InputError
from harness.core.files import real_path

from .shapehints import fixed_shape_copy as fixed_shape_copy  # re-exported: callers import it from here
from .shapehints import suggestions
from .tensors import STRING, element_type, numpy_dtype

SEED = 1234
#: The deterministic text of string inputs (one word per element, cycling).
WORDS = (
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "hex",
    "jazz",
    "vows",
)


@dataclass
class InputInfo:
    name: str
    kind: str  # "tensor" | "sequence" | "map" | "optional" | "sparse_tensor" | "opaque" | "unknown"
    onnx_type: int = 0  # element type of a tensor input
    dims: list[int | str] | None = None  # declared dims: ints where fixed, names or "?"; None: no shape


@dataclass
class InputRequest:
    """What the command line says about inputs (one request for every model of a pipeline)."""

    shapes: dict[str, list[int]] = field(default_factory=dict)  # --shape
    free_dims: dict[str, int] = field(default_factory=dict)  # --free-dim
    values: dict[str, str] = field(default_factory=dict)  # --input NAME=FILE.npy | NAME=VALUE

    @classmethod
    def of(cls, opts: Any) -> InputRequest:
        """What a run's --shape, --free-dim and --input say (`RunOptions`)."""
        return cls(dict(opts.shapes), dict(opts.free_dims), dict(opts.input_values))

    def for_model(self, model: Any) -> InputRequest:
        """The part of a pipeline's request that names this model's inputs (--free-dim applies
        to every model that has the dimension)."""
        inputs = model_inputs(model)
        names = {i.name for i in inputs}
        dims = {d for i in inputs for d in (i.dims or []) if isinstance(d, str)}
        return InputRequest(
            {k: v for k, v in self.shapes.items() if k in names},
            {k: v for k, v in self.free_dims.items() if k in dims},
            {k: v for k, v in self.values.items() if k in names},
        )

    def key(self) -> dict[str, Any]:
        """What a cache key must cover: the request, and the identity of every --input file."""
        files = {}
        for name, value in self.values.items():
            path = Path(value)
            if path.is_file():
                stat = path.stat()
                files[name] = [str(real_path(path)), stat.st_size, stat.st_mtime_ns]
        return {"shapes": self.shapes, "free_dims": self.free_dims, "values": self.values, "files": files}


def _kind(type_proto: Any) -> str:
    which = type_proto.WhichOneof("value")
    return {
        "tensor_type": "tensor",
        "sequence_type": "sequence",
        "map_type": "map",
        "optional_type": "optional",
        "sparse_tensor_type": "sparse_tensor",
        "opaque_type": "opaque",
    }.get(which or "", "unknown")


def dims_of(value_info: Any) -> list[int | str] | None:
    """Dimensions of a tensor input: ints where fixed, the symbolic name (or "?") where not;
    None when the input declares no shape at all."""
    tt = value_info.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?") for d in tt.shape.dim]


def model_inputs(model: Any) -> list[InputInfo]:
    """The graph inputs that are real inputs (not initializers with a default)."""
    init_names = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        kind = _kind(vi.type)
        if kind == "tensor":
            out.append(InputInfo(vi.name, kind, vi.type.tensor_type.elem_type, dims_of(vi)))
        else:
            out.append(InputInfo(vi.name, kind))
    return out


def refuse_unfeedable(inputs: list[InputInfo], label: str) -> None:
    """One InputError naming every input the harness cannot feed (sequences, maps, optionals...)."""
    bad = [i for i in inputs if i.kind != "tensor"]
    if bad:
        names = ", ".join(f"{i.name} ({i.kind})" for i in bad)
        raise InputError(
            f"{label}: input(s) the harness cannot feed: {names}; it feeds tensors only "
            "(wrap the model so these become tensors)"
        )
    odd = [
        i for i in inputs if i.onnx_type not in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16, 17, 18, 19, 20, 21, 22)
    ]
    if odd:
        names = ", ".join(f"{i.name} ({element_type(i.onnx_type).name})" for i in odd)
        raise InputError(f"{label}: input(s) of an element type ONNX Runtime cannot take from Python: {names}")


def check_request(inputs: list[InputInfo], request: InputRequest) -> None:
    """Names in --shape, --input and --free-dim must exist in the model (or pipeline) given."""
    names = [i.name for i in inputs]
    unknown = sorted(set(request.shapes) - set(names))
    if unknown:
        raise InputError(f"--shape names unknown input(s) {unknown}; the model's inputs: {', '.join(names)}")
    unknown = sorted(set(request.values) - set(names))
    if unknown:
        raise InputError(f"--input names unknown input(s) {unknown}; the model's inputs: {', '.join(names)}")
    both = sorted(n for n in set(request.values) & set(request.shapes) if is_npy_value(request.values[n]))
    if both:
        raise InputError(f"--shape and --input both given for {both}: an --input array brings its own shape")
    dim_names = sorted({d for i in inputs for d in (i.dims or []) if isinstance(d, str) and d != "?"})
    unknown = sorted(set(request.free_dims) - set(dim_names))
    if unknown:
        have = ", ".join(dim_names) if dim_names else "none"
        raise InputError(f"--free-dim {unknown[0]}: no input has a dimension of that name (named dimensions: {have})")


def _check_shape(info: InputInfo, shape: list[int], flag: str) -> None:
    if info.dims is None:
        return
    if len(shape) != len(info.dims):
        raise InputError(f"{flag} {info.name}: model input has rank {len(info.dims)}, got {len(shape)} dims")
    for axis, (d, v) in enumerate(zip(info.dims, shape, strict=True)):
        if isinstance(d, int) and d != v:
            raise InputError(f"{flag} {info.name}: dimension {axis} is fixed to {d} in the model, got {v}")


def resolve_shapes(
    inputs: list[InputInfo], request: InputRequest, given: dict[str, Any], label: str, model: Any = None
) -> dict[str, list[int]]:
    """The concrete shape of every input; one InputError naming every input still unresolved
    (with values that can work where ``model``'s graph tells, `shape_hint`)."""
    shapes: dict[str, list[int]] = {}
    dynamic: list[tuple[InputInfo, list[int | str] | None]] = []
    for info in inputs:
        if info.name in given and not isinstance(given[info.name], tuple):  # an array brings its shape
            shape = list(given[info.name].shape)
            _check_shape(info, shape, "--input")
            shapes[info.name] = shape
            continue
        if info.name in request.shapes:
            _check_shape(info, request.shapes[info.name], "--shape")
            shapes[info.name] = list(request.shapes[info.name])
            continue
        dims = (
            None if info.dims is None else [request.free_dims.get(d, d) if isinstance(d, str) else d for d in info.dims]
        )
        if dims is not None and all(isinstance(d, int) for d in dims):
            shapes[info.name] = dims  # type: ignore[assignment]
        else:
            dynamic.append((info, dims))
    if dynamic:
        raise InputError(f"{label}: {shape_hint(dynamic, model)}")
    return shapes


def shape_hint(dynamic: list[tuple[InputInfo, list[int | str] | None]], model: Any = None) -> str:
    """One message naming every dynamic input with a ready ``--shape`` for each: values that
    can work where the graph tells (`shapehints`: batch 1, spatial sizes its convolutions
    take), the others called placeholders."""
    found = suggestions(model, dynamic)
    parts, fixes, named = [], [], {}
    for info, dims in dynamic:
        shown = "?..." if dims is None else ",".join(str(d) for d in dims)
        parts.append(f"{info.name}[{shown}]")
        values = [d if isinstance(d, int) else found[(info.name, a)].value for a, d in enumerate(dims or [])]
        example = "1x3x224x224" if dims is None else "x".join(map(str, values))
        fixes.append(f"--shape {info.name}={example}")
        for axis, d in enumerate(dims or []):
            if isinstance(d, str) and d != "?":
                named.setdefault(d, found[(info.name, axis)].value)
    text = (
        f"input shape(s) not static: {'; '.join(parts)}. Fix each with --shape (your model's real sizes), "
        f"e.g. {' '.join(fixes)}"
    )
    if named:
        free = " ".join(f"--free-dim {n}={v}" for n, v in named.items())
        text += f", or name the dimensions once with --free-dim ({free})"
    return text + _why(found.values(), any(dims is None for _, dims in dynamic))


def _why(found: Any, shapeless: bool) -> str:
    """What the example values are: which can work, which are placeholders."""
    whys = {s.why: s.value for s in found}
    said = []
    if "fits" in whys:
        said.append(
            f"{whys['fits']}: the smallest size its convolutions' kernels and strides take, checked by ONNX's "
            "shape inference"
        )
    if "placeholder" in whys or shapeless:
        said.append(f"{'the other' if said else 'these'} values are placeholders: put your model's real sizes there")
    if "batch" in whys:
        said.append("batch 1")
    return f" ({'; '.join(said)})" if said else ""


def _literal(text: str, info: InputInfo) -> Any:
    import numpy as np

    if info.onnx_type == STRING:
        return np.array(text, dtype=object)
    for parse in (int, float):
        try:
            return np.array(parse(text))
        except ValueError:
            continue
    if text.lower() in ("true", "false"):
        return np.array(text.lower() == "true")
    raise InputError(f"--input {info.name}={text}: neither a .npy file nor a number")


def is_npy_value(text: str) -> bool:
    """True when ``--input NAME=TEXT`` names an array file (it brings its own shape); a plain
    value (``sr=16000``) is filled to the input's shape, which ``--shape`` may then fix."""
    return text.lower().endswith(".npy") or Path(text).is_file()


def given_feeds(inputs: list[InputInfo], request: InputRequest) -> dict[str, Any]:
    """The arrays of ``--input NAME=FILE.npy`` (their own shape) and ``--input NAME=VALUE``
    (``("fill", value)``: filled to the input's shape later), in the input's element type."""
    import numpy as np

    from harness.core.inputfiles import load_npy_bounded

    by_name = {i.name: i for i in inputs}
    out = {}
    for name, text in request.values.items():
        info = by_name[name]
        is_file = is_npy_value(text)
        if is_file:
            array = load_npy_bounded(text, f"--input {name}:")
        else:
            array = _literal(text, info)
        want = numpy_dtype(info.onnx_type)
        if array.dtype != want:
            lossless = (
                info.onnx_type == STRING
                or np.can_cast(array.dtype, want, "same_kind")
                or (not is_file and array.dtype.kind in "iub" and want.kind in "iufV")
            )
            if not lossless:
                raise InputError(
                    f"--input {name}: {array.dtype} values for a {element_type(info.onnx_type).name} input"
                )
            array = array.astype(want)
        out[name] = array if is_file else ("fill", array)
    return out


def generate_feeds(
    inputs: list[InputInfo], shapes: dict[str, list[int]], given: dict[str, Any], seed: int = SEED
) -> dict[str, Any]:
    """One seeded feed per input; ``given`` arrays as they are, given scalars filled to shape."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for info in inputs:
        shape = shapes[info.name]
        dtype = numpy_dtype(info.onnx_type)
        if info.name in given:
            value = given[info.name]
            feeds[info.name] = np.full(shape, value[1], dtype=dtype) if isinstance(value, tuple) else value
            continue
        name = element_type(info.onnx_type).name
        if info.onnx_type == STRING:
            count = int(np.prod(shape)) if shape else 1
            feeds[info.name] = np.array([WORDS[i % len(WORDS)] for i in range(count)], dtype=object).reshape(shape)
        elif name == "bool":
            feeds[info.name] = rng.integers(0, 2, size=shape).astype(bool)
        elif name.startswith(("float", "bfloat")):
            feeds[info.name] = rng.standard_normal(shape).astype(np.float32).astype(dtype)
        else:
            feeds[info.name] = rng.integers(0, 2, size=shape).astype(dtype)
    return feeds
