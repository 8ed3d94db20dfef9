"""Is a QNN output right? One check for the compile child and every worker (by type, cosine or shape)."""

from __future__ import annotations

from typing import Any

FP16_RESOLUTION = 1e-3  #: Agreement of an output with no direction, relative to max(1, |ref|): fp16 resolves ~1e-3.
MIN_COSINE = 0.99  #: The cosine bound of a compiled float or QDQ model (a --quantize qdq model: `quantize.MIN_COSINE`).


def describe(name: str, result: dict) -> str:
    """One short reason from `ep.compare_outputs`'s result: what was required and what came."""
    if "cosine" not in result:
        return f"{name}: {result.get('reason', 'differs from the reference')}"
    text = f"{name}: cosine {result['cosine']:.3f} (max |diff| {result['max_abs']:.3g}, mean {result['mean_abs']:.3g}"
    if "mean_steps" in result:
        text += f", {result['mean_steps']:.1f} quantization steps on average"
    return text + ")"


def check_compiled_outputs(outputs: list, reference: dict, model: Any) -> tuple[bool, str]:
    """(ok, detail) of one inference of ``model`` on the QNN EP against its reference."""
    from harness.prep.outputs import check_outputs

    unstable = model.nondeterministic
    if model.extra.get("reference_kind") == "qnn-heap":
        return check_outputs(outputs, reference, model.outputs, unstable)
    import numpy as np

    details = []
    min_cosine = model.extra.get("min_cosine", MIN_COSINE)
    for name, got in zip(model.outputs, outputs, strict=False):
        if name in unstable:
            ok, why = check_outputs([got], reference, [name], [name])
            if not ok:
                return False, why
            details.append(why)
            continue
        got, want = np.asarray(got, np.float64), np.asarray(reference[name], np.float64)
        if got.shape != want.shape:
            return False, f"{name}: shape {got.shape} != reference {want.shape}"
        why = _compare_by_cosine(name, got, want, model.extra.get("quant_step"), min_cosine)
        if why is None:
            continue
        if why.startswith("~0"):
            details.append(f"{name}: {why}")
            continue
        return False, f"{why} (required: cosine >= {min_cosine})"
    return True, "; ".join(details)


def _compare_by_cosine(name: str, got: Any, want: Any, quant_step: float | None, min_cosine: float) -> str | None:
    """None when ``got`` agrees with ``want``; "~0 ..." when it agrees only as a ~0 output; else why not."""
    import numpy as np

    from .ep import compare_outputs

    special = ~np.isfinite(got) | ~np.isfinite(want)  # NaN and infinities compare as values, the rest by cosine.
    agree = (np.isnan(got) & np.isnan(want)) | (got == want)
    if np.any(special & ~agree):
        return f"{name}: {int(np.count_nonzero(special & ~agree))} NaN/inf value(s) where the reference differs"
    got, want = got[~special], want[~special]
    if got.size == 0:
        return None
    result = compare_outputs(got, want, quant_step=quant_step, min_cosine=min_cosine)
    if result["ok"]:
        return None
    # An output ~0 everywhere has no direction: within fp16's resolution at its scale it agrees.
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    if quant_step is None and result.get("max_abs", np.inf) <= FP16_RESOLUTION * scale:
        return f"~0 everywhere, max |diff| {result['max_abs']:.3g} within fp16 resolution"
    return describe(name, result)
