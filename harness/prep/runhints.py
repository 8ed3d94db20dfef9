"""What to change when ORT cannot run a user's model on generated feeds: a hint naming what failed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: ORT's words for an index out of its table's range (Gather, GatherElements, GatherND, ScatterND...).
INDEX_WORDS = ("out of data bounds", "out of bounds", "must be within the inclusive range", "indices element")
#: ORT's words for a spatial size a convolution or pool cannot take.
SHAPE_WORDS = ("Invalid input shape", "kernel", "dilation", "Output dim", "pads")
GENERIC = (
    "if an input needs real values, e.g. a sample rate or token ids, give them with --input NAME=FILE.npy or "
    "--input NAME=VALUE"
)


def run_hint(error: str, session: Any, model: Any, feeds: dict, run_path: Path) -> str:
    """The hint for ORT's ``error`` running ``session`` (None: it did not load) on ``feeds``."""
    if session is not None and any(w in error for w in INDEX_WORDS):
        named = _index_inputs(session, model, feeds)
        if named:
            fixes = " ".join(f"--input {n}=0" for n in named)
            return (
                f"input(s) {', '.join(named)} index a table and the generated values (0/1) run past it: "
                f"{fixes} runs the model; give their real values with --input NAME=FILE.npy"
            )
    if any(w in error for w in SHAPE_WORDS):
        size = _spatial(run_path)
        if size:
            return (
                f"the input sizes are too small for its convolutions: {size} is the smallest size their kernels "
                "and strides take (set it with --shape or --free-dim)"
            )
    return GENERIC


def _index_inputs(session: Any, model: Any, feeds: dict) -> list[str]:
    """Integer inputs whose zeros make ``session`` run: one at a time, else all at once."""
    import numpy as np

    from .sessions import run_session

    ints = [n for n, v in feeds.items() if np.asarray(v).dtype.kind in "iu"]

    def runs(zeroed: list[str]) -> bool:
        trial = {n: (np.zeros_like(v) if n in zeroed else v) for n, v in feeds.items()}
        try:
            run_session(session, model.outputs, trial, model.input_types, model.output_types)
        except Exception:  # ORT raises its own types: this trial failed too
            return False
        return True

    for name in ints:
        if runs([name]):
            return [name]
    return ints if ints and runs(ints) else []


def _spatial(run_path: Path) -> int | None:
    from .inputs import model_inputs
    from .onnxfile import load_onnx
    from .shapehints import spatial_size

    try:
        graph = load_onnx(run_path, external_data=False)
    except Exception:  # the hint is best effort; the error itself is already known
        return None
    dynamic = [(i, i.dims) for i in model_inputs(graph) if i.dims and len(i.dims) >= 3]
    return spatial_size(graph, dynamic)
