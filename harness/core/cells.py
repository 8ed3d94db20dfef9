"""Which values a cell of a run's tables may hold: the one range and choice check every reader applies."""

from __future__ import annotations

import functools
from dataclasses import fields
from typing import Any

from .schema import SummaryRow
from .vocab import DISABLE_FLAGS, EpState, Mode, PageCache, PathTaken, PeakPhase, Start

MAX_BYTES = 2**50  #: The largest byte figure a cell may hold (1 PiB): a larger one is corruption or forgery.
MAX_SECONDS = 7 * 24 * 3600.0  #: The longest time a cell may hold (one week): workers are killed long before.
MAX_COUNT = 2**31  #: The largest count or index a cell may hold (processes, sessions, repeats, runs, pids).
#: Columns whose figures may be negative: a change of available memory, a signal's exit code.
SIGNED_COLUMNS = frozenset({"system_delta_bytes", "system_noise_bytes", "exit_code"})
AT_LEAST_ONE = frozenset({"processes", "sessions_per_process"})  #: Columns that must be at least 1.
#: Text columns with a closed set of values ('|'-joined in a summary row).
CHOICES: dict[str, tuple[str, ...]] = {
    "mode": Mode.values(),
    "disable_file_mapped_weights": tuple(DISABLE_FLAGS.values()),
    "path_taken": PathTaken.values(),
    "page_cache": PageCache.values(),
    "ep_file_mapping": EpState.values(),
    "peak_phase": PeakPhase.values(),
    "start": Start.values(),
}


def _number_problem(name: str, unit: str, value: float | int) -> str | None:
    """Why a numeric value cannot be a figure of its column (None: it can)."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    low = -MAX_BYTES if name in SIGNED_COLUMNS and unit == "bytes" else 0
    if name == "exit_code":
        low = -255
    if name in AT_LEAST_ONE:
        low = 1
    high = {"bytes": MAX_BYTES, "s": MAX_SECONDS}.get(unit, MAX_COUNT)
    if name == "exit_code":
        high = 255
    if not low <= value < high:
        return f"{value!r} is outside {low}..{high:g}"
    return None


@functools.cache
def _column_meta(row_type: type) -> dict[str, Any]:
    """name -> metadata of every column of ``row_type``, built once (per cell it took minutes on 100 000 rows)."""
    return {f.name: f.metadata for f in fields(row_type)}


def cell_problem(row_type: type, name: str, value: Any) -> str | None:
    """Why ``value`` cannot be the ``name`` cell of a ``row_type`` row (None: it can; empty always can)."""
    meta = _column_meta(row_type).get(name)
    if meta is None or value is None:
        return None
    if meta["dtype"] in ("Int64", "Float64"):
        return _number_problem(name, meta["unit"], value)
    allowed = CHOICES.get(name)
    if allowed is not None and meta["dtype"] == "string":
        parts = str(value).split("|") if row_type is SummaryRow else [str(value)]
        bad = [p for p in parts if p not in allowed]
        if bad:
            return f"a {len(bad[0])}-character value that is not one of {', '.join(allowed)}"
    return None
