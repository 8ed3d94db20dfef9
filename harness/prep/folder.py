"""The model folder the workers load: ``model.onnx`` whose large initializers live in ONE
external ``weights.bin``, each tensor at an offset aligned to `ALIGNMENT` bytes,
``manifest.json`` saying where each tensor is, and ``reference.npz`` with a fixed input and
ORT's own output for it, so every worker can check its first inference.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.cache import cached_build
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
        from .reference import load_reference

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
