"""The one rule for every path a model names: inside the model's own folder, checked first.

A model is untrusted input. Its external-data ``location``, an EPContext node's
``ep_cache_context`` (``embed_mode`` 0), the ``filename`` values of a ``genai_config.json``:
each is a path the model's author chose. Before the harness opens, stats, hashes, links or
copies anything they name, `contained` (`harness.core.files`) applies ONNX Runtime's own
external-data rule:

- the name is relative (no ``/etc/passwd``, no ``C:\\...``, no ``\\\\server\\share``);
- resolved against the model's folder, symbolic links followed, it stays inside that folder
  (no ``../`` climbing out, no link pointing out);
- what it names is a regular file (no FIFO, device or folder: see `harness.core.inputfiles`).

`external_refs` also checks each external tensor's ``offset`` and ``length`` (integers, not
negative, inside the file) so no later step reads past an end or seeks to ``-4096``. A model
breaking any rule is refused with one `InputError` line before any work, and so nothing a
model names can make the preparation write outside the cache, the run folder or the system
temp folder: every file the preparation writes is under a folder of ours, at a name that
`contained` has checked against that folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import InputError
from harness.core.files import contained_file


@dataclass(frozen=True)
class ExternalRef:
    """One tensor's external data, checked: a file inside the model's folder and a byte range
    inside that file."""

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
    """Every external tensor of ``model`` (subgraphs included), checked against the rules of
    the module docstring; InputError, one line, for the first that breaks one."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    base, sizes = Path(model_path).parent, {}
    return [tensor_ref(base, t, label, sizes) for t in _get_all_tensors(model) if uses_external_data(t)]
