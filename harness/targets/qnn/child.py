"""QNN work (``compile``, ``reference``) in a child process: the compiler can crash, and logs on stdout."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.contract.spawn import tell_status

StatusCallback = Callable[[str], None]  #: What `run_child` tells about the child's work (a `Progress.step`).

FAULT_ENV = "HARNESS_TEST_QNN_CHILD_FAULT"  #: Test hook: "segv" kills the child by SIGSEGV (or SIGABRT) first.
NOTHING_COMPILED = "Unable to compile any nodes"  #: ORT's error when the EP took no node (ERROR_IF_NO_NODES_COMPILED).


CHILD_TIMEOUT_S = 3600.0  #: A child job past this is killed: QNN compiles of LLM-sized graphs take minutes.


def run_child(
    job: dict, log_path: Path, *, timeout_s: float = CHILD_TIMEOUT_S, on_status: StatusCallback | None = None
) -> dict:
    """Run one `child` job logging to ``log_path``; a crash or timeout is ``{"ok": False, "stage": "crash"}``."""
    import tempfile

    from harness.contract.spawn import run_job
    from harness.core.files import create_file, make_folder

    make_folder(log_path.parent, "QNN log folder")
    with tempfile.TemporaryDirectory(prefix="qnn-job-") as tmp, create_file(log_path, "QNN log") as log:
        code, result = run_job(
            "harness.targets.qnn.child",
            job,
            log,
            Path(tmp),
            timeout_s=timeout_s,
            poll_s=STATUS_POLL_S,
            on_status=on_status,
        )
    if code is None:
        return {"ok": False, "stage": "crash", "error": f"no result after {timeout_s:g} s (killed)"}
    return result if result is not None else {"ok": False, "stage": "crash", "error": _describe_exit(code)}


STATUS_POLL_S = 1.0  #: How often the parent looks at what the child says it is doing.


def _describe_exit(code: int) -> str:
    if code < 0:
        from harness.contract.spawn import signal_name

        name = signal_name(code)
        return f"the process was killed by {name}" if name.startswith("signal ") else f"the process crashed ({name})"
    return f"the process exited with code {code} without a result"


def _session_options(job: dict, *, disable: str, onnx_path: str | Path) -> Any:
    """The sessions' options, and the load workaround for a multi-partition model (`partitions`)."""
    from harness.prep.sessions import SessionSettings

    from .ep import qnn_session_options
    from .partitions import apply_load_level, partitions_of

    so = qnn_session_options(
        disable_file_mapped_weights=disable,
        backend_type=job.get("backend_type", "htp"),
        share_ep_contexts=bool(job.get("share_ep_contexts")),
        provider_options=job.get("provider_options") or {},
    )
    apply_load_level(so, partitions_of(Path(onnx_path)))
    return SessionSettings(dict(job.get("session_config") or {}), job.get("intra_op_threads")).apply(so)


def _first_line(err: BaseException) -> str:
    """The error's first line for the parent's one-line message; the whole text goes to the log."""
    print(f"harness: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def compile_job(job: dict) -> dict:
    import onnxruntime as ort

    from .ep import register_qnn_ep

    def options() -> Any:
        so = ort.SessionOptions()
        so.log_severity_level = 2
        provider = {"backend_type": job.get("backend_type", "htp"), **(job.get("provider_options") or {})}
        so.add_provider_for_devices(register_qnn_ep(), provider)
        for key, value in (job.get("session_config") or {}).items():
            so.add_session_config_entry(key, value)
        return so

    t0, cpu0 = time.perf_counter(), time.process_time()
    pairs = list(zip(job["srcs"], job["outs"], strict=True)) if "srcs" in job else [(job["src"], job["out"])]
    try:
        for i, (src, out) in enumerate(pairs):  # several: one weight-sharing context, in this one process
            tell_status(job, f"compiling {Path(src).name} for QNN")
            so = options()
            if len(pairs) > 1:
                so.add_session_config_entry("ep.share_ep_contexts", "1")
                if i == len(pairs) - 1:
                    so.add_session_config_entry("ep.stop_share_ep_contexts", "1")
            flags = ort.OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED
            ort.ModelCompiler(so, src, bool(job.get("embed_mode")), flags=flags).compile_to_file(out)
    except Exception as err:  # ORT raises its own Fail type
        error = _first_line(err)
        if NOTHING_COMPILED in error:
            from .support import log_node_support

            tell_status(job, "asking the EP which op it refuses (verbose log)")
            log_node_support(options, src)
        return {"ok": False, "stage": "compile", "error": error}
    result = {
        "ok": True,
        "stage": "compile",
        "compile_s": time.perf_counter() - t0,
        "compile_cpu_s": time.process_time() - cpu0,  # CPU time: what the estimate's rates are in
    }
    if job.get("check_folder"):
        result |= _check_loads(job)
    return result


def _check_loads(job: dict) -> dict:
    import onnxruntime as ort

    from harness.prep.folder import PreparedModel
    from harness.prep.reference import load_reference
    from harness.prep.sessions import run_session

    from .outputs import check_compiled_outputs

    model = PreparedModel.load(Path(job["check_folder"]), check_files=False)
    feeds, reference = load_reference(model)
    tell_status(job, "loading the compiled model and running it once (the first inference)")
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        session = ort.InferenceSession(job["out"], _session_options(job, disable="1", onnx_path=job["out"]))
    except Exception as err:  # ORT raises its own Fail type
        return {"ok": False, "stage": "load", "error": _first_line(err)}
    t1, cpu1 = time.perf_counter(), time.process_time()
    try:
        outputs = run_session(session, model.outputs, feeds, model.input_types, model.output_types)
    except Exception as err:
        return {"ok": False, "stage": "run", "error": _first_line(err)}
    timings = {
        "load_s": t1 - t0,
        "first_run_s": time.perf_counter() - t1,
        "load_cpu_s": cpu1 - cpu0,
        "first_run_cpu_s": time.process_time() - cpu1,
    }
    ok, detail = check_compiled_outputs(outputs, reference, model)  # what every worker checks, once here
    if not ok:
        ints = [n for n, t in model.input_types.items() if t not in (1, 10, 11, 16)]  # float types
        return {"ok": False, "stage": "output", "error": detail, "integer_inputs": ints, **timings}
    return {"output_detail": detail, **timings}


def reference_job(job: dict) -> dict:
    import onnxruntime as ort

    from harness.prep.folder import PreparedModel
    from harness.prep.outputs import nondeterministic_outputs
    from harness.prep.reference import load_reference, save_reference
    from harness.prep.sessions import run_session

    model = PreparedModel.load(Path(job["folder"]), check_files=False)
    feeds, _ = load_reference(model)
    tell_status(job, f"loading {model.onnx_path.name} and running it twice for the reference")
    try:
        session = ort.InferenceSession(
            str(model.onnx_path), _session_options(job, disable="1", onnx_path=model.onnx_path)
        )
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


def generate_job(job: dict) -> dict:
    """Load the prefill and decode EPContext models (``onnx``) and generate greedily with them."""
    import onnxruntime as ort

    from .llm import static_generate

    tell_status(job, "loading the prefill and decode graphs and generating")
    try:
        sessions = [ort.InferenceSession(p, _session_options(job, disable="1", onnx_path=p)) for p in job["onnx"]]
    except Exception as err:  # ORT raises its own Fail type
        return {"ok": False, "stage": "load", "error": _first_line(err)}
    run = static_generate(*sessions, job["prompt"], job["new_tokens"])
    return {"ok": True, "stage": "generate", "ids": run.ids, "kv_cache_bytes": run.kv_bytes}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job_path = Path(argv[0])
    job = json.loads(job_path.read_text(encoding="utf-8"))
    from harness.contract.spawn import set_parent_death_signal

    set_parent_death_signal()  # a compile never outlives the harness that asked for it
    if os.environ.get(FAULT_ENV) == "segv":
        import signal

        os.kill(os.getpid(), getattr(signal, "SIGSEGV", signal.SIGABRT))
    try:
        result = {"compile": compile_job, "reference": reference_job, "generate": generate_job}[job["kind"]](job)
    except Exception as err:  # anything else: the parent reports it in one line
        traceback.print_exc()
        result = {"ok": False, "stage": job.get("kind", "?"), "error": f"{type(err).__name__}: {_first_line(err)}"}
    Path(job["result"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
