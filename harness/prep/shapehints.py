"""Values the dynamic-shape error suggests: ones that can work (checked by ONNX's inference), or placeholders."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

WINDOW_OPS = ("Conv", "MaxPool", "AveragePool", "LpPool", "ConvInteger", "QLinearConv")  #: Ops shrinking spatial axes.
#: Ops after which a tensor has no spatial size that depends on the input's any more.
STOP_OPS = ("GlobalAveragePool", "GlobalMaxPool", "Reshape", "Flatten", "Gemm", "MatMul", "Shape", "Size")
TRIES = 4  #: Multiples of the total stride tried when the first suggestion does not pass the check.


@dataclass(frozen=True)
class Suggestion:
    value: int
    why: str  # "batch", "fits" (kernels and strides, checked) or "placeholder"


@dataclass(frozen=True)
class _Size:
    """A tensor's spatial size as a function of the input's X: about (X - offset) / stride."""

    offset: float
    stride: float


class _Walk:
    """The graph walked from the inputs: each tensor's `_Size`, the smallest ``need`` and largest ``stride``."""

    def __init__(self, model: Any, inputs: set[str]) -> None:
        self.inits = {t.name: t for t in model.graph.initializer}
        self.sizes = {name: _Size(0.0, 1.0) for name in inputs}
        self.need, self.stride = 1.0, 1.0
        for node in model.graph.node:
            self._visit(node)

    def _visit(self, node: Any) -> None:
        tracked = [self.sizes[n] for n in node.input if n in self.sizes]
        if not tracked or node.op_type in STOP_OPS:
            return
        size = _Size(max(s.offset for s in tracked), max(s.stride for s in tracked))
        if node.op_type in WINDOW_OPS:
            size = self._window(node, size)
        elif node.op_type == "ConvTranspose":
            size = _Size(size.offset, size.stride / max(self._ints(node, "strides", [1])))
        elif node.op_type in ("Resize", "Upsample"):
            scale = self._scale(node)
            if scale is None:
                return  # sized by a fixed "sizes" input, or unknown: no longer the input's
            size = _Size(size.offset, size.stride / scale)
        self.stride = max(self.stride, size.stride)
        for out in node.output:
            self.sizes[out] = size

    def _ints(self, node: Any, name: str, default: list[int]) -> list[int]:
        return next((list(a.ints) for a in node.attribute if a.name == name), default)

    def _window(self, node: Any, size: _Size) -> _Size:
        kernel = self._ints(node, "kernel_shape", [])
        if not kernel and len(node.input) > 1 and node.input[1] in self.inits:
            kernel = list(self.inits[node.input[1]].dims[2:])
        rank = len(kernel) or 1
        strides = self._ints(node, "strides", [1] * rank)
        dilations = self._ints(node, "dilations", [1] * rank)
        pads = self._ints(node, "pads", [0] * 2 * rank)
        same = any(a.name == "auto_pad" and a.s.startswith(b"SAME") for a in node.attribute)
        worst = 0.0
        for axis, k in enumerate(kernel or [1]):
            span = dilations[axis] * (k - 1) + 1
            padding = span - 1 if same else pads[axis] + pads[axis + rank]
            self.need = max(self.need, size.offset + size.stride * max(span - padding, 1))
            worst = max(worst, span - padding - strides[axis])
        step = max(strides or [1])
        return _Size(size.offset + size.stride * max(worst, 0.0), size.stride * step)

    def _scale(self, node: Any) -> float | None:
        from onnx import numpy_helper

        names = node.input[2:3] if node.op_type == "Resize" else node.input[1:2]
        for name in names:
            if name in self.inits:
                values = [float(v) for v in numpy_helper.to_array(self.inits[name]).ravel()[2:]]
                return max(values) if values and max(values) > 0 else None
        return None


def spatial_size(model: Any, dynamic: list) -> int | None:
    """The smallest spatial size the windows take (a multiple of the total stride) that inference accepts."""
    names = {info.name for info, dims in dynamic if dims is not None and len(dims) >= 3}
    walk = _Walk(model, names)
    if walk.need <= 1 and walk.stride <= 1:
        return None
    stride = max(1, round(walk.stride))
    first = max(1, math.ceil(walk.need / stride)) * stride
    for value in range(first, first + TRIES * stride, stride):
        if _checks(model, dynamic, value):
            return value
    return None


def _checks(model: Any, dynamic: list, value: int) -> bool:
    from onnx.shape_inference import infer_shapes

    shapes = {info.name: [_fill(d, axis, value) for axis, d in enumerate(dims)] for info, dims in dynamic if dims}
    try:
        infer_shapes(fixed_shape_copy(model, shapes), check_type=True, strict_mode=True, data_prop=True)
    except Exception:  # onnx raises its own error types for any inconsistency
        return False
    return True


def _fill(dim: int | str, axis: int, value: int) -> int:
    if isinstance(dim, int):
        return dim
    return 1 if axis == 0 else value


def suggestions(model: Any | None, dynamic: list) -> dict[tuple[str, int], Suggestion]:
    """(input, axis) -> the value suggested for each dynamic dimension, and why."""
    size = spatial_size(model, dynamic) if model is not None else None
    out = {}
    for info, dims in dynamic:
        for axis, d in enumerate(dims or []):
            if isinstance(d, int):
                continue
            if axis == 0:
                out[(info.name, axis)] = Suggestion(1, "batch")
            elif size is not None and len(dims) >= 3:
                out[(info.name, axis)] = Suggestion(size, "fits")
            else:
                out[(info.name, axis)] = Suggestion(1, "placeholder")
    return out


def fixed_shape_copy(model: Any, shapes: dict[str, list[int]]) -> Any:
    """A copy of ``model`` whose inputs declare ``shapes``; the weights stay where they are."""
    from onnx import ModelProto

    fixed = ModelProto()
    fixed.CopyFrom(model)
    for vi in fixed.graph.input:
        if vi.name not in shapes:
            continue
        shape = vi.type.tensor_type.shape
        shape.ClearField("dim")
        for v in shapes[vi.name]:
            shape.dim.add().dim_value = v
    return fixed
