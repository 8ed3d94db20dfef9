"""``--quantize qdq``: ``qnn_preprocess_model`` then ``quantize_static`` (uint8, MinMax), as ORT's QNN docs do."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.argtypes import positive_int
from harness.core.errors import InputError

QUANTIZE_CHOICES = ("none", "qdq")
CALIBRATION_SIZE = 8  #: Calibration inputs made by default (each one inference of the float model on the CPU EP).
MIN_COSINE = 0.95  #: Cosine similarity a quantized model's output must reach against the float reference.


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


parse_calibration_size = positive_int  #: --calibration-size: a whole number >= 1 (the command line's own integer type).


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


def _quantize_input(src: Path, work: Path, label: str) -> Path:
    """A copy of ``src`` ORT's QNN tools take: no ``metadata_props`` (1.32 crashes on them), external data copied."""
    import shutil

    import onnx

    from harness.core.files import inside
    from harness.prep.containment import external_refs
    from harness.prep.onnxfile import load_onnx

    graph = load_onnx(src, external_data=False)
    work.mkdir(parents=True, exist_ok=True)
    for location, path in {r.location: r.path for r in external_refs(src, graph, label)}.items():
        target = inside(work, work / location)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    del graph.metadata_props[:]
    out = work / src.name
    onnx.save(graph, str(out))
    return out


def nonfinite_constant_nodes(model: Any) -> list[str]:
    """Nodes reading a float constant with inf or NaN (quantize_static would give them an infinite scale)."""
    import numpy as np
    from onnx import numpy_helper

    def bad(tensor: Any) -> bool:
        if tensor.data_type not in (1, 10, 11, 16):  # float, float16, double, bfloat16
            return False
        return not bool(np.all(np.isfinite(numpy_helper.to_array(tensor).astype(np.float64))))

    names = {t.name for t in model.graph.initializer if bad(t)}
    for node in model.graph.node:
        if node.op_type == "Constant":
            names.update(o for a in node.attribute if a.name == "value" and bad(a.t) for o in node.output)
    return [n.name for n in model.graph.node if n.op_type != "Constant" and names & set(n.input)]


def quantize_qdq(src: Path, dst: Path, calibration: list[dict[str, Any]], label: str) -> Path:
    """Write the QDQ model of ``src`` to ``dst`` (non-finite nodes stay float); ORT's failures are one InputError."""
    import logging
    import shutil

    from onnxruntime.quantization import quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config, qnn_preprocess_model

    from harness.prep.onnxfile import load_onnx, ort_reason

    work = dst.parent / "quantize-input"
    src = _quantize_input(Path(src), work, label)
    pre = dst.with_name(dst.stem + "_preprocessed.onnx")
    logging.disable(
        logging.WARNING
    )  # ORT's tools warn on the root logger ("consider pre-processing"): not ours to print
    try:
        if not qnn_preprocess_model(str(src), str(pre)):
            pre = src  # nothing to change: quantize the model as it is
        keep = nonfinite_constant_nodes(load_onnx(pre, external_data=True))
        config = get_qnn_qdq_config(str(pre), _Feeds(calibration), nodes_to_exclude=keep or None)
        quantize(str(pre), str(dst), config)
    except InputError:
        raise
    except Exception as err:  # ORT's quantization tools raise anything from onnx to numpy errors
        raise InputError(f"{label}: --quantize qdq failed: {type(err).__name__}: {ort_reason(err)}") from None
    finally:
        logging.disable(logging.NOTSET)
        shutil.rmtree(work, ignore_errors=True)  # dst holds its weights itself
    return dst


def check_quantized(
    qdq: Path, feeds: dict[str, Any], reference: dict[str, Any], label: str, nondeterministic: Any = ()
) -> None:
    """The QDQ model on the CPU EP must be within `MIN_COSINE` of the float reference before a compile is tried."""
    import numpy as np
    import onnxruntime as ort

    from harness.prep.onnxfile import ort_reason

    from .ep import compare_outputs

    try:
        session = ort.InferenceSession(str(qdq), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        outputs = session.run(names, feeds)
    except Exception as err:  # ORT raises its own Fail types
        raise InputError(
            f"{label}: --quantize qdq: ORT's CPU EP cannot run the uint8 QDQ model it made: {ort_reason(err)}"
        ) from None
    for name, got in zip(names, outputs, strict=True):
        want = reference.get(name)
        if want is None or np.asarray(want).dtype.kind != "f":
            continue  # integer outputs (argmax, ids) have no cosine
        if name in nondeterministic:
            if np.shape(got) != np.shape(want):
                raise InputError(
                    f"{label}: --quantize qdq: output {name} has shape {np.shape(got)}, not {np.shape(want)}"
                )
            continue  # random in the float model itself: its values say nothing about the quantization
        res = compare_outputs(got, want, min_cosine=MIN_COSINE)
        if not res["ok"]:
            raise InputError(
                f"{label}: --quantize qdq: the uint8 QDQ model already differs from the float model on "
                f"ORT's CPU EP (output {name}: cosine {res.get('cosine', float('nan')):.3f} < {MIN_COSINE}), "
                "so the QNN compile is not tried; this model does not survive uint8 quantization with "
                "these calibration inputs (give real ones with --input, or use --provider-option soc_model=60 "
                "without --quantize)"
            )


#: Ops of an already quantized model: quantize_static cannot quantize it again.
QUANTIZED_OPS = frozenset(
    (
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "MatMulInteger",
        "ConvInteger",
        "QLinearConv",
        "QLinearMatMul",
        "DynamicQuantizeLSTM",
        "DynamicQuantizeMatMul",
        "MatMulIntegerToFloat",
        "QAttention",
        "QGemm",
        "QLinearAdd",
        "QLinearMul",
        "MatMulNBits",
    )
)


def refuse_quantized(graph: Any, label: str) -> None:
    """InputError when ``graph`` is already quantized: it compiles as it is."""
    from collections import Counter

    from harness.prep.graphs import all_graphs

    found = Counter(n.op_type for g in all_graphs(graph.graph) for n in g.node if n.op_type in QUANTIZED_OPS)
    if found:
        ops = ", ".join(f"{count} {op}" for op, count in found.most_common(4))
        raise InputError(
            f"{label}: --quantize qdq quantizes float models, and this one is already quantized ({ops}); "
            "run it without --quantize (the QNN EP takes a QDQ model as it is; ops it cannot take, such as "
            "dynamic quantization's, stay on the CPU)"
        )


def calibration_feeds(inputs: list, shapes: dict, feeds: dict, given: set[str], size: int) -> list[dict]:
    """``size`` feed dicts like ``feeds``: given inputs kept, the others drawn with other seeds."""
    from harness.prep.inputs import SEED, generate_feeds

    fixed = {name: feeds[name] for name in given}
    return [generate_feeds(inputs, shapes, fixed, seed=SEED + 1 + k) for k in range(size)]
