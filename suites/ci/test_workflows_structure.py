"""The structure of the GitHub Actions workflows on the parsed YAML (PyYAML; skipped with the
reason when it is not installed): triggers, runners, the device matrix and its fleet merge, the
Windows lanes, the qnn sweep with its gates, histories that survive a failing step, and
artifacts uploaded whatever happened. `if:` conditions are evaluated (workflow_support's
`condition_holds`), not pattern-matched."""

from __future__ import annotations

import fnmatch
import re

import pytest
from workflow_support import (
    EXPECTED,
    LINUX,
    NIGHTLY,
    ROOT,
    STANDARD_SELF_HOSTED_LABELS,
    WINDOWS_ARM64,
    WINDOWS_MAPPER,
    Situation,
    Workflow,
    always,
    condition_holds,
    covered,
    custom_labels,
    env_of,
    expand,
    labels,
    load,
    matrix_entries,
    path_list,
    runner_label_sets,
    step_commands,
    uses,
    windows_steps,
    with_input,
    workflow_files,
)

#: A step earlier in the job failed (e.g. the device tests), the run was not cancelled, and every
#: step these conditions name (install, restore) succeeded.
AFTER_A_FAILED_STEP = Situation(failed=True)
AFTER_CANCEL = Situation(failed=True, cancelled=True)
DEVICE_GATES = {
    "failed_workers",
    "fallback_workers",
    "unknown_sessions",
    "retried_sessions",
    "mapped_private_ratio",
    "init_ratio",
}


def gate_metrics(gates: list[str]) -> set[str]:
    return {re.match(r"\s*(\w+)", g).group(1) for g in gates}


def harness_steps(wf: Workflow, job: dict, sub: str) -> list[tuple[int, dict, object]]:
    """(index, step, command) of each `python -m harness SUB` in the job's steps."""
    return [
        (i, step, cmd)
        for i, step in enumerate(job["steps"])
        for cmd in step_commands(step, "harness", wf.name)
        if cmd.args[:1] == [sub]
    ]


def pytest_commands(wf: Workflow, job: dict) -> list:
    return [c for step in job["steps"] for c in step_commands(step, "pytest", wf.name)]


def device_job(wf: Workflow) -> tuple[str, dict]:
    found = [(jid, j) for jid, j in wf.jobs.items() if (j.get("strategy") or {}).get("matrix")]
    assert len(found) == 1, f"{wf.name}: expected one matrix job over device kinds, got {[j for j, _ in found]}"
    return found[0]


def jobs_on(runner: str) -> list[tuple[Workflow, str, dict]]:
    return [
        (wf, jid, job)
        for wf in map(load, EXPECTED)
        for jid, job in wf.jobs.items()
        if runner in {lbl for s in runner_label_sets(job) for lbl in s}
    ]


# --------------------------------------------------------------------------- every workflow


def test_every_job_has_a_timeout():
    for name in EXPECTED:
        wf = load(name)
        for job_id, job in wf.jobs.items():
            assert job.get("timeout-minutes"), f"{name}: job {job_id} has no timeout-minutes"


def test_actions_are_pinned_to_a_major_version():
    for path in workflow_files():
        for ref in re.findall(r"uses:\s*([^\s#]+)", path.read_text(encoding="utf-8")):
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@(v\d+(\.\d+)*|[0-9a-f]{40})", ref), f"{path.name}: unpinned {ref}"


def test_every_self_hosted_label_is_declared_for_actionlint():
    """actionlint checks literal runs-on labels but not those that come through a matrix."""
    declared = custom_labels() | STANDARD_SELF_HOSTED_LABELS
    for name in EXPECTED:
        for job_id, job in load(name).jobs.items():
            for label_set in runner_label_sets(job):
                if "self-hosted" in label_set:
                    missing = set(label_set) - declared
                    assert not missing, f"{name}/{job_id}: declare {sorted(missing)} in suites/ci/actionlint.yaml"


def test_upload_steps_always_run():
    for name in EXPECTED:
        wf = load(name)
        for job_id, job in wf.jobs.items():
            for step in job["steps"]:
                if uses(step, "actions/upload-artifact"):
                    assert condition_holds(step, AFTER_A_FAILED_STEP) and condition_holds(step, AFTER_CANCEL), (
                        f"{name}/{job_id}: {step.get('name')} must upload with if: always()"
                    )


def _history_writers() -> list[tuple[Workflow, str, dict, int, dict, str]]:
    """(workflow, job id, job, step index, step, history path) of every `harness run|report
    --history H` in every workflow."""
    found = []
    for name in EXPECTED:
        wf = load(name)
        for job_id, job in wf.jobs.items():
            for index, step, cmd in [*harness_steps(wf, job, "run"), *harness_steps(wf, job, "report")]:
                if cmd.values("--history"):
                    history = expand(cmd.values("--history")[0], env_of(wf, job, step))
                    assert "$" not in history, (name, job_id, history)
                    found.append((wf, job_id, job, index, step, history))
    return found


def _check_restores(where: str, steps: list[dict], index: int, history: str) -> list[dict]:
    restores = [
        (i, s)
        for i, s in enumerate(steps)
        if (uses(s, "actions/cache/restore") or uses(s, "actions/download-artifact")) and covered(history, path_list(s))
    ]
    assert restores, f"{where}: nothing restores {history}"
    for i, restore in restores:
        assert i < index, f"{where}: {history} is restored at step {i}, after it is written at step {index}"
        assert condition_holds(restore, AFTER_A_FAILED_STEP), (
            f"{where}: '{restore.get('name')}' is skipped after a failed step (its if: needs !cancelled())"
        )
    return [s for _, s in restores]


def _check_saves(where: str, steps: list[dict], index: int, history: str, restores: list[dict]) -> None:
    saves = [(i, s) for i, s in enumerate(steps) if uses(s, "actions/cache/save") and covered(history, path_list(s))]
    assert saves, f"{where}: nothing saves {history}"
    restore_ids = {s.get("id") for s in restores} - {None}
    assert restore_ids, f"{where}: give the restore step an id, so the save can check its outcome"
    for i, save in saves:
        name = save.get("name")
        assert i > index, f"{where}: {history} is saved at step {i}, before it is written"
        assert condition_holds(save, AFTER_A_FAILED_STEP), f"{where}: '{name}' is skipped after a failed step"
        assert not condition_holds(save, AFTER_CANCEL), (
            f"{where}: '{name}' would save a possibly torn history after a cancellation"
        )
        for rid in restore_ids:
            assert not condition_holds(save, Situation(failed=True, outcomes={rid: "failure"})), (
                f"{where}: '{name}' saves even when '{rid}' failed to restore"
            )
        for restore in restores:
            if uses(restore, "actions/cache"):
                key, prefixes = with_input(restore, "key"), with_input(restore, "restore-keys").split()
                assert with_input(save, "key") == key, f"{where}: restore and save use different keys"
                assert "github.run_id" in key, f"{where}: a rolling key needs a new value every run"
                assert any(key.startswith(p) for p in prefixes), f"{where}: restore-keys do not match {key}"


def test_every_history_survives_a_failing_step():
    """The nightly history survives a failing test step, in every job that writes one.

    For each `harness run|report --history H`: a restore of H (Actions cache or artifact) comes
    before it, and it and that restore both run after an earlier step failed; a save of H comes
    after it and runs after a failed step too, but not after a cancellation (the history may be
    torn mid-append: tomorrow restores the last good one instead) nor when the restore failed
    (a one-night file under a newer key would hide the real history from every later night)."""
    writers = _history_writers()
    for wf, job_id, job, index, step, history in writers:
        where = f"{wf.name}/{job_id}"
        assert condition_holds(step, AFTER_A_FAILED_STEP), f"{where}: '{step.get('name')}' must run after a failure"
        restores = _check_restores(where, job["steps"], index, history)
        _check_saves(where, job["steps"], index, history, restores)
    assert len(writers) >= 2, "expected a device sweep and a fleet merge that write a --history"


# --------------------------------------------------------------------------- nightly


def test_nightly_triggers_and_device_matrix():
    wf = load(NIGHTLY)
    schedule = wf.triggers.get("schedule") or []
    assert schedule and all(s.get("cron") for s in schedule), "nightly needs a schedule: cron trigger"
    assert "workflow_dispatch" in wf.triggers
    _, job = device_job(wf)
    assert job["strategy"].get("fail-fast") is False, "one failing device kind must not cancel the others"
    entries = matrix_entries(job)
    kinds = [e.get("kind") for e in entries]
    assert len(kinds) >= 2 and all(kinds) and len(set(kinds)) == len(kinds), f"device kinds: {kinds}"
    label_sets = runner_label_sets(job)
    assert len(label_sets) == len(entries), "runs-on must come from the matrix entry of each kind"
    for kind, label_set in zip(kinds, label_sets, strict=True):
        assert {"self-hosted", "windows", "arm64"} <= set(label_set), (kind, label_set)
    for a, b in [(a, b) for a in range(len(kinds)) for b in range(len(kinds)) if a != b]:
        assert not set(label_sets[a]) <= set(label_sets[b]), (
            f"a {kinds[b]} runner also matches {kinds[a]}'s labels {label_sets[a]}: give each kind its own label"
        )


def test_nightly_never_overlaps_on_one_device_kind():
    wf = load(NIGHTLY)
    _, job = device_job(wf)
    concurrency = job.get("concurrency") or {}
    assert "matrix.kind" in str(concurrency.get("group", "")), "one concurrency group per device kind"
    assert concurrency.get("cancel-in-progress") is False, "a second nightly must queue, never cancel a measurement"


def test_nightly_device_job_runs_the_tests_and_the_labelled_qnn_sweep():
    wf = load(NIGHTLY)
    _, job = device_job(wf)
    env = env_of(wf, job)
    marker_exprs = [e for c in pytest_commands(wf, job) for e in c.values("-m")]
    assert any({"qnn", "device"} <= set(re.findall(r"\w+", e)) for e in marker_exprs), marker_exprs
    assert any(c.values("--fmw-report-dir") for c in pytest_commands(wf, job)), "pytest keeps its run folders"

    ((_, step, sweep),) = harness_steps(wf, job, "run")
    assert sweep.values("--target") == ["qnn"]
    (processes,) = sweep.values("--processes")
    assert len(processes.split(",")) >= 2, "a sweep over several N"
    missing = DEVICE_GATES - gate_metrics(sweep.values("--gate"))
    assert not missing, f"device gates missing: {sorted(missing)}"
    assert "--no-default-gates" not in sweep.args
    labels_given = [expand(v, env_of(wf, job, step), keep_expressions=True) for v in sweep.values("--label")]
    assert any(v.startswith("device=") and "matrix.kind" in v for v in labels_given), (
        f"the sweep must be labelled device=<kind>: {sweep.values('--label')}"
    )
    assert "matrix.kind" in expand(sweep.values("--out")[0], env, keep_expressions=True), (
        "each kind's run folder needs its own name: it is the run id in the fleet report and history"
    )
    assert condition_holds(step, AFTER_A_FAILED_STEP), "the sweep runs even when the device tests failed"
    assert not condition_holds(step, Situation(failed=True, outcomes={"install": "failure"})), (
        "no sweep without an install"
    )


def test_nightly_device_job_uploads_its_run_folder_and_history_tagged_with_the_kind():
    wf = load(NIGHTLY)
    _, job = device_job(wf)
    env = env_of(wf, job)
    ((_, _, sweep),) = harness_steps(wf, job, "run")
    history, run_dir = (expand(sweep.values(o)[0], env) for o in ("--history", "--out"))
    report_dir = pytest_commands(wf, job)[0].values("--fmw-report-dir")[0]
    uploads = [s for s in job["steps"] if uses(s, "actions/upload-artifact")]
    assert uploads
    uploaded = [p for s in uploads for p in path_list(s)]
    for needed in (run_dir, report_dir, history):
        assert covered(needed, uploaded), f"{needed} is not uploaded: {uploaded}"
    for step in uploads:
        assert "matrix.kind" in with_input(step, "name"), "artifact names must carry the device kind"


def test_fleet_job_merges_every_device_into_one_report_and_history():
    wf = load(NIGHTLY)
    device_id, device = device_job(wf)
    merges = [(jid, j) for jid, j in wf.jobs.items() if jid != device_id and harness_steps(wf, j, "report")]
    assert len(merges) == 1, f"expected one fleet merge job, got {[j for j, _ in merges]}"
    merge_id, merge = merges[0]
    needs = merge.get("needs") or []
    assert device_id in ([needs] if isinstance(needs, str) else needs), f"{merge_id} must need {device_id}"
    assert condition_holds(merge, Situation(failed=True)), f"{merge_id} must run when a device job failed"
    assert any(lbl.startswith("ubuntu") for lbl in labels(merge)), labels(merge)

    plain_install = re.compile(r"pip install[^\n]*-e\s+['\"]?\.(?![\w\[])")
    installs = [s for s in merge["steps"] if plain_install.search(str(s.get("run", "")))]
    assert installs, f"{merge_id} must install the project (pip install -e .)"

    uploaded_names = [with_input(s, "name") for s in device["steps"] if uses(s, "actions/upload-artifact")]
    downloads = [s for s in merge["steps"] if uses(s, "actions/download-artifact")]
    assert downloads, f"{merge_id} must download the device artifacts"
    for name in uploaded_names:
        text = re.sub(r"\$\{\{.*?\}\}", "x", name)
        assert any(fnmatch.fnmatch(text, with_input(s, "pattern") or with_input(s, "name")) for s in downloads), (
            f"{merge_id} does not download {name}"
        )

    ((index, step, report),) = harness_steps(wf, merge, "report")
    folders = [
        a
        for a in report.args[1:]
        if not a.startswith("-") and a not in report.values("--out") and a not in report.values("--history")
    ]
    assert len(folders) >= 2 or any("[@]" in f or "*" in f for f in folders), (
        f"the report must take every device's run folder: {report.line}"
    )
    assert report.values("--history") and report.values("--out"), report.line
    assert "--no-default-gates" in report.args, "the device jobs judged their gates; the merge only merges"
    out_dir = report.values("--out")[0].rsplit("/", 1)[0]
    uploads = [s for s in merge["steps"][index + 1 :] if uses(s, "actions/upload-artifact")]
    history = expand(report.values("--history")[0], env_of(wf, merge, step))
    for needed in (report.values("--out")[0], history):
        assert any(covered(needed, path_list(s)) for s in uploads), f"{needed} is not uploaded"
    assert out_dir and covered(history, [out_dir]), "the fleet report and the fleet history live together"


# --------------------------------------------------------------------------- Windows lanes


def test_windows_x64_mapper_job_still_runs_the_mapper_suites():
    wf = load(WINDOWS_MAPPER)
    assert {"push", "pull_request"} <= set(wf.triggers)
    (job,) = wf.jobs.values()
    assert labels(job) == ["windows-latest"], labels(job)
    tests = pytest_commands(wf, job)
    assert any(any(a.rstrip("/\\") == "suites/mapper" for a in c.args) for c in tests), [c.line for c in tests]


def test_windows_x64_job_runs_the_qnn_load_path_to_a_verdict():
    """onnxruntime-qnn ships win_amd64 too (the EP prints the platform gate there): the x64 lane
    runs one tiny qnn harness run that must end with a verdict (exit 0..2, no traceback), even
    after failing mapper tests, and uploads its run folder."""
    wf = load(WINDOWS_MAPPER)
    (job,) = wf.jobs.values()
    qnn = [(s, c) for _, s, c in harness_steps(wf, job, "run") if c.values("--target") == ["qnn"]]
    assert len(qnn) == 1, "one tiny qnn harness run"
    step, run = qnn[0]
    assert "windows_steps.py qnn-run" in str(step["run"]), "the verdict rule is the steps script's (judge_qnn_run)"
    assert condition_holds(step, AFTER_A_FAILED_STEP), "the qnn run reports even when the mapper tests failed"
    uploaded = [p for s in job["steps"] if uses(s, "actions/upload-artifact") for p in path_list(s)]
    assert covered(run.values("--out")[0], uploaded), uploaded


def _arm64_job() -> tuple[Workflow, dict]:
    found = jobs_on("windows-11-arm")
    assert len(found) == 1, f"expected one job on windows-11-arm, got {[(w.name, j) for w, j, _ in found]}"
    wf, _, job = found[0]
    assert wf.name == WINDOWS_ARM64
    return wf, job


def test_windows_arm64_job_uses_native_arm64_python_311_in_a_venv():
    wf, job = _arm64_job()
    assert {"push", "pull_request"} <= set(wf.triggers)
    (setup,) = [s for s in job["steps"] if uses(s, "actions/setup-python")]
    assert str(with_input(setup, "python-version")) == "3.11"
    assert with_input(setup, "architecture") == "arm64", "native arm64 Python, not x64 under emulation"
    script = "\n".join(str(s.get("run", "")) for s in job["steps"])
    assert re.search(r"\.venv\\Scripts.*GITHUB_PATH", script), "run from .venv\\Scripts, the launcher case"
    assert (job.get("defaults") or {}).get("run", {}).get("shell") == "pwsh"


def test_windows_arm64_job_runs_mapper_suites_cpu_run_with_private_bytes_gate_and_qnn_doctor():
    from harness.core.units import parse_size

    wf, job = _arm64_job()
    tests = pytest_commands(wf, job)
    assert any(any(a.rstrip("/\\") == "suites/mapper" for a in c.args) for c in tests), "mapper suites"

    runs = harness_steps(wf, job, "run")
    cpu = [(s, c) for _, s, c in runs if c.values("--target") in ([], ["cpu"])]
    assert len(cpu) == 1, "one cpu harness run"
    step, run = cpu[0]
    processes = [int(n) for n in run.values("--processes")[0].split(",")]
    assert max(processes) >= 2 and len(processes) >= 2, "N = 1 and N >= 2: the ratio needs two sharers"
    assert parse_size(run.values("--model-size")[0]) >= 128 * 1024**2, "the default saving gates need W >= 128 MiB"
    assert "--no-default-gates" not in run.args
    assert {"failed_workers", "mapped_private_ratio"} <= gate_metrics(run.values("--gate")), run.values("--gate")
    assert condition_holds(step, AFTER_A_FAILED_STEP), "the cpu run reports even when the mapper tests failed"

    doctors = harness_steps(wf, job, "doctor")
    assert doctors, "the QNN EP doctor runs"
    ((_, _, doctor),) = doctors
    assert doctor.values("--target") == ["qnn"] and doctor.values("--json"), doctor.line

    qnn = [(s, c) for _, s, c in runs if c.values("--target") == ["qnn"]]
    assert len(qnn) == 1, "one tiny qnn harness run"
    step, probe = qnn[0]
    assert "windows_steps.py qnn-run" in str(step["run"]), "the verdict rule is the steps script's (judge_qnn_run)"

    uploads = [s for s in job["steps"] if uses(s, "actions/upload-artifact")]
    uploaded = [p for s in uploads for p in path_list(s)]
    for needed in (run.values("--out")[0], probe.values("--out")[0], doctor.values("--json")[0]):
        assert covered(needed, uploaded), f"{needed} is not uploaded: {uploaded}"


def _steps_run(job: dict) -> list[str]:
    """The `.ci/windows_steps.py` steps a job runs, in order."""
    found = []
    for step in job["steps"]:
        for line in str(step.get("run", "")).splitlines():
            match = re.search(r"\.ci[\\/]windows_steps\.py\s+([\w-]+)", line)
            if match:
                found.append(match.group(1))
    return found


def test_every_windows_lane_runs_the_same_steps():
    """One set of steps (issue 33 item 5): both hosted Windows workflows and the Wine lane run
    every step of `.ci/windows_steps.py`, in its order, so the day a hosted lane first runs it
    runs what the Wine lane runs on every Linux CI run."""
    import importlib.util

    steps = list(windows_steps().STEPS)
    spec = importlib.util.spec_from_file_location("wine_lane", ROOT / ".ci" / "wine_lane.py")
    lane = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lane)
    assert list(lane.LANE_STEPS) == steps, "the Wine lane"
    for name in (WINDOWS_MAPPER, WINDOWS_ARM64):
        (job,) = load(name).jobs.values()
        assert _steps_run(job) == steps, name
        for step in job["steps"]:
            if "windows_steps.py" in str(step.get("run", "")):
                assert condition_holds(step, AFTER_A_FAILED_STEP), f"{name}: {step['name']} runs after a failed step"
                assert not condition_holds(step, Situation(failed=True, outcomes={"install": "failure"})), (
                    f"{name}: {step['name']} must not run after a failed install"
                )


@pytest.mark.parametrize(
    "code, stderr, verdict",
    [
        (0, "", True),
        (1, "error: gate failed", True),
        (2, "error: no HTP backend", True),
        (2, "", False),  # a failure without its reason
        (1, "Traceback (most recent call last):\n  ...\nValueError: x", False),
        (-1073741819, "", False),  # STATUS_ACCESS_VIOLATION: a crash, not a verdict
        (3, "error: x", False),
    ],
)
def test_the_qnn_run_step_accepts_a_verdict_and_nothing_else(code, stderr, verdict):
    """The tiny qnn run's rule, as the steps script applies it on every Windows lane."""
    assert (windows_steps().judge_qnn_run(code, stderr) is None) is verdict


WINE_PLATFORM = "platform: Windows under Wine 8.0 (AMD64)"


@pytest.mark.parametrize(
    "progress, results, named",
    [
        (f"{WINE_PLATFORM}\npreparing the cpu model...\n", f"{WINE_PLATFORM}: private bytes...\n", True),
        (f"FutureWarning: x\n{WINE_PLATFORM}\npreparing the cpu model...\n", f"{WINE_PLATFORM}: p\n", True),
        (f"preparing the cpu model...\n{WINE_PLATFORM}\n", f"{WINE_PLATFORM}: p\n", False),  # not first
        (f"{WINE_PLATFORM}\npreparing the cpu model...\n", "file-mapped weights: mapped vs heap\n", False),
        ("platform: Windows (AMD64)\npreparing the cpu model...\n", "platform: Windows (AMD64): p\n", False),
    ],
)
def test_the_cpu_run_step_needs_the_platform_named_first(monkeypatch, progress, results, named):
    """Issue 44: a Windows run says Windows (and Wine) on its first lines; under Wine 8.0 here."""
    steps = windows_steps()
    monkeypatch.setattr(steps, "wine_version", lambda: "8.0")
    assert (steps.unnamed_platform(progress, results) == []) is named


def test_ci_runs_the_wine_lane_after_the_readme_test_command():
    """`.ci/run` runs the Wine lane where Wine is installed, as a step of its own after the
    README's test command (not part of it)."""
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    tests = script.index("python -m pytest -n auto")
    lane = script.index("bash .ci/windows_checks.sh lane")
    assert lane > tests, "the Wine lane runs after the README's test command"
    checks = (ROOT / ".ci" / "windows_checks.sh").read_text(encoding="utf-8")
    assert "python .ci/wine_lane.py" in checks and "have_tools ||" in checks, "only where Wine is installed"


# --------------------------------------------------------------------------- Linux


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
    assert any(always(s) and expand(artifact_dir, env) in [expand(p, env) for p in path_list(s)] for s in uploads), (
        "REPORT_ARTIFACT_DIR must be uploaded with if: always()"
    )


@pytest.mark.parametrize(
    "expr, situation, expected",
    [
        ("", AFTER_A_FAILED_STEP, False),
        ("${{ steps.install.outcome == 'success' }}", AFTER_A_FAILED_STEP, False),
        ("${{ !cancelled() }}", AFTER_A_FAILED_STEP, True),
        ("${{ !cancelled() }}", AFTER_CANCEL, False),
        ("always()", AFTER_CANCEL, True),
        ("${{ always() && hashFiles('x') != '' }}", Situation(files_exist=False), False),
        (
            "${{ !cancelled() && steps.r.outcome == 'success' }}",
            Situation(failed=True, outcomes={"r": "failure"}),
            False,
        ),
    ],
)
def test_condition_reader(expr, situation, expected):
    """The `if:` reader the history checks rely on, on GitHub's documented rules (no `if:` is
    success(); an expression without a status function gets `success() &&`)."""
    assert condition_holds({"if": expr} if expr else {}, situation) is expected


def test_nightly_compares_with_the_previous_night_and_fails_on_a_regression():
    """Each device compares tonight's sweep with the previous night's (kept in the history
    cache) with --fail-on-regression, writes the comparison as JSON into the artifact, and then
    keeps tonight's tables as the next baseline."""
    wf = load(NIGHTLY)
    _, job = device_job(wf)
    env = env_of(wf, job)
    ((sweep_index, _, sweep),) = harness_steps(wf, job, "run")
    ((index, step, report),) = harness_steps(wf, job, "report")
    assert index > sweep_index, "the comparison needs tonight's sweep"
    assert "--fail-on-regression" in report.args and report.values("--json"), report.args
    run_dir = expand(sweep.values("--out")[0], env)
    assert expand(report.args[1], env) == run_dir, "the comparison is of tonight's run folder"
    (baseline,) = report.values("--baseline")
    assert baseline.startswith("history/"), "the baseline travels with the history cache"
    uploaded = [p for s in job["steps"] if uses(s, "actions/upload-artifact") for p in path_list(s)]
    assert covered(expand(report.values("--json")[0], env), uploaded), "the comparison JSON is uploaded"
    assert condition_holds(step, AFTER_A_FAILED_STEP), "a failed test step must not hide a regression"
    assert not condition_holds(step, Situation(files_exist=False)), "the first night has no baseline to compare with"
    keep = [
        (i, s)
        for i, s in enumerate(job["steps"])
        if baseline in str(s.get("run", "")) and "Copy-Item" in str(s.get("run", ""))
    ]
    assert keep and keep[0][0] > index, "tonight's tables become the next baseline, after the comparison"
    saves = [i for i, s in enumerate(job["steps"]) if uses(s, "actions/cache/save")]
    assert saves and keep[0][0] < min(saves), "kept before the history cache is saved"
