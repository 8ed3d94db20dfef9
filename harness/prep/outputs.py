"""Is a worker's output the reference's? Tolerance by element type; an unverifiable reference never passes."""

from __future__ import annotations

from typing import Any

#: dtype name -> (rtol, atol) for floating outputs.
FLOAT_TOLERANCE = {
    "float64": (1e-7, 1e-9),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
    "float8_e4m3fn": (0.125, 0.02),
    "float8_e4m3fnuz": (0.125, 0.02),
    "float8_e5m2": (0.25, 0.04),
    "float8_e5m2fnuz": (0.25, 0.04),
}
QUANTIZED_INTS = {"int8", "uint8", "int4", "uint4", "int2", "uint2"}  #: Quantized integer outputs: one step.


def tolerance(dtype_name: str) -> tuple[float, float] | None:
    """(rtol, atol) for a dtype, None when it must match exactly."""
    if dtype_name in FLOAT_TOLERANCE:
        return FLOAT_TOLERANCE[dtype_name]
    if dtype_name in QUANTIZED_INTS:
        return 0.0, 1.0
    return None


def compare(got: Any, want: Any) -> str:
    """ "" when ``got`` matches ``want``, else one short reason."""
    import numpy as np

    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} != reference {want.shape}"
    if want.dtype == object or got.dtype == object:
        return "" if np.array_equal(got, want) else "strings differ from the reference"
    tol = tolerance(want.dtype.name)
    if tol is None:
        if np.array_equal(got, want):
            return ""
        return f"{int(np.count_nonzero(got != want))} of {want.size} values differ (exact match required)"
    rtol, atol = tol
    a, b = got.astype(np.float64), want.astype(np.float64)
    if np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        return ""
    with np.errstate(invalid="ignore"):  # inf - inf is NaN: a mismatch, counted as infinite below
        diff = np.abs(a - b)
    same = (np.isnan(a) & np.isnan(b)) | (a == b)
    diff[same] = 0.0
    worst = float(np.max(np.where(np.isnan(diff), np.inf, diff)))
    return f"max abs diff {worst:.3g} beyond rtol={rtol:g} atol={atol:g} ({want.dtype.name})"


def _float_kind(array: Any) -> bool:
    import numpy as np

    array = np.asarray(array)
    return array.dtype != object and (array.dtype.kind in "fc" or array.dtype.name in FLOAT_TOLERANCE)


def _all_finite(array: Any) -> bool:
    import numpy as np

    return bool(np.isfinite(np.asarray(array).astype(np.float64)).all())


def _any_finite(array: Any) -> bool:
    import numpy as np

    array = np.asarray(array)
    return array.size > 0 and bool(np.isfinite(array.astype(np.float64)).any())


def nonfinite_problem(feeds: dict[str, Any], outputs: dict[str, Any]) -> str:
    """Why a reference would not verify the weights ("" when it does)."""
    for name, array in feeds.items():
        if _float_kind(array) and not _all_finite(array):
            return f"input {name} holds NaN or infinity: every output would follow it whatever the weights"
    for name, array in outputs.items():
        if _float_kind(array) and not _any_finite(array):
            return f"output {name} is NaN or infinite everywhere: comparing it cannot tell right weights from wrong"
    return ""


def check_outputs(
    outputs: list[Any], reference: dict[str, Any], names: list[str], nondeterministic: list[str] | tuple[str, ...] = ()
) -> tuple[bool, str]:
    """(ok, detail) of every output against the reference; an unverifiable reference is never a pass."""
    import numpy as np

    why = nonfinite_problem({}, {n: reference[n] for n in names if n in reference and n not in nondeterministic})
    if why:
        return False, f"inconclusive: {why}"
    notes = []
    for name, got in zip(names, outputs, strict=False):
        if name in nondeterministic:
            if np.shape(got) != np.shape(reference[name]):
                return False, f"{name}: shape {np.shape(got)} != reference {np.shape(reference[name])}"
            notes.append(f"{name}: not compared (non-deterministic in the reference itself)")
            continue
        why = compare(got, reference[name])
        if why:
            return False, f"{name}: {why}"
    return True, "; ".join(notes)


def nondeterministic_outputs(first: dict[str, Any], second: dict[str, Any]) -> dict[str, str]:
    """Outputs that differ between two runs beyond their dtype's tolerance: name -> how."""
    return {name: why for name in first if (why := compare(second[name], first[name]))}
