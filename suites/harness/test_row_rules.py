"""The parent's own verdicts on a worker (issue 30): an exit before the release is a failure,
exit code 0 included (onnxruntime-qnn #337's background TerminateProcess(0)), and a mapped
worker whose private memory holds the weights is ``copied``, not mapped, whatever its log or
pipeline says (onnxruntime-qnn #677's silent direct read). The rules on records, then the row
the group runner makes of a real process that exited 0 after writing its ready record."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import asdict

import pytest

from harness.contract.spec import WorkerRecord, WorkerSpec
from harness.core.files import write_json_atomic
from harness.core.summary import row_ok
from harness.runner import group
from harness.runner.rowrules import SILENT_COPY_SHARE, early_exit, silent_copy

MIB = 1024**2
W = 64 * MIB


@pytest.mark.parametrize(
    ("code", "timed_out", "final", "expected"),
    [
        (0, False, None, "worker 2 exited with code 0 before the harness released it"),
        (0, False, WorkerRecord(released=False), "worker 2 exited with code 0 before the harness released it"),
        (3, False, None, "worker 2 exited with code 3 before the harness released it"),
        (-9, False, None, "worker 2 killed by SIGKILL before the harness released it"),
        (0, False, WorkerRecord(released=True), ""),
        (None, False, None, ""),  # still running: not an exit
        (-9, True, None, ""),  # a timeout says so itself
    ],
)
def test_an_exit_before_the_release_is_named(code, timed_out, final, expected):
    said = early_exit(2, code, timed_out, final)
    assert said.startswith(expected) and bool(said) == bool(expected), said


def _record(**fields) -> WorkerRecord:
    base = {"path_taken": "mapped", "ep_file_mapping": "n/a", "weights_bytes": W}
    return WorkerRecord(**(base | fields))


@pytest.mark.parametrize(
    ("mode", "fields", "copied", "state"),
    [
        ("mapped", {}, W, "copied"),  # the cpu target's pipeline said mapped
        ("mapped", {"ep_file_mapping": "active"}, W + 3 * MIB, "copied"),  # the EP's log said active
        ("mapped", {}, int(SILENT_COPY_SHARE * W) + 2 * MIB, "copied"),
        ("mapped", {}, int(SILENT_COPY_SHARE * W), None),  # within the sampling slack of the bound
        ("mapped", {}, int(0.3 * W), None),  # a partial copy stays a warning (figure notes)
        ("mapped", {}, 400 * 1024, None),  # a mapped worker's noise
        ("mapped", {}, None, None),  # no control worker: no figure, no verdict
        ("mapped", {"path_taken": "fallback"}, W, None),  # a fallback says it copied
        ("mapped", {"ep_file_mapping": "retried", "path_taken": "fallback"}, W, None),
        ("heap", {"path_taken": "heap"}, W, None),
        ("mapped", {"weights_bytes": 16 * 1024}, 900 * 1024, None),  # tiny weights: no copy tells from noise
        # measured: a 24 KiB model's ort-native mapped worker, 2.1 MiB beyond its control (not weights)
        ("mapped", {"weights_bytes": 24 * 1024}, 2154496, None),
        # measured (CI's slow step): the romanizer decoder's mapped worker, 4 274 084 bytes of tensors (onnx),
        # 3.1 MiB beyond its control: above half its weights, within a worker's noise (physics.NOISE_BYTES)
        ("mapped", {"weights_bytes": 4274084}, int(3.1 * MIB), None),
        ("mapped", {"weights_bytes": 8 * MIB}, 8 * MIB, "copied"),  # a whole copy above the noise
    ],
)
def test_a_mapped_worker_holding_the_weights_is_copied(mode, fields, copied, state):
    found = silent_copy(mode, _record(**fields), copied)
    assert (found[0] if found else None) == state
    if found:
        weights = fields.get("weights_bytes", W)
        assert "copied: private memory held" in found[1] and f"of the {weights / MIB:.1f} MiB of weights" in found[1]
        said = "its EP log said active" if fields.get("ep_file_mapping") == "active" else "pipeline reported mapped"
        assert said in found[1]


def test_a_worker_that_exits_0_after_its_ready_record_fails(tmp_path):
    """A real process that wrote its ready record (correct output, no error) and exited 0 on
    its own, before the parent's release: its row fails with that reason, whatever it said."""
    spec = WorkerSpec(
        target="cpu",
        mode="mapped",
        model_folder=str(tmp_path),
        ready_path=str(tmp_path / "w0.ready.json"),
        result_path=str(tmp_path / "w0.result.json"),
        log_path=str(tmp_path / "w0.log"),
    )
    (tmp_path / "w0.log").write_text("session created\n")
    write_json_atomic(tmp_path / "w0.ready.json", asdict(WorkerRecord(pid=1, path_taken="mapped", output_ok=True)))
    proc = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE)
    proc.wait(timeout=60)
    proc.stdin.close()
    worker = group._Worker(0, spec, proc, None, ready=group._read_record(spec.ready_path))
    gspec = group.GroupSpec("cpu", "mapped", 1, 1, 0, tmp_path, tmp_path, 60.0)
    row = group._row(gspec, worker)
    assert row.exit_code == 0
    assert row.error.startswith("worker 0 exited with code 0 before the harness released it"), row.error
    assert "session created" in row.error  # the tail of its log, as for any failed exit
    assert row.output_ok and not row_ok(row)  # what it recorded stays; the exit fails it (issue 43 item 1)
