"""ONNX element types as raw bytes (``raw_data``, never re-encoded) and OrtValues over a buffer in place."""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any

from harness.core.errors import InputError


@dataclass(frozen=True)
class ElementType:
    onnx: int  # TensorProto.DataType value
    name: str  # numpy / ml_dtypes name, e.g. "float32", "bfloat16", "int4"
    bits: int  # storage bits per element (0 for strings)

    @property
    def itemsize(self) -> int:
        """Bytes of one element of the numpy view (1 for sub-byte types)."""
        return max(1, self.bits // 8)

    @property
    def view_dtype(self) -> str:
        """The unsigned numpy dtype an in-place view of this type is made of."""
        return f"u{self.itemsize}"


#: Every element type that can hold weights (ORT's CPU EP refuses some at load; their sizes stay right).
ELEMENT_TYPES: dict[int, ElementType] = {
    t.onnx: t
    for t in (
        ElementType(1, "float32", 32),
        ElementType(2, "uint8", 8),
        ElementType(3, "int8", 8),
        ElementType(4, "uint16", 16),
        ElementType(5, "int16", 16),
        ElementType(6, "int32", 32),
        ElementType(7, "int64", 64),
        ElementType(8, "str", 0),
        ElementType(9, "bool", 8),
        ElementType(10, "float16", 16),
        ElementType(11, "float64", 64),
        ElementType(12, "uint32", 32),
        ElementType(13, "uint64", 64),
        ElementType(14, "complex64", 64),
        ElementType(15, "complex128", 128),
        ElementType(16, "bfloat16", 16),
        ElementType(17, "float8_e4m3fn", 8),
        ElementType(18, "float8_e4m3fnuz", 8),
        ElementType(19, "float8_e5m2", 8),
        ElementType(20, "float8_e5m2fnuz", 8),
        ElementType(21, "uint4", 4),
        ElementType(22, "int4", 4),
        ElementType(23, "float4_e2m1fn", 4),
        ElementType(24, "float8_e8m0fnu", 8),
        ElementType(25, "uint2", 2),
        ElementType(26, "int2", 2),
        ElementType(27, "float6_e2m3fn", 6),
        ElementType(28, "float6_e3m2fn", 6),
    )
}
STRING = 8


def element_type(onnx_type: int) -> ElementType:
    try:
        return ELEMENT_TYPES[onnx_type]
    except KeyError:
        raise InputError(f"ONNX element type {onnx_type} is not one the harness knows") from None


def numel(shape: list[int] | tuple[int, ...]) -> int:
    return math.prod(shape) if shape else 1


def packed_size(onnx_type: int, shape: list[int] | tuple[int, ...]) -> int:
    """Bytes the tensor's data takes in ONNX (and ORT) storage: sub-byte types are packed."""
    return math.ceil(numel(shape) * element_type(onnx_type).bits / 8)


def view_extent(onnx_type: int, shape: list[int] | tuple[int, ...]) -> int:
    """Bytes an in-place numpy view of the tensor spans (more than its data for sub-byte types)."""
    return numel(shape) * element_type(onnx_type).itemsize


def raw_bytes(proto: Any) -> bytes:
    """The tensor's data in ONNX's raw layout (external data loaded); ValueError for strings."""
    from onnx import numpy_helper

    if proto.data_type == STRING:
        raise ValueError(f"{proto.name}: string tensors have no raw byte layout")
    if proto.HasField("raw_data"):
        data = proto.raw_data
    else:  # typed fields (float_data, int32_data...): let onnx encode them, packing included
        data = numpy_helper.from_array(numpy_helper.to_array(proto), proto.name).raw_data
    want = packed_size(proto.data_type, list(proto.dims))
    if len(data) != want:
        raise ValueError(
            f"{proto.name}: {len(data)} bytes of data for {list(proto.dims)} "
            f"{element_type(proto.data_type).name} (expected {want})"
        )
    return data


def ortvalue_over(buffer: Any, onnx_type: int, shape: list[int], offset: int) -> Any:
    """An OrtValue of ``onnx_type`` and ``shape`` over ``buffer[offset:]`` without a copy."""
    import numpy as np
    import onnxruntime as ort

    et = element_type(onnx_type)
    view = np.frombuffer(buffer, dtype=et.view_dtype, count=numel(shape), offset=offset).reshape(shape)
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(view, onnx_type)


def ortvalues_over(tensors: list, views: list, whole: Any, add: Any = None) -> list:
    """`ortvalue_over` for every tensor in one pass (inside the timed load), each given to ``add`` when set."""
    import numpy as np
    import onnxruntime as ort

    make, wrap = ort.capi._pybind_state.OrtValue.ortvalue_from_numpy_with_onnx_type, ort.OrtValue
    ndarray, prod = np.ndarray, math.prod
    kinds: dict[int, tuple[Any, int, bool]] = {}  # onnx type -> (view dtype, item size, sub-byte)
    values = []
    for t, view in zip(tensors, views, strict=True):
        kind = kinds.get(t.onnx_type)
        if kind is None:
            et = element_type(t.onnx_type)
            kind = kinds[t.onnx_type] = (np.dtype(et.view_dtype), et.itemsize, et.bits < 8)
        dtype, itemsize, sub_byte = kind
        if not sub_byte and prod(t.shape) * itemsize == t.length:
            array = ndarray(t.shape, dtype, view)
        else:  # sub-byte types: ORT reads only the region of the one-byte-per-element view
            array = ndarray(t.shape, dtype, whole, t.offset)
        value = wrap(make(array, t.onnx_type), array)  # what OrtValue.ortvalue_from_numpy_with_onnx_type does
        if add is not None:
            add(t.name, value)
        values.append(value)
    return values


def warm_numpy_binding() -> None:
    """Run the binding's one-time numpy set-up now, with the imports, not in a timed load."""
    import numpy as np
    import onnxruntime as ort

    ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.zeros(1, np.uint8), 2)


def numpy_dtype(onnx_type: int) -> Any:
    """The numpy (or ml_dtypes) dtype holding values of ``onnx_type``, one element per item."""
    import numpy as np

    name = element_type(onnx_type).name
    if name == "str":
        return np.dtype(object)
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))


def _pack(values: Any, bits: int) -> Any:
    """Pack one-element-per-byte sub-byte values, lowest bits first (ONNX's layout)."""
    import numpy as np

    per_byte = 8 // bits
    codes = values.ravel().view(np.uint8) & ((1 << bits) - 1)
    codes = np.concatenate([codes, np.zeros((-codes.size) % per_byte, np.uint8)])
    grouped = codes.reshape(-1, per_byte).astype(np.uint8)
    return np.bitwise_or.reduce(grouped << (np.arange(per_byte, dtype=np.uint8) * bits), axis=1).astype(np.uint8)


def _unpack(data: bytes, onnx_type: int, count: int) -> Any:
    import numpy as np

    et = element_type(onnx_type)
    per_byte = 8 // et.bits
    codes = np.frombuffer(data, np.uint8)[:, None] >> (np.arange(per_byte, dtype=np.uint8) * et.bits)
    codes = (codes & ((1 << et.bits) - 1)).ravel()[:count].astype(np.uint8)
    return codes.view(numpy_dtype(onnx_type))  # ml_dtypes' 4-/2-bit types are one byte, low bits used


def to_ortvalue(array: Any, onnx_type: int) -> Any:
    """An OrtValue for a feed of any type (strings excepted: ORT takes those as numpy)."""
    import numpy as np
    import onnxruntime as ort

    et = element_type(onnx_type)
    array = np.ascontiguousarray(array)
    if et.bits < 8:
        packed = _pack(array, et.bits)
        view = np.zeros(max(array.size, 1), np.uint8)
        view[: packed.size] = packed
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(view[: array.size].reshape(array.shape), onnx_type)
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(et.view_dtype), onnx_type)


def from_ortvalue(value: Any) -> Any:
    """A numpy (or ml_dtypes) array with a copy of an OrtValue's data, whatever its type."""
    import numpy as np

    onnx_type = value.element_type()
    shape = value.shape()
    if onnx_type == STRING:
        return value.numpy()
    data = ctypes.string_at(value.data_ptr(), value.tensor_size_in_bytes()) if value.tensor_size_in_bytes() else b""
    if element_type(onnx_type).bits < 8:
        return _unpack(data, onnx_type, numel(shape)).reshape(shape)
    return np.frombuffer(data, dtype=numpy_dtype(onnx_type)).reshape(shape).copy()
