"""``--quantize qdq``: a float model prepared for the HTP as ORT's QNN documentation prepares it,
before the compile: ``qnn_preprocess_model`` (ORT's fusions and cleanups for QNN), then
``quantize_static`` with ``get_qnn_qdq_config`` (uint8 activations and weights, MinMax), calibrated
on inputs made like the reference input (the given values kept, the rest seeded).

The calibration set never contains the reference input itself: the output check of the quantized
model against the float model's CPU output is then a fair one, made with `MIN_COSINE`
(quantization to uint8 moves every activation by up to half a step, so the cosine bound of an
unquantized compile, 0.99, is too tight for a deep float network).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.argtypes import positive_int
from harness.core.errors import InputError

QUANTIZE_CHOICES = ("none", "qdq")
#: Calibration inputs made by default (each one inference of the float model on the CPU EP).
CALIBRATION_SIZE = 8
#: Cosine similarity a quantized model's output must reach against the float reference.
MIN_COSINE = 0.95


@dataclass(frozen=True)
class QuantizeSpec:
    """What ``--quantize`` and ``--calibration-size`` asked for (part of the cache key)."""

    method: str = "none"
    calibration_size: int = CALIBRATION_SIZE

    @property
    def enabled(self) -> bool:
        return self.method != "none"

    def key(self) -> dict[str, Any]:
        return {"quantize": self.method, "calibration": self.calibration_size} if self.enabled else {}


#: --calibration-size: a whole number >= 1 (the command line's own integer type).
parse_calibration_size = positive_int


def parse_quantize(text: str) -> str:
    if text not in QUANTIZE_CHOICES:
        raise ValueError(f"methods are {','.join(QUANTIZE_CHOICES)}")
    return text


class _Feeds:
    """An onnxruntime CalibrationDataReader over a list of feed dicts."""

    def __init__(self, feeds: list[dict[str, Any]]) -> None:
        self._it = iter(feeds)

    def get_next(self) -> dict[str, Any] | None:
        return next(self._it, None)


def quantize_qdq(src: Path, dst: Path, calibration: list[dict[str, Any]], label: str) -> Path:
    """Write the QDQ model of ``src`` to ``dst`` (its folder also gets the preprocessed model);
    every failure of ORT's tools is one InputError naming the user's model."""
    from onnxruntime.quantization import quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config, qnn_preprocess_model

    pre = dst.with_name(dst.stem + "_preprocessed.onnx")
    try:
        if not qnn_preprocess_model(str(src), str(pre)):
            pre = Path(src)  # nothing to change: quantize the model as it is
        config = get_qnn_qdq_config(str(pre), _Feeds(calibration))
        quantize(str(pre), str(dst), config)
    except Exception as err:  # ORT's quantization tools raise anything from onnx to numpy errors
        from harness.prep.onnxfile import ort_reason

        raise InputError(f"{label}: --quantize qdq failed: {type(err).__name__}: {ort_reason(err)}") from None
    return dst


def calibration_feeds(inputs: list, shapes: dict, feeds: dict, given: set[str], size: int) -> list[dict]:
    """``size`` feed dicts like the reference ``feeds``: given inputs as they are, the others
    drawn with other seeds than the reference input's."""
    from harness.prep.inputs import SEED, generate_feeds

    fixed = {name: feeds[name] for name in given}
    return [generate_feeds(inputs, shapes, fixed, seed=SEED + 1 + k) for k in range(size)]
