"""A model's graphs: walking them, lifting Constant nodes, unique initializer names (ORT binds by name)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_DENSE_VALUE = "value"  #: Constant attributes holding something other than one dense tensor: small, left as they are.


def subgraphs(node: Any) -> Iterator[Any]:
    """The graphs held in a node's attributes (If branches, Loop/Scan bodies)."""
    from onnx import AttributeProto

    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == AttributeProto.GRAPHS:
            yield from attr.graphs


def all_graphs(graph: Any) -> Iterator[Any]:
    """``graph`` and every graph nested in it, outer before inner."""
    yield graph
    for node in graph.node:
        for sub in subgraphs(node):
            yield from all_graphs(sub)


def initializers(model: Any) -> Iterator[tuple[Any, Any]]:
    """(graph, initializer) for every initializer of the model, subgraphs included."""
    for graph in all_graphs(model.graph):
        for init in graph.initializer:
            yield graph, init


def _declared(graph: Any) -> set[str]:
    """Names a graph itself defines: inputs, initializers, node outputs."""
    names = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    for node in graph.node:
        names.update(o for o in node.output if o)
    return names


def lift_constants(model: Any, min_bytes: int) -> int:
    """Turn Constant nodes of at least ``min_bytes`` into initializers of their graph; returns how many."""
    from .tensors import STRING, packed_size

    lifted = 0
    for graph in all_graphs(model.graph):
        keep = []
        for node in graph.node:
            value = (
                next((a.t for a in node.attribute if a.name == _DENSE_VALUE), None)
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx")
                else None
            )
            if value is None or value.data_type == STRING or packed_size(value.data_type, list(value.dims)) < min_bytes:
                keep.append(node)
                continue
            tensor = graph.initializer.add()
            tensor.CopyFrom(value)
            tensor.name = node.output[0]
            lifted += 1
        if len(keep) != len(graph.node):
            del graph.node[:]
            graph.node.extend(keep)
    return lifted


def _rename_in_scope(graph: Any, old: str, new: str) -> None:
    """Every use of ``old`` in ``graph`` and the nested graphs that can see it."""
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for sub in subgraphs(node):
            if old not in _declared(sub):
                _rename_in_scope(sub, old, new)
    for out in graph.output:
        if out.name == old:
            out.name = new
    for vi in graph.value_info:
        if vi.name == old:
            vi.name = new


def unique_initializer_names(model: Any) -> int:
    """Rename subgraph initializers whose name another tensor uses; returns how many."""
    taken: set[str] = set()
    for graph in all_graphs(model.graph):
        taken |= _declared(graph)
    seen: set[str] = set()
    renamed = 0
    for index, graph in enumerate(all_graphs(model.graph)):
        is_main = index == 0  # all_graphs yields the main graph first
        for init in graph.initializer:
            if init.name not in seen or is_main:
                seen.add(init.name)
                continue
            k = 1
            while f"{init.name}__{k}" in taken:
                k += 1
            new = f"{init.name}__{k}"
            old = init.name
            init.name = new
            _rename_in_scope(graph, old, new)
            taken.add(new)
            seen.add(new)
            renamed += 1
    return renamed


def refuse_duplicate_initializers(model: Any, label: str) -> None:
    """InputError when one graph declares two initializers of the same name."""
    from harness.core.errors import InputError

    for graph in all_graphs(model.graph):
        seen: set[str] = set()
        for init in graph.initializer:
            if init.name in seen:
                where = "the main graph" if graph is model.graph else f"subgraph {graph.name!r}"
                raise InputError(
                    f"{label}: two initializers named {init.name!r} in {where}; ONNX requires unique names"
                )
            seen.add(init.name)


def _value_names(graph: Any) -> Iterator[tuple[str, Any]]:
    """(what, value) of every text field of one graph the harness reads."""
    yield "a graph name", graph.name
    for kind, values in (("an input", graph.input), ("an output", graph.output), ("a value", graph.value_info)):
        for value in values:
            yield f"{kind} name", value.name
    for init in graph.initializer:
        yield "an initializer name", init.name
        for entry in init.external_data:
            yield "an external-data entry", entry.key
            yield "an external-data entry", entry.value
    for node in graph.node:
        yield "a node name", node.name
        yield "an operator name", node.op_type
        yield "an operator domain", node.domain
        for name in (*node.input, *node.output):
            yield "a node input or output name", name
        for attr in node.attribute:
            yield "an attribute name", attr.name
            if attr.type == 4:  # TENSOR (a Constant's value): its name and external data
                yield "a tensor name", attr.t.name


def refuse_non_text_names(model: Any, label: str) -> None:
    """InputError when a name of the model is not UTF-8 text (the message names the kind, never the bytes)."""
    from harness.core.errors import InputError

    for graph in all_graphs(model.graph):
        for what, value in _value_names(graph):
            if not isinstance(value, str):
                raise InputError(f"{label}: {what} is not UTF-8 text; ONNX names must be")
