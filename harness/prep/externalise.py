"""Externalising: every large initializer moved into the folder's aligned ``weights.bin`` as
the raw bytes ONNX stores (bf16, float8, packed int4...), tensors already external copied file
to file, never loaded whole.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from harness.core.errors import InputError

from .folder import ALIGNMENT, EXTERNAL_THRESHOLD, TensorEntry


def write_aligned(f, data: bytes | memoryview) -> int:
    """Pad ``f`` to the next aligned offset, write ``data``, return where it starts."""
    pad = (-f.tell()) % ALIGNMENT
    if pad:
        f.write(b"\0" * pad)
    offset = f.tell()
    f.write(data)
    return offset


def external_tensor_proto(name: str, onnx_dtype: int, shape: list[int], offset: int, length: int):
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
            proto.CopyFrom(external_tensor_proto(proto.name, proto.data_type, shape, offset, size))
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


def mappable_bytes(model: Any) -> int:
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


def link_external_data(path: Path, graph: Any, folder: Path) -> None:
    """Make ``path``'s external-data files visible from ``folder`` under the same relative
    names, so a rewritten graph saved there still finds its weights without loading them: a
    hard link (no copy), else a copy (another filesystem). Not a symlink: ORT resolves it and
    refuses external data outside the model's folder ("External data path escapes model
    directory")."""
    from harness.core.files import inside
    from harness.prep.containment import external_refs

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
