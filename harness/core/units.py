"""Parsing and printing sizes and durations for people."""

from __future__ import annotations

import re

from harness.core.errors import InputError

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2,
          "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3}


def parse_size(text: str) -> int:
    """``"256MiB"`` -> 268435456. InputError for anything else."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise InputError(f"size {text!r}: expected a number with a unit, e.g. 256MiB or 1GiB")
    value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value <= 0:
        raise InputError(f"size {text!r} must be positive")
    return value


def fmt_bytes(value: float | None) -> str:
    if value is None:
        return "-"
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{sign}{value:.0f} {unit}" if unit == "B" else f"{sign}{value:.1f} {unit}"
        value /= 1024
    return f"{sign}{value:.1f} GiB"


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
