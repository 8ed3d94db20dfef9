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


def _quantize_input(src: Path, work: Path, label: str) -> Path:
    """A copy of ``src`` that ORT's QNN tools can take, in the folder ``work``:

    - without ``metadata_props``: onnxruntime 1.32's ``qnn_preprocess_model`` crashes on any
      model that has them ("TypeError: cannot convert dictionary update sequence element #0 to
      a sequence": it ``dict.update``s the protobuf list). They carry no computation;
    - its external-data files COPIED, not linked: the shape-fixed copy hard-links the user's
      weights, and onnx refuses to load data "with multiple hard links, indicating a potential
      hardlink attack". Quantizing reads every weight anyway, so the copy costs one more pass.
    """
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
    """Main-graph nodes that read a float constant holding inf or NaN (an initializer or a
    Constant node's value): quantize_static gives such a tensor an infinite scale (magika's
    ``Max(-inf, x)``), and every value behind it turns to garbage. They stay in float."""
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
    """Write the QDQ model of ``src`` to ``dst`` (its folder also gets the preprocessed model;
    the working copy of `_quantize_input` is removed); nodes on non-finite constants are left in
    float (`nonfinite_constant_nodes`). Every failure of ORT's tools is one InputError naming
    the user's model."""
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
    """The QDQ model on ORT's CPU EP must already be within `MIN_COSINE` of the float model's
    output (``reference``), or the compile is not tried: a loss there is the quantization's
    (uint8 ranges too coarse for the model), not the QNN EP's, and one line says so. Outputs the
    float reference itself gives differently on two runs (``nondeterministic``: RandomNormalLike
    noise) are checked by shape only, as the workers check them; ORT failing to load or run the
    QDQ model is one line too."""
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


#: Ops of a model that is already quantized (QDQ, dynamic quantization, ORT's quantized
#: contrib ops, weight-only int4): quantize_static cannot quantize it again (a dynamically
#: quantized MiniLM: ``KeyError: 'x_scale'`` deep inside ORT's tools).
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
    """InputError (one line) when ``graph`` is already quantized: --quantize qdq is for float
    models, and a quantized one compiles as it is."""
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
    """``size`` feed dicts like the reference ``feeds``: given inputs as they are, the others
    drawn with other seeds than the reference input's."""
    from harness.prep.inputs import SEED, generate_feeds

    fixed = {name: feeds[name] for name in given}
    return [generate_feeds(inputs, shapes, fixed, seed=SEED + 1 + k) for k in range(size)]
