"""The device probe's `run_job` child: register the EP, compile and run a tiny QDQ model, its record per step."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from harness.core.files import write_json_atomic
from harness.targets.qnn.eplog import stderr_offset

PROBE_WEIGHTS = 4096  # one 64x64 uint8 MatMul: the smallest model make_qdq_model builds


class _Record:
    """The child's findings, rewritten after every step: a crash leaves what was learned."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict = {"steps_s": {}}

    def step(self, name: str) -> None:
        self.data["step"] = name
        self.save()

    def timed(self, name: str, t0: float) -> None:
        self.data["steps_s"][name] = round(time.perf_counter() - t0, 3)

    def save(self) -> None:
        write_json_atomic(self.path, self.data, what="probe record")


def _child(job_path: Path) -> int:
    """Every step's finding in the job's result file; exit 0 whatever the EP did (its failures are data)."""
    workdir = job_path.parent
    rec = _Record(Path(json.loads(job_path.read_text(encoding="utf-8"))["result"]))
    d = rec.data
    rec.step("import")
    t0 = time.perf_counter()
    try:
        import onnxruntime as ort

        from harness.targets.qnn import compile as comp
        from harness.targets.qnn import ep
    except Exception as err:  # any import problem is a finding
        d["ep_error"] = f"cannot import onnxruntime / the qnn target: {type(err).__name__}: {err}"
        rec.save()
        return 0
    d["onnxruntime"] = ort.__version__
    d.update(ep.qnn_versions())
    rec.timed("import", t0)
    rec.step("register")
    t0 = time.perf_counter()
    try:
        used = ep.register_qnn_ep()
        d["ep_registered"] = True
    except Exception as err:  # QnnUnavailableError and ORT's own failures
        d["ep_error"] = str(err)
    qnn = [x for x in ort.get_ep_devices() if x.ep_name == ep.EP_NAME]
    d["ep_library"] = next((x.ep_metadata.get("library_path") for x in qnn if "library_path" in x.ep_metadata), None)
    d["ep_devices"] = [_device_dict(x) for x in qnn]
    rec.timed("register", t0)
    if d.get("ep_registered"):
        d["device_type"] = used[0].device.type.name  # the device the harness's sessions use
        _child_htp(rec, ep, comp, workdir)
    rec.step("done")
    return 0


def _device_dict(x) -> dict:
    hd = x.device
    return {
        "hardware_type": hd.type.name,
        "hardware_vendor": hd.vendor,
        "vendor_id": int(hd.vendor_id),
        "device_id": int(hd.device_id),
        "ep_vendor": x.ep_vendor,
        "ep_metadata": dict(x.ep_metadata),
        "device_metadata": dict(hd.metadata),
    }


def _child_htp(rec: _Record, ep, comp, workdir: Path) -> None:
    import onnxruntime as ort

    from harness.targets.qnn import qdq

    d = rec.data
    rec.step("compile")
    t0 = time.perf_counter()
    try:
        info = qdq.make_qdq_model(workdir / "probe.onnx", PROBE_WEIGHTS)
        d["model"] = f"{info['dim']}x{info['dim']} uint8 QDQ MatMul"
        compiled = comp.compile_epcontext(workdir / "probe.onnx", workdir / "ctx")
    except Exception as err:  # the backend's failure is the finding
        d["compile_error"] = f"compiling for HTP failed: {err}"
        return
    rec.timed("compile", t0)
    feeds = qdq.make_feeds(info)
    rec.step("session")
    t0 = time.perf_counter()
    ort.set_default_logger_severity(0)  # Some EP messages go through ORT's default logger: show those too.
    d["load_log_start"] = stderr_offset()
    rec.save()
    try:
        session = ort.InferenceSession(
            str(compiled.onnx_path), ep.qnn_session_options(disable_file_mapped_weights="0", log_severity=0)
        )
        d["session_ok"] = True
    except Exception as err:
        d["session_error"] = f"loading the compiled model failed: {err}"
        return
    finally:
        d["load_log_end"] = stderr_offset()
        rec.timed("session", t0)
        rec.save()
    rec.step("run")
    t0 = time.perf_counter()
    try:
        out = session.run(None, feeds)[0]
        d["run_ok"] = True
        ref = qdq.reference_output(workdir / "probe.onnx", feeds)
        d["output"] = ep.compare_outputs(out, ref, quant_step=info["output_scale"])
    except Exception as err:
        d["run_error"] = f"running the compiled model failed: {err}"
    rec.timed("run", t0)


if __name__ == "__main__":
    sys.exit(_child(Path(sys.argv[1])))
