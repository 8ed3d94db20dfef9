"""The one rule for every path a model names (ORT's): relative, inside its folder, a regular file; else InputError."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from harness.core.errors import InputError
from harness.core.files import real_path
from harness.core.inputfiles import check_regular


def contained(base_dir: Path, name: str, label: str, what: str) -> Path:
    """``base_dir / name`` resolved if it stays inside ``base_dir``; else InputError naming ``what``."""
    if not name or "\0" in name:
        raise InputError(f"{label}: {what} is an empty or invalid path")
    if PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute() or PureWindowsPath(name).drive:
        raise InputError(f"{label}: {what} is an absolute path; only paths inside the model's folder are accepted")
    base = real_path(base_dir)
    path = real_path(base / name)
    if path != base and base not in path.parents:
        raise InputError(f"{label}: {what} points outside the model's folder {base}; refused")
    return path


def contained_file(base_dir: Path, name: str, label: str, what: str) -> Path:
    """`contained`, and the path must be an existing regular file."""
    path = contained(base_dir, name, label, what)
    if not path.exists():
        raise InputError(f"{label}: {what} is missing (expected at {path})")
    check_regular(path, f"{label}: {what}")
    return path


def inside(folder: Path, path: Path) -> Path:
    """``path`` if inside ``folder`` once resolved; RuntimeError otherwise (a bug, not a user mistake)."""
    base, resolved = real_path(folder), real_path(path)
    if base not in resolved.parents:
        raise RuntimeError(f"refusing to write {path}: outside {folder}")
    return path


@dataclass(frozen=True)
class ExternalRef:
    """One tensor's external data, checked: a file inside the model's folder and a byte range inside it."""

    tensor: str
    location: str  # as the model wrote it (relative to the model's folder)
    path: Path  # resolved
    offset: int
    length: int  # bytes (the tensor's packed size when the model gives none)


def _entries(proto: Any) -> dict[str, str]:
    entries: dict[str, str] = {}
    for entry in proto.external_data:
        if entry.key in entries:
            raise ValueError(f"gives {entry.key!r} twice")
        entries[entry.key] = entry.value
    return entries


def _non_negative(value: str | None, key: str) -> int | None:
    if value is None or value == "":
        return None
    if not value.isascii() or not value.isdigit():
        raise ValueError(f"{key} {value!r} is not a non-negative integer")
    return int(value)


def tensor_ref(base_dir: Path, proto: Any, label: str, sizes: dict[Path, int] | None = None) -> ExternalRef:
    """The checked external data of one tensor whose model lives in ``base_dir``."""
    from harness.prep.tensors import STRING, packed_size

    try:
        entries = _entries(proto)
    except ValueError as err:
        raise InputError(f"{label}: the external data of tensor {proto.name!r} {err}") from None
    location = entries.get("location", "")
    what = f"external data file {location!r} (of tensor {proto.name!r})"
    try:
        offset = _non_negative(entries.get("offset"), "offset") or 0
        length = _non_negative(entries.get("length"), "length")
    except ValueError as err:
        raise InputError(f"{label}: {what}: {err}") from None
    path = contained_file(base_dir, location, label, what)
    sizes = {} if sizes is None else sizes
    if path not in sizes:
        sizes[path] = os.stat(path).st_size
    if length is None:
        length = packed_size(proto.data_type, list(proto.dims)) if proto.data_type != STRING else 0
    if offset + length > sizes[path]:
        raise InputError(
            f"{label}: {what}: the tensor ends at byte {offset + length}, the file has {sizes[path]} bytes"
        )
    return ExternalRef(proto.name, location, path, offset, length)


def external_refs(model_path: Path, model: Any, label: str) -> list[ExternalRef]:
    """Every external tensor of ``model`` (subgraphs too), checked; InputError for the first that breaks a rule."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    base, sizes = Path(model_path).parent, {}
    return [tensor_ref(base, t, label, sizes) for t in _get_all_tensors(model) if uses_external_data(t)]
