"""Pre-compiled EPContext models: what device users actually hold (a ``*_ctx.onnx`` plus its
``*_qnn.bin``, from a model hub or an LLM pipeline).

An EPContext node (domain com.microsoft) carries the compiled graph: with ``embed_mode`` 1 the
context bytes are inside the ONNX file (attribute ``ep_cache_context``); with 0 that attribute
is the path of a context binary relative to the model's folder. Several nodes, and several
models of a pipeline, may name the same binary (weight sharing, ``main_context`` 0 on all but
one). The binaries are the weights: their bytes are what mapping saves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.files import contained_file, real_path

EPCONTEXT_OP = "EPContext"


def epcontext_nodes(model: Any) -> list[Any]:
    return [n for n in model.graph.node if n.op_type == EPCONTEXT_OP]


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


@dataclass
class EpContextModel:
    path: Path
    nodes: int
    embedded_bytes: int  # context bytes inside the ONNX file (embed_mode 1)
    bins: list[Path] = field(default_factory=list)  # context binaries it names, resolved, in order
    shares_context: bool = False  # a node with main_context 0: its context lives in another node's binary
    other_ops: list[str] = field(default_factory=list)  # nodes left to other EPs (a partial compile)
    sources: list[str] = field(default_factory=list)  # the EPs that made the contexts ("source" attribute)

    @property
    def context_bytes(self) -> int:
        return self.embedded_bytes + sum(b.stat().st_size for b in self.bins)


def inspect_epcontext(path: Path, model: Any, label: str) -> EpContextModel:
    """What an EPContext model needs; InputError naming a context binary that is missing."""
    info = EpContextModel(real_path(path), 0, 0)  # the workers load it from another folder
    for node in model.graph.node:
        if node.op_type != EPCONTEXT_OP:
            info.other_ops.append(node.op_type)
            continue
        info.nodes += 1
        attrs = _attrs(node)
        blob = attrs.get("ep_cache_context", b"")
        source = attrs.get("source", b"")
        source = source.decode(errors="replace") if isinstance(source, bytes) else str(source)
        if source and source not in info.sources:
            info.sources.append(source)
        if attrs.get("main_context", 1) == 0:
            info.shares_context = True
        if attrs.get("embed_mode", 1) == 1:
            info.embedded_bytes += len(blob)
            continue
        name = blob.decode(errors="replace") if isinstance(blob, bytes) else str(blob)
        if not name:
            continue
        bin_path = contained_file(
            Path(path).parent, name, label, f"context binary {name!r} named by EPContext node {node.name!r}"
        )
        if bin_path not in info.bins:
            info.bins.append(bin_path)
    return info
