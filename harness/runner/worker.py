"""A worker process: ``python -m harness.runner.worker SPEC.json``.

Creates its M sessions, runs one inference and checks it against the reference, writes a
"ready" record, then blocks on stdin until the parent has sampled every worker's memory
(the barrier), writes its final record and exits. Its stdout/stderr go to a log file the
parent chose (ORT and the QNN EP log there); results go only to the JSON files.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from harness.runner.spec import WorkerRecord, WorkerSpec, write_json_atomic

#: Exit codes of a worker (the parent maps them to the `error` column).
EXIT_OK, EXIT_FAILED, EXIT_BAD_SPEC = 0, 1, 2
#: How often a worker checks that the harness that started it is still alive.
PARENT_POLL_S = 0.25


def exit_with_parent(poll_s: float = PARENT_POLL_S) -> None:
    """End this worker as soon as the harness that started it is gone (SIGKILL, the OOM
    killer, a crash): the parent's cleanup never runs then, and a worker hung in session
    creation would outlive the run holding its memory. POSIX: a dead parent's children are
    re-parented, so ``getppid()`` changes. Windows keeps the old parent id, so there the
    parent process is looked up by pid and creation time (pids are reused)."""
    parent = os.getppid()
    if os.name == "posix":
        def parent_alive() -> bool:
            return os.getppid() == parent
    else:
        import psutil

        try:
            born = psutil.Process(parent).create_time()
        except psutil.Error:
            return

        def parent_alive() -> bool:
            try:
                return psutil.Process(parent).create_time() == born
            except psutil.Error:
                return False

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if not parent_alive():
                os._exit(EXIT_FAILED)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def apply_fault_action(action: str) -> None:
    """Deliberate worker failures for the reliability suites (never set by `harness run`)."""
    if action == "crash":
        os._exit(3)
    if action == "signal":
        os.kill(os.getpid(), signal.SIGKILL if hasattr(signal, "SIGKILL") else signal.SIGTERM)
    if action == "hang":
        time.sleep(10**6)
    if action == "raise":
        raise RuntimeError("worker raised on purpose (fault_action=raise)")


def check_output(outputs: list, reference: dict, names: list[str], rtol: float, atol: float) -> tuple[bool, str]:
    import numpy as np

    for name, got in zip(names, outputs, strict=False):
        want = reference[name]
        if got.shape != want.shape:
            return False, f"{name}: shape {got.shape} != reference {want.shape}"
        if not np.allclose(got, want, rtol=rtol, atol=atol):
            worst = float(np.max(np.abs(got.astype("float64") - want.astype("float64"))))
            return False, f"{name}: max abs diff {worst:.3g} beyond rtol={rtol} atol={atol}"
    return True, ""


def check_qnn_output(outputs: list, reference: dict, model) -> tuple[bool, str]:
    """The QNN EP quantizes every activation: compare by cosine and quantization steps."""
    from harness.targets.qnn.ep import compare_outputs

    for name, got in zip(model.outputs, outputs, strict=False):
        result = compare_outputs(got, reference[name], quant_step=model.extra.get("quant_step"))
        if not result["ok"]:
            return False, f"{name}: {result}"
    return True, ""


def run_worker(spec: WorkerSpec) -> int:
    from harness.models import PreparedModel, load_reference
    from harness.targets.base import CREATORS

    exit_with_parent()
    record = WorkerRecord(pid=os.getpid())
    live = None
    try:
        apply_fault_action(spec.fault_action)
        model = PreparedModel.load(Path(spec.model_folder))
        live = CREATORS[spec.target](spec, model, record)
        feeds, reference = load_reference(model)
        t0 = time.perf_counter()
        outputs = live.sessions[0].run(model.outputs, feeds)
        record.first_run_s = time.perf_counter() - t0
        if spec.target == "qnn":
            record.output_ok, record.output_detail = check_qnn_output(outputs, reference, model)
        else:
            record.output_ok, record.output_detail = check_output(
                outputs, reference, model.outputs, model.extra.get("rtol", 1e-4), model.extra.get("atol", 1e-5))
        if not record.output_ok:
            record.error = f"wrong output: {record.output_detail}"
    except Exception as err:  # noqa: BLE001 - a worker's failure is data for the parent
        traceback.print_exc()
        record.error = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        write_json_atomic(Path(spec.result_path), asdict(record))
        return EXIT_FAILED
    write_json_atomic(Path(spec.ready_path), asdict(record))
    sys.stdin.readline()  # the barrier: the parent samples memory, then releases us
    record.peak_bytes = _peak()
    write_json_atomic(Path(spec.result_path), asdict(record))
    live.close()
    return EXIT_OK


def _peak() -> int | None:
    from harness.runner.memory import own_peak_bytes

    return own_peak_bytes()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m harness.runner.worker SPEC.json", file=sys.stderr)
        return EXIT_BAD_SPEC
    try:
        spec = WorkerSpec.read(Path(argv[0]))
    except (OSError, ValueError, TypeError) as err:
        print(f"harness.runner.worker: bad spec {argv[0]}: {err}", file=sys.stderr)
        return EXIT_BAD_SPEC
    return run_worker(spec)


if __name__ == "__main__":
    sys.exit(main())
