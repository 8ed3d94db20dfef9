"""The model folder the workers load: ``model.onnx`` whose large initializers live in ONE
external ``weights.bin``, each tensor at an offset aligned to `ALIGNMENT` bytes,
``manifest.json`` saying where each tensor is, and ``reference.npz`` with a fixed input and
ORT's own output for it, so every worker can check its first inference.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from harness.core.errors import CorruptEntry, InputError
from harness.core.files import write_json_atomic

#: Offset alignment of every tensor in weights.bin: 64 bytes, what ORT's CPU kernels (and the
#: widest SIMD load) want of a buffer handed over in place. Not 64 KiB: the mapping is ONE
#: whole-file view, so no tensor needs a view of its own at an allocation-granularity offset,
#: and padding every tensor to 64 KiB made the heap baseline (which reads the whole file)
#: copy up to 9x a small model's tensor bytes. The file is within 1 % + 64 KiB of its tensors.
#: (A real QNN context binary has its own layout and padding: this file stands in for it.)
ALIGNMENT = 64

#: Tensors smaller than this stay inside the ONNX file (shape tensors, scales...): ORT may need
#: them for graph optimisation, and mapping them buys nothing.
EXTERNAL_THRESHOLD = 1024

#: 3: tensors at 64-byte offsets (2 had 64 KiB): an older folder is rebuilt.
MANIFEST_VERSION = 3

#: Bounds of a manifest.json read from the cache (which may be someone else's): its size, its
#: nesting, the tensors it may list (a model of 100 000 initializers fits), the inputs and
#: outputs, a shape's rank. A manifest past any of them is a corrupt entry, rebuilt.
MANIFEST_MAX_BYTES = 64 * 1024**2
MANIFEST_MAX_DEPTH = 16
MAX_TENSORS = 500_000
MAX_IO = 4096
MAX_RANK = 64


def _manifest_shape() -> dict:
    """What every entry of a manifest.json must be (`harness.core.runmeta.check_value`)."""
    from harness.core.runmeta import ANY, ListOf, MapOf

    shape = ListOf(int, MAX_RANK)
    tensor = {"name": str, "dtype": str, "shape": shape, "offset": int, "length": int, "onnx_type": int}
    return {
        "source": str,
        "tensors": ListOf(tensor, MAX_TENSORS),
        "inputs": MapOf(shape, MAX_IO),
        "input_types": MapOf(int, MAX_IO),
        "outputs": ListOf(str, MAX_IO),
        "weights_bytes": int,
        "output_types": MapOf(int, MAX_IO),
        "onnx_file": str,
        "session_level": str,
        "extra": MapOf(ANY),
    }


def _read_manifest(folder: Path) -> dict:
    """manifest.json of ``folder``, bounded and of the declared shape; CorruptEntry otherwise
    (the message says what is wrong, never what the file holds)."""
    from harness.core.inputfiles import parse_json_bounded, read_text_bounded
    from harness.core.runmeta import check_value

    path = folder / "manifest.json"
    try:
        data = parse_json_bounded(
            read_text_bounded(path, "", MANIFEST_MAX_BYTES), "manifest.json", MANIFEST_MAX_DEPTH, allow_nan=False
        )
        if not isinstance(data, dict):
            raise InputError("manifest.json: not a JSON object")
        if data.pop("manifest_version", None) != MANIFEST_VERSION:
            raise CorruptEntry("manifest from another harness version")
        check_value("manifest.json", "", data, _manifest_shape())
    except InputError as err:
        raise CorruptEntry(f"unusable manifest.json ({str(err).partition(': ')[2] or err})") from None
    for key in ("source", "tensors", "inputs", "input_types", "outputs", "weights_bytes"):
        if data.get(key) is None:
            raise CorruptEntry(f"unusable manifest.json ({key} is missing)")
    if any(v < 0 for t in data["tensors"] for v in (t["offset"], t["length"], *t["shape"])) or any(
        d < 0 for dims in data["inputs"].values() for d in dims
    ):
        raise CorruptEntry("unusable manifest.json (a negative offset, length or dimension)")
    from harness.prep.tensors import element_type

    try:
        for kind in (*(t["onnx_type"] for t in data["tensors"]), *data["input_types"].values()):
            element_type(kind)
    except (KeyError, ValueError, TypeError):
        raise CorruptEntry("unusable manifest.json (an element type ONNX does not have)") from None
    return data


def _onnx_file_allowed(folder: Path, onnx_file: str, outside: tuple[str, ...]) -> None:
    """The ONNX file a manifest names is inside the entry, or one the preparation itself put
    outside it (the user's own model, measured where it is: ``outside``); CorruptEntry
    otherwise (a forged manifest pointing the workers at any file of the machine)."""
    from harness.core.files import contained

    if not onnx_file or onnx_file in outside:
        return
    try:
        contained(folder, onnx_file, "manifest.json", "onnx_file")
    except InputError:
        raise CorruptEntry("manifest.json names an ONNX file outside the entry") from None


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
    def nondeterministic(self) -> list[str]:
        return list(self.extra.get("nondeterministic") or {})

    def save(self) -> None:
        data = asdict(self) | {"folder": None, "manifest_version": MANIFEST_VERSION}
        write_json_atomic(self.folder / "manifest.json", data)

    @classmethod
    def load(cls, folder: Path, *, check_files: bool = True, outside: tuple[str, ...] = ()) -> PreparedModel:
        """The model described by ``folder/manifest.json``. Raises `CorruptEntry` when the
        manifest is missing, unreadable, past its bounds, of the wrong shape, from another
        harness version, naming an ONNX file outside the entry (other than ``outside``: what the
        preparation itself recorded there) or (``check_files``) missing or short files: the
        cache rebuilds such an entry. Workers load without the file check and call
        `check_weights_file`, whose message names the remedy."""
        try:
            data = _read_manifest(Path(folder))
            data["folder"] = Path(folder)
            data["tensors"] = [TensorEntry(**t) for t in data["tensors"]]
            model = cls(**{k: v for k, v in data.items() if k in _FIELDS and v is not None})
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise CorruptEntry(f"unreadable manifest.json ({type(err).__name__})") from None
        if not check_files:
            return model
        _onnx_file_allowed(Path(folder), model.onnx_file, outside)
        for path in (model.onnx_path, model.reference_path):
            if not path.is_file():
                raise CorruptEntry(f"{path.name} is missing")
        from .reference import load_reference

        try:
            load_reference(model)  # arrays only: an object (pickled) array is a corrupt entry
        except Exception as err:  # numpy and zipfile raise several unrelated types
            raise CorruptEntry(
                f"{model.reference_path.name} is not a plain array archive ({type(err).__name__})"
            ) from None
        if model.tensors:
            try:
                need = model.weights_extent()
            except (KeyError, ValueError, TypeError, OverflowError):
                raise CorruptEntry("unusable manifest.json (a tensor of no size ONNX knows)") from None
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


#: The manifest keys `PreparedModel` takes (a newer writer's extra keys are left out).
_FIELDS = frozenset(f.name for f in fields(PreparedModel))


def cached_model(folder: Path, build, *, outside: tuple[str, ...] = ()) -> PreparedModel:
    """The prepared model cached in ``folder``, built by ``build(scratch) -> PreparedModel``
    on a miss (see `harness.cache`). ``outside``: the ONNX file outside the entry its manifest
    may name (the user's own model, measured where it is); any other is a corrupt entry."""
    from harness.cache import cached_build  # the parent's: a worker only loads its prepared models

    def build_into(scratch: Path) -> None:
        model = build(scratch)
        model.folder = scratch
        model.save()

    return cached_build(folder, build_into, lambda path: PreparedModel.load(path, outside=outside))
