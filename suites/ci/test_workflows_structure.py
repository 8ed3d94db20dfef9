"""The structure of the GitHub Actions workflows on the parsed YAML (PyYAML; skipped with the
reason when it is not installed): triggers, runners, markers, the qnn sweep with its gates
and history, and artifacts uploaded whatever happened."""

from __future__ import annotations

import re

from workflow_support import (
    EXPECTED,
    LINUX,
    NIGHTLY,
    WINDOWS_MAPPER,
    WORKFLOWS_DIR,
    always,
    commands,
    covered,
    env_of,
    expand,
    labels,
    load,
    path_list,
    uses,
    workflow_files,
)


def test_every_job_has_a_timeout():
    for name in EXPECTED:
        wf = load(name)
        for job_id, job in wf.jobs.items():
            assert job.get("timeout-minutes"), f"{name}: job {job_id} has no timeout-minutes"


def test_nightly_triggers_runner_and_concurrency():
    wf = load(NIGHTLY)
    schedule = wf.triggers.get("schedule") or []
    assert schedule and all(s.get("cron") for s in schedule), "nightly needs a schedule: cron trigger"
    assert "workflow_dispatch" in wf.triggers
    concurrency = wf.doc.get("concurrency") or {}
    assert concurrency.get("group") and concurrency.get("cancel-in-progress") is False, \
        "two nightlies must queue on the one device, never overlap or cancel a measurement"
    (job,) = wf.jobs.values()
    assert {"self-hosted", "windows", "arm64"} <= set(labels(job)), labels(job)


def test_nightly_runs_the_device_markers_and_the_qnn_sweep():
    wf = load(NIGHTLY)
    (job,) = wf.jobs.values()
    tests = commands(WORKFLOWS_DIR / NIGHTLY, "pytest")
    marker_exprs = [e for c in tests for e in c.values("-m")]
    assert any({"qnn", "device"} <= set(re.findall(r"\w+", e)) for e in marker_exprs), marker_exprs
    assert any(c.values("--report-dir") for c in tests), "pytest should keep its run folders (--report-dir)"

    (sweep,) = [c for c in commands(WORKFLOWS_DIR / NIGHTLY, "harness") if c.args[:1] == ["run"]]
    assert sweep.values("--target") == ["qnn"]
    (processes,) = sweep.values("--processes")
    assert len(processes.split(",")) >= 2, "a sweep over several N"
    gates = sweep.values("--gate")
    metrics = {re.match(r"\w+", g).group(0) for g in gates}
    assert {"failed_workers", "mapped_private_ratio"} <= metrics, gates
    assert sweep.values("--history") and sweep.values("--out")


def test_nightly_keeps_history_and_uploads_everything_always():
    wf = load(NIGHTLY)
    (job,) = wf.jobs.values()
    steps = job["steps"]
    env = env_of(wf, job)
    sweep_index = next(i for i, s in enumerate(steps) if "harness run" in str(s.get("run", "")))
    sweep = next(c for c in commands(WORKFLOWS_DIR / NIGHTLY, "harness") if c.args[:1] == ["run"])
    history = expand(sweep.values("--history")[0], env)
    run_dir = expand(sweep.values("--out")[0], env)
    report_dir = commands(WORKFLOWS_DIR / NIGHTLY, "pytest")[0].values("--report-dir")[0]
    assert "$" not in history + run_dir, (history, run_dir)

    restores = [s for s in steps[:sweep_index] if uses(s, "actions/cache") or uses(s, "actions/download-artifact")]
    assert any(covered(history, path_list(s)) for s in restores), f"{history} is not restored before the sweep"
    saves = [s for s in steps[sweep_index + 1:] if uses(s, "actions/cache/save") or uses(s, "actions/upload-artifact")]
    assert any(covered(history, path_list(s)) and always(s) for s in saves), f"{history} is not saved, always"
    assert "cancelled()" in str(steps[sweep_index].get("if", "")) or always(steps[sweep_index]), \
        "the sweep should run even when the device tests failed"

    uploads = [s for s in steps if uses(s, "actions/upload-artifact")]
    assert uploads and all(always(s) for s in uploads), "artifacts must upload with if: always()"
    uploaded = [p for s in uploads for p in path_list(s)]
    for needed in (run_dir, report_dir, history):
        assert covered(needed, uploaded), f"{needed} is not uploaded: {uploaded}"


def test_windows_mapper_runs_the_mapper_suites_on_windows():
    wf = load(WINDOWS_MAPPER)
    assert {"push", "pull_request"} <= set(wf.triggers)
    (job,) = wf.jobs.values()
    assert any(lbl.startswith("windows") for lbl in labels(job)), labels(job)
    tests = commands(WORKFLOWS_DIR / WINDOWS_MAPPER, "pytest")
    assert any(any(a.rstrip("/\\") == "suites/mapper" for a in c.args) for c in tests), [c.line for c in tests]


def test_linux_runs_the_ci_script_and_uploads_report_artifacts():
    wf = load(LINUX)
    assert {"push", "pull_request"} <= set(wf.triggers)
    (job,) = wf.jobs.values()
    assert any(lbl.startswith("ubuntu") for lbl in labels(job)), labels(job)
    assert any(re.search(r"\bbash\s+\.ci/run\b", str(s.get("run", ""))) for _, s in wf.steps())
    env = env_of(wf, job)
    artifact_dir = env.get("REPORT_ARTIFACT_DIR")
    assert artifact_dir, "REPORT_ARTIFACT_DIR must be set for the browser test's screenshot"
    uploads = [s for s in job["steps"] if uses(s, "actions/upload-artifact")]
    assert any(always(s) and expand(artifact_dir, env) in [expand(p, env) for p in path_list(s)]
               for s in uploads), "REPORT_ARTIFACT_DIR must be uploaded with if: always()"


def test_actions_are_pinned_to_a_major_version():
    for path in workflow_files():
        for ref in re.findall(r"uses:\s*([^\s#]+)", path.read_text(encoding="utf-8")):
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@(v\d+(\.\d+)*|[0-9a-f]{40})", ref), f"{path.name}: unpinned {ref}"
