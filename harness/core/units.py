"""Parsing and printing sizes and durations for people.

Sizes: binary units are KiB, MiB, GiB, TiB (powers of 1024, what memory and file sizes are
counted in); decimal units are KB, MB, GB, TB (powers of 1000, what disk vendors print). A bare
number is bytes (``B`` may be written). The one-letter forms ``K``, ``M``, ``G``, ``T`` are
refused: ``256M`` means 256 x 1024**2 to some tools (dd, Docker) and 256 x 1000**2 to others
(Kubernetes, SI), and a 5 % error in the weights size would silently shift every ratio gate.
Units are case-insensitive (``256mib`` = ``256MiB``).
"""

from __future__ import annotations

import re

from harness.core.errors import InputError

BINARY_UNITS = {"kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
DECIMAL_UNITS = {"kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4}
_UNITS = {"": 1, "b": 1, **BINARY_UNITS, **DECIMAL_UNITS}
_AMBIGUOUS = {"k": "K", "m": "M", "g": "G", "t": "T"}
#: One line for --help texts.
SIZE_HELP = "sizes: KiB MiB GiB TiB = powers of 1024, KB MB GB TB = powers of 1000"


def ascii_int(text: str) -> int:
    """``int(text)`` for ASCII digits only: Python's own ``int`` also takes fullwidth digits
    (``"１２"``), Arabic-Indic digits and underscores, none of which a size or count typed on a
    command line should silently become. ValueError otherwise."""
    if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", text, re.ASCII):
        raise ValueError(f"{text!r} is not a whole number in ASCII digits")
    return int(text)


def ascii_float(text: str) -> float:
    """``float(text)`` for ASCII text only (see `ascii_int`). ValueError otherwise."""
    if not text.isascii() or "_" in text:
        raise ValueError(f"{text!r} is not a number in ASCII digits")
    return float(text)


def parse_size(text: str) -> int:
    """``"256MiB"`` -> 268435456, ``"1GB"`` -> 1000000000. InputError for anything else,
    including the ambiguous ``"256M"``."""
    if text.strip().startswith("-"):
        raise InputError(f"size {text!r} must be positive")
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text, re.ASCII)  # ASCII digits only
    unit = match.group(2).lower() if match else ""
    if match and unit in _AMBIGUOUS:
        letter = _AMBIGUOUS[unit]
        number = match.group(1)
        raise InputError(
            f"size {text!r} is ambiguous: write {number}{letter}iB (binary, 1024-based) "
            f"or {number}{letter}B (decimal, 1000-based)"
        )
    if not match or unit not in _UNITS:
        raise InputError(f"size {text!r}: expected a number with a unit, e.g. 256MiB or 1GiB ({SIZE_HELP})")
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise InputError(f"size {text!r} must be positive")
    return value


def plural(count: int, one: str, many: str) -> str:
    """``1 entry``, ``2 entries``, ``0 entries``: the count with the word that fits it."""
    return f"{count} {one if count == 1 else many}"


def fmt_bytes(value: float | None) -> str:
    """Binary units, one decimal: ``268435456`` -> ``"256.0 MiB"``."""
    if value is None:
        return "-"
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{sign}{value:.0f} {unit}" if unit == "B" else f"{sign}{value:.1f} {unit}"
        value /= 1024
    return f"{sign}{value:.1f} TiB"  # pragma: no cover - the loop always returns


def fmt_size_arg(value: int) -> str:
    """A byte count as the shortest exact binary size argument: 268435456 -> ``"256MiB"``."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value % factor == 0:
            return f"{value // factor}{unit}"
    return str(value)


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def fmt_percent(value: float | None, *, signed: bool = False) -> str:
    """0.42 -> ``"42%"`` (``"+42%"`` when signed)."""
    if value is None:
        return "-"
    percent = value * 100
    if signed:
        return "+0.0%" if round(percent, 1) == 0 else f"{percent:+.1f}%"
    return "0%" if round(percent) == 0 else f"{percent:.0f}%"


def fmt_value(value: float | None, unit: str, *, signed: bool = False) -> str:
    """A figure in its schema unit (bytes, s, count/s; else a ratio), "-" when not measured."""
    if value is None:
        return "-"
    sign = "+" if signed and value > 0 else ""
    if unit == "bytes":
        return sign + fmt_bytes(value)
    if unit == "s":
        return sign + fmt_seconds(value) if value >= 0 else "-" + fmt_seconds(-value)
    if unit == "count/s":
        return f"{value:+.1f}/s" if signed else f"{value:.1f}/s"
    return f"{value:+.3f}" if signed else fmt_ratio(value)


def parse_projection(text: str) -> tuple[int, int]:
    """``"8x4GiB"`` -> (8 sessions, 4 GiB of weights): the deployment a report projects to."""
    sessions, sep, size = text.strip().partition("x")
    if not sep or not re.fullmatch(r"[0-9]+", sessions.strip()) or int(sessions) < 1:
        raise InputError(f"{text!r}: expected SESSIONSxSIZE, e.g. 8x4GiB")
    return int(sessions), parse_size(size)
