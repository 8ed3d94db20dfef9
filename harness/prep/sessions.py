"""The ORT session settings every session of a run shares, mapped and heap alike, and the
reference run with them; plus running a session on feeds of any element type.

Why one place: a reference computed with other options than the workers' sessions is a
different computation. Weight prepacking on in the reference and off in the workers made
MLAS take another SGEMM kernel (packed B vs the M=1 path), whose summation order differs in
the last bits; over a 256-layer fp32 chain those bits grew to 2.8e-05 and every worker was
called wrong. Thread counts change the summation order of parallel reductions the same way.
So the reference gets exactly the workers' settings, and the user's knobs
(``--session-config``, ``--intra-op-threads``) apply to both.
"""

from __future__ import annotations

from typing import Any

from harness.contract.spec import SessionSettings
from harness.core.errors import InputError

#: The session config entry that keeps ORT from copying (prepacking) every weight.
DISABLE_PREPACKING = "session.disable_prepacking"
#: Graph optimization levels by name (what the manifest and the settings record).
LEVELS = ("disabled", "basic", "extended", "all")


def settings_notes(settings: SessionSettings) -> list[str]:
    """What the user's session knobs change about the measurement, in words."""
    notes = []
    if settings.config.get(DISABLE_PREPACKING) == "0":
        notes.append(
            "--session-config session.disable_prepacking=0: ORT prepacks (copies) weights into every "
            "session, mapped or not, so mapping saves less than it could."
        )
    if settings.config or settings.intra_op_threads is not None:
        knobs = [f"{k}={v}" for k, v in settings.config.items()]
        if settings.intra_op_threads is not None:
            knobs.append(f"intra_op_num_threads={settings.intra_op_threads}")
        notes.append(f"Every session of both modes and the reference ran with {', '.join(knobs)}.")
    return notes


def ort_level(name: str) -> Any:
    import onnxruntime as ort

    levels = ort.GraphOptimizationLevel
    return {
        "disabled": levels.ORT_DISABLE_ALL,
        "basic": levels.ORT_ENABLE_BASIC,
        "extended": levels.ORT_ENABLE_EXTENDED,
        "all": levels.ORT_ENABLE_ALL,
    }[name]


def cpu_session_options(settings: SessionSettings | None = None, *, level: str = "all") -> Any:
    """ORT CPU EP session options of every cpu/ort-native session AND of the reference run:
    prepacking off (it would copy every weight, and the mapping would buy nothing), then the
    user's settings. ``level`` is the graph optimization level: "disabled" for a model the
    harness already optimized offline (see `harness.prep.optimize`)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.add_session_config_entry(DISABLE_PREPACKING, "1")
    so.log_severity_level = 2
    so.graph_optimization_level = ort_level(level)
    return (settings or SessionSettings()).apply(so)


# -- running a session on any element type -------------------------------------------------------

#: Element types ORT's Python binding converts to and from numpy itself (float8 comes back as
#: uint8 and is re-viewed).
_NATIVE = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
_FLOAT8 = {17, 18, 19, 20}


def run_session(
    session: Any,
    output_names: list[str],
    feeds: dict[str, Any],
    input_types: dict[str, int],
    output_types: dict[str, int],
) -> list[Any]:
    """Outputs of one run as numpy (or ml_dtypes) arrays, for inputs and outputs of any element
    type ORT supports: bfloat16, float8 and 4-bit values go through OrtValues."""
    import numpy as np

    from .tensors import from_ortvalue, numpy_dtype, to_ortvalue

    inputs = {
        name: value if input_types.get(name, 1) in _NATIVE else to_ortvalue(value, input_types[name])
        for name, value in feeds.items()
    }
    if all(output_types.get(n, 1) in _NATIVE | _FLOAT8 for n in output_names):
        outputs = session.run(output_names, inputs)
        return [
            np.asarray(o).view(numpy_dtype(output_types[n])) if output_types.get(n) in _FLOAT8 else o
            for n, o in zip(output_names, outputs, strict=True)
        ]
    if any(input_types.get(n) == 8 for n in feeds):
        raise ValueError("string inputs together with bfloat16/4-bit outputs cannot be run from Python")
    import onnxruntime as ort

    inputs = {
        n: v if isinstance(v, ort.OrtValue) else ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v))
        for n, v in inputs.items()
    }
    values = session.run_with_ort_values(output_names, inputs)
    return [from_ortvalue(v) for v in values]


#: Provider options the harness sets itself, and why a user may not.
RESERVED_PROVIDER_OPTIONS = {
    "disable_file_mapped_weights": "it is the harness's to set: mapped mode passes 0, heap mode 1",
    "backend_type": "use --backend-type",
}


def check_provider_options(options: dict[str, str]) -> None:
    for key in options:
        if key in RESERVED_PROVIDER_OPTIONS:
            raise InputError(f"--provider-option {key}: {RESERVED_PROVIDER_OPTIONS[key]}")
