"""The workflows' steps replayed, not read: what each would do on its first real run.

- The fleet merge's own ``run:`` script runs under bash over an artifact tree laid out as
  ``actions/download-artifact`` leaves it (each artifact in a folder of its name, but one match
  extracted flat): device kinds, each artifact with last night's ``history/last-run`` and the
  pytest run folders beside tonight's sweep (a real run folder), one kind re-run (two attempts'
  artifacts), one kind whose sweep did not finish. The report command it reaches is recorded by
  a ``python`` on PATH and run for real.
- The history caches: GitHub's restore rule (exact key, then each restore key as a prefix of a
  saved key, newest first) played over every kind's saved keys, with kinds whose names prefix
  each other.
- The install on a Windows ARM64 runner: the project's requirements evaluated for win_arm64
  CPython 3.11 and, with ``-m slow``, resolved by pip for that platform, wheels only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from workflow_support import (
    LINUX,
    NIGHTLY,
    ROOT,
    WINDOWS_ARM64,
    WINDOWS_MAPPER,
    Situation,
    condition_holds,
    load,
    matrix_entries,
    with_input,
    workflow_files,
)

RUN_NUMBER = 41


def _fleet_step() -> tuple[dict, dict]:
    wf = load(NIGHTLY)
    for job in wf.jobs.values():
        for step in job.get("steps", []):
            if step.get("id") == "merge":
                return job, step
    raise AssertionError("nightly-device.yml has no step with id: merge")


def _device_artifact(staging: Path, kind: str, attempt: int, *, finished: bool) -> Path:
    """``<artifact>/`` as the device job uploads it (nightly/, history/, reports-out/); a finished
    sweep is a real run folder (the runner's own writer), so the report the merge runs is real."""
    sys.path.insert(0, str(ROOT / "suites" / "reports"))
    from report_fixtures import fake_results, write_run

    artifact = staging / f"nightly-device-{kind}-{RUN_NUMBER}-{attempt}"
    sweep = artifact / "nightly" / f"{kind}-run-{RUN_NUMBER}-{attempt}"
    if finished:
        write_run(sweep, fake_results(processes=(1, 2)))
    else:
        sweep.mkdir(parents=True)
        (sweep / "metadata.json").write_text('{"status": "running"}\n')
    (artifact / "nightly" / f"doctor-{kind}.json").write_text("{}\n")
    last = artifact / "history" / "last-run"
    last.mkdir(parents=True)
    for name in ("metadata.json", "results.csv", "summary.csv"):
        (last / name).write_text("last night\n")
    (artifact / "history" / "nightly-history.csv").write_text("history\n")
    pytest_run = artifact / "reports-out" / "runs" / "test_x"
    pytest_run.mkdir(parents=True)
    (pytest_run / "results.csv").write_text("a test's run\n")
    # an older night's sweep folder in the same artifact layout must never count as tonight's
    older = artifact / "nightly" / f"{kind}-run-{RUN_NUMBER - 1}-1"
    older.mkdir()
    (older / "results.csv").write_text("older\n")
    return sweep


def _download(staging: Path, devices: Path, pattern: str) -> None:
    """What actions/download-artifact (v5+) does with ``pattern`` and ``path: devices``: every
    matching artifact into ``devices/<name>/``, but ONE match straight into ``devices/``."""
    import fnmatch

    names = sorted(p.name for p in staging.iterdir() if fnmatch.fnmatchcase(p.name, pattern))
    for name in names:
        shutil.copytree(staging / name, devices if len(names) == 1 else devices / name, dirs_exist_ok=True)


def _replay_fleet_merge(tmp_path: Path, build) -> tuple[subprocess.CompletedProcess, list[list[str]], str]:
    job, step = _fleet_step()
    work = tmp_path / "workspace"
    (work / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "fleet_runs.py", work / ".ci" / "fleet_runs.py")
    staging = tmp_path / "artifacts"
    build(staging)
    download = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact"))
    _download(staging, work / with_input(download, "path"), with_input(download, "pattern"))
    shim_dir, calls = tmp_path / "bin", tmp_path / "report-calls.txt"
    shim_dir.mkdir()
    shim = shim_dir / "python"
    shim.write_text(  # records the harness call, then runs it (and everything else) for real
        "#!/bin/sh\n"
        'if [ "$1" = "-m" ] && [ "$2" = "harness" ]; then\n'
        f'  printf "%s\\0" "$@" >> "{calls}"; printf "\\n" >> "{calls}"\n'
        "fi\n"
        f'exec "{sys.executable}" "$@"\n'
    )
    shim.chmod(0o755)
    summary = tmp_path / "summary.md"
    env = {
        **os.environ,
        **{k: str(v) for k, v in (job.get("env") or {}).items()},
        "RUN_NUMBER": str(RUN_NUMBER),
        "GITHUB_STEP_SUMMARY": str(summary),
        "PATH": f"{shim_dir}{os.pathsep}{os.environ['PATH']}",
    }
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", step["run"]],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    recorded = calls.read_text() if calls.exists() else ""
    report_calls = [[a for a in line.split("\0") if a] for line in recorded.splitlines() if line]
    return proc, report_calls, summary.read_text() if summary.exists() else ""


def _merged(tmp_path: Path, args: list[str]) -> list[str]:
    """The run folders a report call merged, after checking the real report and history exist."""
    work = tmp_path / "workspace"
    assert (work / "fleet" / "report.html").is_file(), "the fleet report was not written"
    assert (work / "fleet" / "history.csv").is_file(), "the fleet history was not written"
    return sorted(a for a in args if a.startswith("devices/"))


def test_fleet_merge_takes_tonights_newest_finished_sweep_of_each_kind_once(tmp_path):
    def build(staging: Path) -> None:
        _device_artifact(staging, "snapdragon-x-elite", 1, finished=True)
        _device_artifact(staging, "snapdragon-x", 1, finished=True)
        _device_artifact(staging, "snapdragon-x", 2, finished=True)  # a re-run of the failed job
        _device_artifact(staging, "snapdragon-8cx-gen3", 1, finished=False)  # its sweep was killed

    proc, calls, summary = _replay_fleet_merge(tmp_path, build)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert len(calls) == 1, calls
    args = calls[0]
    assert args[:3] == ["-m", "harness", "report"], args
    assert _merged(tmp_path, args) == [
        f"devices/nightly-device-snapdragon-x-{RUN_NUMBER}-2/nightly/snapdragon-x-run-{RUN_NUMBER}-2",
        f"devices/nightly-device-snapdragon-x-elite-{RUN_NUMBER}-1/nightly/snapdragon-x-elite-run-{RUN_NUMBER}-1",
    ]
    assert "--no-default-gates" in args and "--history" in args
    _, step = _fleet_step()
    assert "${{ github.run_number }}" in str((step.get("env") or {}).get("RUN_NUMBER", "")), step.get("env")
    assert "::warning::snapdragon-8cx-gen3: not merged" in proc.stdout, proc.stdout
    assert "snapdragon-8cx-gen3" in summary and "Run folders merged (2)" in summary, summary


def test_fleet_merge_of_a_one_kind_fleet_reads_the_flat_download(tmp_path):
    """One artifact matched: download-artifact extracts it into devices/ itself, not
    devices/<name>/ (every night of a one-kind fleet, and any night only one kind ran)."""

    def build(staging: Path) -> None:
        _device_artifact(staging, "snapdragon-x-elite", 1, finished=True)

    proc, calls, _ = _replay_fleet_merge(tmp_path, build)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert (tmp_path / "workspace" / "devices" / "nightly").is_dir(), "the download was not flat"
    (args,) = calls
    assert _merged(tmp_path, args) == [f"devices/nightly/snapdragon-x-elite-run-{RUN_NUMBER}-1"]


def test_fleet_merge_falls_back_to_an_earlier_attempt_only_when_the_newest_did_not_finish(tmp_path):
    def build(staging: Path) -> None:
        _device_artifact(staging, "snapdragon-x-elite", 1, finished=True)
        _device_artifact(staging, "snapdragon-x-elite", 2, finished=False)

    proc, calls, _ = _replay_fleet_merge(tmp_path, build)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    (args,) = calls
    assert _merged(tmp_path, args) == [
        f"devices/nightly-device-snapdragon-x-elite-{RUN_NUMBER}-1/nightly/snapdragon-x-elite-run-{RUN_NUMBER}-1"
    ]
    assert "attempt 2 did not finish" in proc.stdout and "merged attempt 1" in proc.stdout, proc.stdout


def test_fleet_merge_with_no_finished_sweep_fails_and_never_reports_last_night(tmp_path):
    def build(staging: Path) -> None:
        _device_artifact(staging, "snapdragon-x-elite", 1, finished=False)

    proc, calls, _ = _replay_fleet_merge(tmp_path, build)
    assert proc.returncode != 0
    assert calls == [], "last night's history/last-run or a pytest run folder was merged as tonight's"
    assert "::error::no device finished a sweep" in proc.stdout, proc.stdout


# --------------------------------------------------------------------------- history caches


def _restored(restore_for: str, saved: list[tuple[str, str]], key: str, restore_keys: list[str]) -> str | None:
    """Which saved key GitHub's cache restores (exact key, else the newest saved key that the key
    or a restore key prefixes, each restore key in order); ``saved`` is (kind, key), oldest first."""
    keys = [k for _, k in saved]
    if key in keys:
        return key
    for prefix in [key, *restore_keys]:
        hits = [k for k in keys if k.startswith(prefix)]
        if hits:
            return hits[-1]
    return None


def _history_cache_steps() -> tuple[dict, dict, dict]:
    wf = load(NIGHTLY)
    job = next(j for j in wf.jobs.values() if (j.get("strategy") or {}).get("matrix"))
    restore = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/cache/restore"))
    save = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/cache/save"))
    return restore, save, job


def _fill(template: str, kind: str, run_id: int) -> str:
    text = template.replace("${{ matrix.kind }}", kind).replace("${{ github.run_id }}", str(run_id))
    return text.replace("${{ github.run_attempt }}", "1")


def test_a_device_kind_never_restores_another_kinds_history():
    """Kinds whose names prefix each other (the matrix's own plus `snapdragon-x` beside
    `snapdragon-x-elite`) each restore only their own history, whatever saved last."""
    restore, save, job = _history_cache_steps()
    kinds = [e["kind"] for e in matrix_entries(job)] + ["snapdragon-x", "snapdragon-x-elite-2"]
    for kind in kinds:
        assert re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", kind), f"device kind {kind!r}: use [a-z0-9-] only"
    for kind in kinds:
        others = [k for k in kinds if k != kind]
        saved = [(kind, _fill(with_input(save, "key"), kind, 100))]
        saved += [(o, _fill(with_input(save, "key"), o, 200 + i)) for i, o in enumerate(others)]
        key = _fill(with_input(restore, "key"), kind, 300)
        restore_keys = [_fill(line.strip(), kind, 300) for line in with_input(restore, "restore-keys").splitlines()]
        got = _restored(kind, saved, key, [k for k in restore_keys if k])
        assert got == saved[0][1], f"{kind} restored {got!r}, not its own history"


# --------------------------------------------------------------------------- Linux lane


#: The Debian release whose Wine the Wine tests (and their "Wine still deviates" checks) were
#: calibrated on, and where .ci/run runs: Debian 12, Wine 8.0.
CALIBRATED_DEBIAN = "bookworm"


def test_linux_lane_runs_ci_where_the_wine_tests_were_calibrated():
    """ubuntu-latest's apt has Wine 9: the lane runs .ci/run in a Debian 12 container (Wine 8),
    as root, so nothing but .ci/run installs packages."""
    wf = load(LINUX)
    (job,) = wf.jobs.values()
    container = job.get("container")
    image = container.get("image") if isinstance(container, dict) else container
    assert image and CALIBRATED_DEBIAN in str(image) and str(image).startswith("python:3.11"), image
    options = str(container.get("options", "")) if isinstance(container, dict) else ""
    assert "--user" not in options and "-u " not in options, f"the container must run as root: {options!r}"
    runs = [str(s.get("run", "")).strip() for s in job["steps"] if s.get("run")]
    assert runs == ["bash .ci/run"], f"the job runs .ci/run itself, and nothing else: {runs}"
    ci_run = (ROOT / ".ci" / "run").read_text(encoding="utf-8") + (ROOT / ".ci" / "windows_checks.sh").read_text()
    assert "bash .ci/windows_checks.sh install" in ci_run
    assert re.search(
        r"apt-get install [^\n]*\bwine64\b[^\n]*\bwine\b|apt-get install [^\n]*\bwine\b[^\n]*wine64", ci_run
    )
    assert "python .ci/wine_lane.py" in ci_run, "the Wine lane runs in this lane"


# --------------------------------------------------------------------------- Windows ARM64 install

_WIN_ARM64 = {
    "os_name": "nt",
    "sys_platform": "win32",
    "platform_machine": "ARM64",
    "platform_system": "Windows",
    "python_version": "3.11",
    "python_full_version": "3.11.9",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
#: Packages with no win_arm64 cp311 wheel on PyPI (checked with `pip download --platform
#: win_arm64 --python-version 3.11 --only-binary=:all:`): pip would build them from source on
#: every runner cache miss, and may fail with no compiler.
NO_WIN_ARM64_WHEEL = {"pyyaml"}


def _requirements_for(env: dict[str, str], extras: tuple[str, ...] = ("test",)) -> list[str]:
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    kept = []
    for line in lines:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({**env, "extra": ""}):
            req.marker = None
            kept.append(str(req))
    return kept


def test_the_windows_arm64_install_asks_for_no_package_without_a_wheel():
    names = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() for r in _requirements_for(_WIN_ARM64)}
    assert not names & NO_WIN_ARM64_WHEEL, f"win_arm64 would build {names & NO_WIN_ARM64_WHEEL} from source"
    assert {"onnxruntime", "onnxruntime-qnn", "pytest"} <= names, names


@pytest.mark.slow
def test_the_windows_arm64_install_resolves_to_wheels_only(tmp_path):
    """pip itself resolves the requirements for win_arm64 CPython 3.11, wheels only (needs PyPI)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--quiet",
            "--ignore-installed",
            "--target",
            str(tmp_path / "target"),
            "--platform",
            "win_arm64",
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "--only-binary=:all:",
            *_requirements_for(_WIN_ARM64),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


# --------------------------------------------------------------------------- Windows lanes, re-runs


def _lanes() -> list[tuple[str, dict]]:
    return [(name, job) for name in (WINDOWS_MAPPER, WINDOWS_ARM64) for job in load(name).jobs.values()]


def test_windows_steps_after_a_failed_install_do_not_run_but_survive_failed_tests():
    """A step that runs the project (pytest, harness) is skipped when the install failed (it
    would report a green notice or a misleading error), and still runs after a failed test."""
    for name, job in _lanes():
        install = next((s for s in job["steps"] if s.get("id") == "install"), None)
        assert install is not None, f"{name}: the install step needs id: install"
        after = job["steps"][job["steps"].index(install) + 1 :]
        runs_project = [
            s
            for s in after
            if re.search(r"python(\.exe)?\s+(-m\s+(harness|pytest)\b|\.ci/windows_steps\.py)", str(s.get("run", "")))
        ]
        assert runs_project, name
        for step in runs_project:
            failed_install = Situation(failed=True, outcomes={"install": "failure"})
            assert not condition_holds(step, failed_install), f"{name}: {step.get('name')} runs after a failed install"
            assert condition_holds(step, Situation(failed=True)), (
                f"{name}: {step.get('name')} skipped after a failed test"
            )


def test_every_artifact_name_is_unique_per_run_attempt():
    """`Re-run failed jobs` uploads again under the same run: a constant artifact name conflicts."""
    uploads = {}
    for path in workflow_files():
        wf = load(path.name)
        for job in wf.jobs.values():
            for step in job.get("steps", []):
                if str(step.get("uses", "")).startswith("actions/upload-artifact"):
                    name = with_input(step, "name")
                    uploads.setdefault(path.name, []).append(name)
                    assert "github.run_attempt" in name and "github.run_number" in name, f"{path.name}: {name!r}"
    # every workflow uploads what it ran (a check over no upload step would pass on nothing)
    assert set(uploads) == {LINUX, NIGHTLY, WINDOWS_ARM64, WINDOWS_MAPPER}, uploads


# --------------------------------------------------------------------------- the Windows checks of .ci/run


def _windows_checks(tmp_path: Path, action: str, *, uid: int, tools: bool, apt: int = 0, lane: int = 0):
    """`.ci/windows_checks.sh ACTION` with only shims on PATH: ``id`` says ``uid``, ``apt-get``
    exits ``apt``, wine and mingw exist when ``tools``, the lane (``python``) exits ``lane``."""
    shims = tmp_path / f"bin-{action}-{uid}-{tools}-{apt}-{lane}"
    shims.mkdir()
    scripts = {"id": f"echo {uid}", "apt-get": f"exit {apt}", "python": f"exit {lane}"}
    if tools:
        scripts |= {"wine": "exit 0", "x86_64-w64-mingw32-gcc": "exit 0"}
    for name, body in scripts.items():
        (shims / name).write_text(f"#!/bin/sh\n{body}\n")
        (shims / name).chmod(0o755)
    bash = shutil.which("bash")
    assert bash
    return subprocess.run(
        [bash, str(ROOT / ".ci" / "windows_checks.sh"), action],
        env={"PATH": str(shims)},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    "action, uid, tools, apt, lane, code, says",
    [
        ("install", 0, False, 100, 0, 1, "error: apt-get could not install wine, wine64"),
        ("install", 0, False, 0, 0, 1, "error: wine or x86_64-w64-mingw32-gcc is missing after the install"),
        ("install", 1000, False, 100, 0, 0, "warning: wine or gcc-mingw-w64-x86-64 is not installed"),
        ("install", 0, True, 100, 0, 0, ""),
        ("lane", 0, True, 0, 2, 1, "error: the Wine lane could not be set up"),
        ("lane", 0, True, 0, 1, 1, ""),
        ("lane", 0, True, 0, 0, 0, ""),
        ("lane", 1000, True, 0, 2, 0, "warning: the Wine lane could not be set up"),
        ("lane", 0, False, 0, 0, 1, "error: wine is not installed"),
    ],
)
def test_windows_checks_fail_loudly_where_they_were_meant_to_run(tmp_path, action, uid, tools, apt, lane, code, says):
    """As root (CI) a Windows check that cannot run fails .ci/run; elsewhere it warns and skips
    (before, a failed apt install and a lane that could not be set up only warned everywhere)."""
    proc = _windows_checks(tmp_path, action, uid=uid, tools=tools, apt=apt, lane=lane)
    assert proc.returncode == code, proc.stderr
    assert says in proc.stderr and (says or not proc.stderr.strip()), proc.stderr
