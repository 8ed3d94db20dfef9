"""The command line's model and session arguments (--shape, --free-dim, --input,
--session-config, --provider-option) parsed into mappings; InputError, one line, for a bad spec."""

from __future__ import annotations

from harness.core.errors import InputError
from harness.core.units import ascii_int


def parse_shapes(specs: list[str]) -> dict[str, list[int]]:
    """``["x=1x3x224x224"]`` -> ``{"x": [1, 3, 224, 224]}``; InputError on a bad spec."""
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        if name in shapes:
            raise InputError(f"--shape {name}: given twice ({'x'.join(map(str, shapes[name]))} and {dims})")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [ascii_int(d) for d in dims.lower().split("x")]
            if any(d <= 0 for d in shapes[name]):
                raise ValueError
        except ValueError:
            raise InputError(f"--shape {spec!r}: expected NAME=DIMxDIM..., e.g. x=1x3x224x224") from None
    return shapes


def parse_free_dims(specs: list[str]) -> dict[str, int]:
    """``["batch=1"]`` -> ``{"batch": 1}``; InputError on a bad spec."""
    dims = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            dims[name.strip()] = ascii_int(value)
            if dims[name.strip()] < 0:  # 0: an empty KV cache (past_sequence_length=0)
                raise ValueError
        except ValueError:
            raise InputError(f"--free-dim {spec!r}: expected NAME=VALUE with VALUE >= 0, e.g. batch=1") from None
    return dims


def parse_input_values(specs: list[str]) -> dict[str, str]:
    """``["sr=16000", "ids=ids.npy"]`` -> ``{"sr": "16000", "ids": "ids.npy"}``."""
    values = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not name.strip() or not value:
            raise InputError(f"--input {spec!r}: expected NAME=FILE.npy or NAME=VALUE, e.g. sr=16000")
        values[name.strip()] = value
    return values


def parse_key_values(items: list[str], flag: str) -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``; InputError naming ``flag`` otherwise."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise InputError(f"{flag} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out
