"""QNN work the harness does in a child process: ``python -m harness.targets.qnn.child JOB.json``.

Why a child: the QNN compiler is native code that can crash the process it runs in (a real
int8 MiniLM segfaults in QNN's FinalizeGraphs on the HTP simulator, 3 times out of 3), and
the EP and the QNN libraries print their own log lines on stdout/stderr. In a child, a crash is
an exit status the parent turns into one line, and the log goes to a file, not the terminal.

Jobs (JSON, written by `run_child`):
- ``compile``: compile ``src`` into the EPContext model ``out`` (ORT's ModelCompiler with the QNN
  device), then, when ``check_folder`` names a prepared model, load the result with file mapping
  disabled and run it once on that model's reference input: a partially compiled model that
  compiles but cannot load or run is found here, once, instead of in every worker;
- ``reference``: run the pre-compiled EPContext model of the prepared model ``folder`` twice
  with file mapping disabled, and store its first output as the reference (outputs that differ
  between the two runs are recorded as non-deterministic).

The result (``ok``, ``stage``, ``error``, timings) goes to the job's ``result`` JSON file.

Test hook: ``HARNESS_TEST_QNN_CHILD_FAULT=segv`` makes the child die by SIGSEGV (SIGABRT where
there is none) before it starts, as the QNN compiler does on some models; never set by the
harness itself.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

#: Test hook (see the module docstring).
FAULT_ENV = "HARNESS_TEST_QNN_CHILD_FAULT"


# ----------------------------------------------------------------------------- the parent's side

#: A compile (or reference run) in the child taking longer than this is killed: QNN compiles of
#: LLM-sized graphs take minutes, never hours.
CHILD_TIMEOUT_S = 3600.0


def run_child(job: dict, log_path: Path, *, timeout_s: float = CHILD_TIMEOUT_S) -> dict:
    """Run one `child` job in a child process whose stdout and stderr (the EP's and the QNN
    libraries' own log) go to ``log_path``; returns its result. A child killed by a signal or
    past ``timeout_s`` gives ``{"ok": False, "stage": "crash", ...}``; no child is left behind."""
    import subprocess
    import tempfile

    log_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="qnn-job-") as tmp:
        job = dict(job, result=str(Path(tmp) / "result.json"))
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        from harness.runner.spawn import python_child

        command, env = python_child("harness.targets.qnn.child", str(job_path))
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=tmp,  # what the QNN libraries write beside them (the saver backend's saver_output/) goes
                env=env,  # with the job, never into the harness's own folder (PYTHONPATH finds the package)
            )
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return {"ok": False, "stage": "crash", "error": f"no result after {timeout_s:g} s (killed)"}
            finally:
                if proc.poll() is None:  # Ctrl-C while waiting
                    proc.kill()
                    proc.wait()
        try:
            return json.loads(Path(job["result"]).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"ok": False, "stage": "crash", "error": _describe_exit(code)}


def _describe_exit(code: int) -> str:
    if code < 0:
        import signal

        try:
            return f"the process crashed ({signal.Signals(-code).name})"
        except ValueError:
            return f"the process was killed by signal {-code}"
    return f"the process exited with code {code} without a result"


# ----------------------------------------------------------------------------- the child's side


def _session_options(job: dict, *, disable: str) -> Any:
    from harness.prep.sessions import SessionSettings

    from .ep import qnn_session_options

    so = qnn_session_options(
        disable_file_mapped_weights=disable,
        backend_type=job.get("backend_type", "htp"),
        share_ep_contexts=bool(job.get("share_ep_contexts")),
        provider_options=job.get("provider_options") or {},
    )
    return SessionSettings(dict(job.get("session_config") or {}), job.get("intra_op_threads")).apply(so)


def _first_line(err: BaseException) -> str:
    """The error's first line for the parent's one-line message; the whole text goes to the log."""
    print(f"harness: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def compile_job(job: dict) -> dict:
    import onnxruntime as ort

    from .ep import register_qnn_ep

    so = ort.SessionOptions()
    so.log_severity_level = 2
    options = {"backend_type": job.get("backend_type", "htp"), **(job.get("provider_options") or {})}
    so.add_provider_for_devices(register_qnn_ep(), options)
    for key, value in (job.get("session_config") or {}).items():
        so.add_session_config_entry(key, value)
    t0 = time.perf_counter()
    try:
        ort.ModelCompiler(
            so, job["src"], bool(job.get("embed_mode")), flags=ort.OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED
        ).compile_to_file(job["out"])
    except Exception as err:  # ORT raises its own Fail type
        return {"ok": False, "stage": "compile", "error": _first_line(err)}
    result = {"ok": True, "stage": "compile", "compile_s": time.perf_counter() - t0}
    if job.get("check_folder"):
        result |= _check_loads(job)
    return result


def _check_loads(job: dict) -> dict:
    import onnxruntime as ort

    from harness.prep.folder import PreparedModel
    from harness.prep.reference import load_reference
    from harness.prep.sessions import run_session

    model = PreparedModel.load(Path(job["check_folder"]), check_files=False)
    feeds, _ = load_reference(model)
    try:
        session = ort.InferenceSession(job["out"], _session_options(job, disable="1"))
    except Exception as err:  # ORT raises its own Fail type
        return {"ok": False, "stage": "load", "error": _first_line(err)}
    try:
        run_session(session, model.outputs, feeds, model.input_types, model.output_types)
    except Exception as err:
        return {"ok": False, "stage": "run", "error": _first_line(err)}
    return {}


def reference_job(job: dict) -> dict:
    import onnxruntime as ort

    from harness.prep.folder import PreparedModel
    from harness.prep.outputs import nondeterministic_outputs
    from harness.prep.reference import load_reference, save_reference
    from harness.prep.sessions import run_session

    model = PreparedModel.load(Path(job["folder"]), check_files=False)
    feeds, _ = load_reference(model)
    try:
        session = ort.InferenceSession(str(model.onnx_path), _session_options(job, disable="1"))
    except Exception as err:  # ORT raises its own Fail type
        return {"ok": False, "stage": "load", "error": _first_line(err)}
    runs = []
    try:
        for _ in range(2):
            outputs = run_session(session, model.outputs, feeds, model.input_types, model.output_types)
            runs.append(dict(zip(model.outputs, outputs, strict=True)))
    except Exception as err:
        return {"ok": False, "stage": "run", "error": _first_line(err)}
    save_reference(model.reference_path, feeds, runs[0])
    return {"ok": True, "stage": "reference", "nondeterministic": nondeterministic_outputs(runs[0], runs[1])}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job_path = Path(argv[0])
    job = json.loads(job_path.read_text(encoding="utf-8"))
    from harness.runner.worker import _set_parent_death_signal

    _set_parent_death_signal()  # a compile never outlives the harness that asked for it
    if os.environ.get(FAULT_ENV) == "segv":
        import signal

        os.kill(os.getpid(), getattr(signal, "SIGSEGV", signal.SIGABRT))
    try:
        result = {"compile": compile_job, "reference": reference_job}[job["kind"]](job)
    except Exception as err:  # anything else: the parent reports it in one line
        traceback.print_exc()
        result = {"ok": False, "stage": job.get("kind", "?"), "error": f"{type(err).__name__}: {_first_line(err)}"}
    Path(job["result"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
