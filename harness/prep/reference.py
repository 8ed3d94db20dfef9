"""The reference every worker checks against: the original model on ORT's CPU EP, run twice."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.errors import InputError

from .onnxfile import ort_reason
from .sessions import SessionSettings


def write_reference(
    model: Any,  # a PreparedModel (harness.prep.folder, which imports this module)
    run_path: Path,
    feeds: dict,
    settings: SessionSettings | None = None,
    *,
    level: str | None = None,
    label: str | None = None,
    on_status: Callable[[str], None] | None = None,
) -> None:
    """Run the original model twice on the CPU EP with the workers' settings, in a child; store input and outputs."""
    import tempfile

    from .ortjob import run_ort_job

    label = label or f"model {model.source}"
    with tempfile.TemporaryDirectory(prefix="ref-feeds-") as tmp:
        save_reference(Path(tmp) / "feeds.npz", feeds, {})
        job = {
            "kind": "reference",
            "run_path": str(run_path),
            "feeds": str(Path(tmp) / "feeds.npz"),
            "reference": str(model.reference_path),
            "settings": (settings or SessionSettings()).to_dict(),
            "level": level or model.session_level,
            "label": label,
            "outputs": list(model.outputs),
            "input_types": dict(model.input_types),
            "output_types": dict(model.output_types),
        }
        result = run_ort_job(job, label, on_status)
    if result.get("nondeterministic"):
        model.extra["nondeterministic"] = result["nondeterministic"]


def reference_in_process(job: dict) -> dict:
    """The child's side of `write_reference`: the runs, the refusal, the archive."""
    from types import SimpleNamespace

    import onnxruntime as ort

    from harness.contract.spawn import tell_status as status
    from harness.prep.outputs import nondeterministic_outputs
    from harness.prep.sessions import cpu_session_options, run_session

    types = {"input_types": job["input_types"], "output_types": job["output_types"]}
    feeds, _ = load_reference(SimpleNamespace(reference_path=Path(job["feeds"]), **types))
    so = cpu_session_options(SessionSettings.from_dict(job["settings"]), level=job["level"])
    so.log_severity_level = 4  # the error is reported in one line below, not as ORT's log lines
    session = None
    outputs, label = job["outputs"], job["label"]
    status(job, f"running {Path(job['run_path']).name} twice on ONNX Runtime for the reference")
    try:
        session = ort.InferenceSession(job["run_path"], so, providers=["CPUExecutionProvider"])
        runs = [
            dict(
                zip(outputs, run_session(session, outputs, feeds, job["input_types"], job["output_types"]), strict=True)
            )
            for _ in range(2)
        ]
    except Exception as err:  # ORT raises its own exception types
        from .runhints import run_hint

        shape = SimpleNamespace(outputs=outputs, **types)  # what run_hint reads of the model
        run_path = Path(job["run_path"])
        loaded = session is not None and "cannot load" not in str(err)  # a load error is no feed's fault
        hint = f" ({run_hint(str(err), session, shape, feeds, run_path)})" if loaded else ""
        raise InputError(
            f"{label}: ONNX Runtime cannot {'run' if loaded else 'load'} it: {ort_reason(err)}{hint}"
        ) from None
    unstable = nondeterministic_outputs(runs[0], runs[1])
    refuse_unverifiable(feeds, runs[0], unstable, label)
    save_reference(Path(job["reference"]), feeds, runs[0])
    return {"nondeterministic": unstable}


def refuse_unverifiable(feeds: dict, outputs: dict, unstable: Any, label: str) -> None:
    """InputError when the reference cannot tell right weights from wrong."""
    from harness.prep.outputs import nonfinite_problem

    why = nonfinite_problem(feeds, {k: v for k, v in outputs.items() if k not in (unstable or {})})
    if why:
        raise InputError(
            f"{label}: its reference cannot check the weights: {why}; give finite inputs (--input NAME=FILE.npy)"
        )


def _storable(array: Any) -> Any:
    """numpy can save bfloat16/float8/int4 arrays only as their raw unsigned views."""
    import numpy as np

    array = np.asarray(array)
    if array.dtype == object:  # string tensors: numpy unicode, loadable without pickle
        return array.astype(str)
    if (
        array.dtype.kind == "V"
        or type(array.dtype).__module__.startswith("ml_dtypes")
        or array.dtype.name in ("bfloat16", "int4", "uint4", "int2", "uint2")
        or "float8" in array.dtype.name
    ):
        return array.view(f"u{array.dtype.itemsize}")
    return array


def save_reference(path: Path, feeds: dict, outputs: dict) -> None:
    """The fixed input and reference outputs in one new ``.npz`` (a link at the name is replaced)."""
    import numpy as np

    from harness.core.files import create_file

    with create_file(path, "reference") as handle:
        np.savez(
            handle,
            **{f"in:{k}": _storable(v) for k, v in feeds.items()},
            **{f"out:{k}": _storable(v) for k, v in outputs.items()},
        )


REFERENCE_MAX_ARRAYS = 8192  #: Bounds of a reference archive, from its own directory: no zip bomb from a forged entry.
REFERENCE_MAX_BYTES = 4 * 1024**3


def check_reference_archive(path: Path) -> None:
    """ValueError unless ``path`` is a bounded zip of ``.npy`` members (checked before numpy reads it)."""
    import zipfile

    from harness.core.inputfiles import open_regular

    with open_regular(path, "reference") as handle, zipfile.ZipFile(handle) as archive:
        members = archive.infolist()
        if len(members) > REFERENCE_MAX_ARRAYS:
            raise ValueError(f"{len(members)} arrays, more than {REFERENCE_MAX_ARRAYS}")
        if any(not m.filename.endswith(".npy") for m in members):
            raise ValueError("a member that is not a .npy array")
        if sum(m.file_size for m in members) > REFERENCE_MAX_BYTES:
            raise ValueError(f"arrays of more than {REFERENCE_MAX_BYTES} bytes")


def content_fingerprint(models: list[Any]) -> str:
    """What a baseline compares as "the same model": each model's I/O, tensor table, weights bytes
    and 64 evenly spaced 4 KiB samples of the file holding its weights (not its outputs: ORT's
    kernels round differently by CPU and version, so a reference is no identity)."""
    import hashlib
    import os

    h = hashlib.blake2b(digest_size=12)
    for m in models:
        table = [(t.name, t.dtype, t.shape, t.length) for t in m.tensors]
        h.update(repr((m.inputs, m.outputs, table, m.weights_bytes)).encode())
        with open(m.weights_path if m.tensors else m.onnx_path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            for i in range(64):
                f.seek(size * i // 64)
                h.update(f.read(4096))
    return h.hexdigest()


def load_reference(model: Any) -> tuple[dict, dict]:
    import numpy as np

    from harness.prep.tensors import numpy_dtype

    def typed(array: Any, onnx_type: int | None) -> Any:
        if onnx_type is None:
            return array
        want = numpy_dtype(onnx_type)
        if want.kind == "O":  # strings are stored as numpy unicode (never pickled objects)
            return array.astype(object)
        return array if array.dtype == want else array.view(want)

    check_reference_archive(model.reference_path)
    with np.load(model.reference_path, allow_pickle=False) as data:
        feeds = {k[3:]: typed(data[k], model.input_types.get(k[3:])) for k in data.files if k.startswith("in:")}
        outputs = {k[4:]: typed(data[k], model.output_types.get(k[4:])) for k in data.files if k.startswith("out:")}
    return feeds, outputs
