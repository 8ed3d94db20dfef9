"""The pytest plugin from a foreign project: a temporary folder outside this repository, with
no conftest, using only what ``pip install`` registered (the ``pytest11`` entry point).

Each test writes a small test file there and runs pytest on it in a subprocess, as another
project's CI would.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: A quick real run: 4 MiB of weights, one worker per mode.
SMALL_RUN = '"run", "--model-size", "4MiB", "--processes", "1", "--quiet"'
OPTIONS = ("--fmw-target", "--fmw-processes", "--fmw-model-size", "--fmw-model", "--fmw-report-dir")


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """An empty project outside the repository (no conftest, no ini of ours)."""
    assert REPO not in pytester.path.resolve().parents, pytester.path
    assert not (pytester.path / "conftest.py").exists()
    return pytester


def run_pytest(project: pytest.Pytester, *args: str, timeout: float = 300) -> pytest.RunResult:
    return project.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=timeout)


def test_entry_point_is_the_top_level_plugin_module():
    """The package declares its plugin as a top-level module of a name no project uses (the
    shadowing tests check a real install of it)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["entry-points"]["pytest11"] == {"qnn_fmw_harness": "qnn_fmw_harness_plugin"}
    assert project["tool"]["setuptools"]["py-modules"] == ["qnn_fmw_harness_plugin"]


def test_options_and_markers_are_declared(project):
    text = run_pytest(project, "--help").stdout.str()
    for option in OPTIONS:
        assert option in text
    for bare in ("--target", "--processes", "--model-size", "--model ", "--report-dir"):
        assert f"  {bare}" not in text, f"un-namespaced {bare} is declared"
    markers = run_pytest(project, "--markers").stdout.str()
    for marker in ("@pytest.mark.memory", "@pytest.mark.qnn", "@pytest.mark.device", "@pytest.mark.slow"):
        assert marker in markers


def test_fixtures_work_in_a_foreign_project(project):
    project.makepyfile(
        test_foreign=f"""
        import pytest
        from mapper_impl import load_weights

        def test_options(harness_options, model_cache):
            assert harness_options.target == "cpu" and harness_options.model_size == 128 * 1024**2
            assert harness_options.processes == [2] and harness_options.model is None
            assert harness_options.run_args() == ["--target", "cpu", "--processes", "2", "--model-size", "128MiB"]
            assert model_cache.is_dir()

        def test_mapper_fixtures(weights_file, mapper_leak_guard):
            with load_weights(weights_file) as w:
                assert w.path_taken == "mapped" and w.buffer.nbytes == 1 << 20

        def test_leak_guard_catches_a_leak(weights_file, mapper_leak_guard, request):
            request.config.leaked = load_weights(weights_file)  # never closed: must fail at teardown

        def test_run_harness(run_harness, harness_run_dir):
            outcome = run_harness({SMALL_RUN})
            assert outcome.returncode == 0, outcome.stderr
            assert len(outcome.results()) == 2
            head = outcome.headline()
            assert head["verdict"] == "pass" and head["feature"]["state"] == "active"
            assert (outcome.out / "report.html").is_file()
    """
    )
    result = run_pytest(project, "-v")
    result.assert_outcomes(passed=4, errors=1)
    assert "test_leak_guard_catches_a_leak ERROR" in result.stdout.str()
    assert "mapper_impl leaked" in result.stdout.str()


def test_report_dir_keeps_every_run_and_shows_each_outcome(project, tmp_path):
    """Under xdist: two tests produce runs (one then fails), one fails without a run; the
    controller renders one report with every outcome and no pass badge."""
    project.makepyfile(
        test_session=f"""
        def test_produces_a_run(run_harness):
            assert run_harness({SMALL_RUN}).returncode == 0

        def test_produces_a_run_then_fails(run_harness, tmp_path):
            outcome = run_harness({SMALL_RUN}, out=tmp_path / "elsewhere")
            assert outcome.returncode == 0
            assert False, "deliberate failure after a measured run"

        def test_fails_without_a_run():
            assert False, "deliberate"

        def test_usage_error_leaves_no_run(run_harness):
            assert run_harness("run", "--model-size", "256M").returncode == 2
    """
    )
    report_dir = tmp_path / "reports-out"
    result = run_pytest(project, "-n", "2", "--fmw-report-dir", str(report_dir))
    result.assert_outcomes(passed=2, failed=2)
    html = (report_dir / "report.html").read_text(encoding="utf-8")
    runs = sorted(p.name for p in (report_dir / "runs").iterdir())
    assert runs == ["test_session-test_produces_a_run", "test_session-test_produces_a_run_then_fails"], runs
    assert html.count('<section class="run"') == 2
    for nodeid, outcome in (
        ("test_session.py::test_produces_a_run", "passed"),
        ("test_session.py::test_produces_a_run_then_fails", "failed"),
        ("test_session.py::test_fails_without_a_run", "failed"),
    ):
        row = rf'outcome-{outcome}">{outcome}</td>\s*<td><code>[^<]*{re.escape(nodeid)}</code>'
        assert re.search(row, html), nodeid
    header = html.split("</header>")[0]
    assert '<span class="badge fail">tests: 2 failed, 2 passed</span>' in header
    assert 'class="badge pass"' not in header
    # the copied run is a run of its own, named after its folder
    meta = json.loads((report_dir / "runs" / runs[1] / "metadata.json").read_text())
    assert meta["run"]["run_id"] == runs[1]


def test_the_nightly_command_renders_a_qnn_report(project, tmp_path):
    """``pytest -m "qnn or device" --fmw-target qnn --fmw-report-dir DIR``: the qnn run is kept and
    rendered; on Linux its feature state (unavailable) is shown beside a badge that is not green."""
    pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn is not installed")
    from harness.targets.qnn.ep import qnn_platform_supported

    ok, why = qnn_platform_supported()
    if not ok:
        pytest.skip(why)
    project.makepyfile(
        test_nightly="""
        import pytest

        @pytest.mark.qnn
        def test_qnn_run(run_harness, harness_options):
            outcome = run_harness("run", "--target", harness_options.target, "--model-size", "4MiB",
                                  "--processes", "1", "--quiet")
            assert outcome.returncode == 0, outcome.stderr

        @pytest.mark.device
        def test_on_device():
            pass

        def test_not_selected():
            pass
    """
    )
    report_dir = tmp_path / "nightly"
    result = run_pytest(
        project, "-m", "qnn or device", "--fmw-target", "qnn", "--fmw-report-dir", str(report_dir), "-rs"
    )
    result.assert_outcomes(passed=1, skipped=1, deselected=1)
    assert "not a QNN device" in result.stdout.str()
    html = (report_dir / "report.html").read_text(encoding="utf-8")
    assert "target qnn" in html
    if not _on_device():
        assert 'class="badge feature-unavailable"' in html
        assert '<span class="badge pass-unexercised" title="verdict: pass"' in html
        assert '<span class="badge pass" title="verdict' not in html


def _on_device() -> bool:
    from harness.targets.qnn.device import device_skip_reason

    return device_skip_reason() is None


@pytest.mark.parametrize("marker", ["memory", "plain"])
def test_memory_tests_share_one_xdist_worker(project, tmp_path, marker):
    """memory tests run in one worker, so their measurements never overlap; the same tests
    without the marker (the control) spread over both workers. Grouping broke silently with
    pytest 9.2, whose node ids ignore the suffix xdist gives grouped tests."""
    log = tmp_path / "workers.txt"
    mark = "@pytest.mark.memory" if marker == "memory" else ""
    project.makepyfile(
        test_groups=f"""
        import os, time
        import pytest

        @pytest.mark.parametrize("i", range(4))
        {mark}
        def test_record(i):
            time.sleep(0.3)
            with open({str(log)!r}, "a") as f:
                f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    """
    )
    run_pytest(project, "-n", "2", "--dist", "load").assert_outcomes(passed=4)
    workers = set(log.read_text().split())
    assert len(workers) == (1 if marker == "memory" else 2), workers


def test_device_and_slow_markers_skip_with_their_reason(project):
    project.makepyfile(
        test_marks="""
        import pytest

        @pytest.mark.device
        def test_device():
            pass

        @pytest.mark.slow
        def test_slow():
            pass
    """
    )
    result = run_pytest(project, "-rs")
    if _on_device():
        result.assert_outcomes(passed=1, skipped=1)
    else:
        result.assert_outcomes(skipped=2)
        assert "not a QNN device: " in result.stdout.str()  # the probe's own reason
    assert "slow measurement: run with -m slow" in result.stdout.str()
    run_pytest(project, "-m", "slow").assert_outcomes(passed=1, deselected=1)


def test_a_report_that_cannot_be_written_does_not_break_the_session(project, tmp_path):
    project.makepyfile(test_ok="def test_ok():\n    pass\n")
    report_dir = tmp_path / "rd"
    (report_dir / "report.html").mkdir(parents=True)  # something that is not a file is in the way
    result = run_pytest(project, "--fmw-report-dir", str(report_dir))
    result.assert_outcomes(passed=1)
    assert result.ret == 0 and "INTERNALERROR" not in result.stdout.str()
    assert "qnn-fmw-harness: no report rendered:" in result.stdout.str()


def test_report_dir_never_empties_a_runs_folder_it_did_not_write(project, tmp_path):
    """The plugin is active in every project that installed the package: ``--fmw-report-dir .`` in a
    project whose runs/ is someone else's (TensorBoard's default folder) is refused in one line,
    with nothing deleted. Before, runs/ was emptied unconditionally. A runs/ of an earlier
    session is still emptied."""
    project.makepyfile(test_ok="def test_ok():\n    pass\n")
    report_dir = tmp_path / "project"
    (report_dir / "runs" / "exp1").mkdir(parents=True)
    (report_dir / "runs" / "exp1" / "events.out").write_text("weeks of training\n")
    result = run_pytest(project, "--fmw-report-dir", str(report_dir))
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    assert "runs/ holds what this plugin did not write (exp1)" in result.stderr.str()
    assert "Traceback" not in result.stderr.str()
    assert (report_dir / "runs" / "exp1" / "events.out").read_text() == "weeks of training\n"
    (report_dir / "runs").rename(tmp_path / "theirs")
    project.makepyfile(test_run=f"def test_run(run_harness):\n    assert run_harness({SMALL_RUN}).returncode == 0\n")
    run_pytest(project, "--fmw-report-dir", str(report_dir)).assert_outcomes(passed=2)
    again = run_pytest(project, "--fmw-report-dir", str(report_dir), "test_ok.py")
    again.assert_outcomes(passed=1)
    assert not any((report_dir / "runs").iterdir()), "an earlier session's runs/ was not emptied"
    assert "replaced the earlier session's 1 run folder(s) in runs/" in again.stderr.str(), "not said (issue 28)"


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("--fmw-model-size", "10KiB", "--fmw-model-size '10KiB': the generated model needs at least 64 KiB"),
        ("--fmw-model-size", "100GiB", "--fmw-model-size 100.0 GiB: at most 64.0 GiB"),
        ("--fmw-processes", "2000", "--fmw-processes 2000: at most 1024"),
        ("--fmw-processes", "1,x", "--fmw-processes '1,x': expected a list like 1,2,4,8"),
        ("--fmw-target", "gpu", "--fmw-target gpu: choose from cpu, ort-native, qnn, genai"),
        ("--fmw-model-size", "9" * 400 + "MiB", "is absurd: more than 8 EiB"),
    ],
    ids=["below-one-layer", "above-the-bound", "too-many-processes", "not-a-list", "unknown-target", "400-digits"],
)
def test_options_are_checked_as_run_checks_them(project, option, value, expected):
    """The plugin parses its run options with ``run``'s own types and bounds (one declaration):
    what ``python -m harness run`` refuses, the session refuses before it starts, in one line."""
    project.makepyfile(test_ok="def test_ok():\n    pass\n")
    result = run_pytest(project, option, value)
    errors = [line for line in result.stderr.str().splitlines() if line.startswith("ERROR:")]
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    assert len(errors) == 1 and expected in errors[0], result.stderr.str()
    assert "Traceback" not in result.stderr.str() and "passed" not in result.stdout.str()


@pytest.mark.parametrize("where", ["root", "cache", "inside-cache", "cache-under-runs"])
def test_report_dir_is_never_the_root_or_the_model_cache(project, monkeypatch, tmp_path, where):
    """The plugin empties DIR/runs/: `/`, the model cache, a folder inside it, or a DIR whose
    runs/ holds the cache are refused before the session (issue 42: they were accepted)."""
    cache = tmp_path / "cache"
    if where == "cache-under-runs":
        cache = tmp_path / "dir" / "runs"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(cache))
    chosen = {"root": Path("/"), "cache": cache, "inside-cache": cache / "x", "cache-under-runs": tmp_path / "dir"}
    project.makepyfile(test_ok="def test_ok():\n    pass\n")
    result = run_pytest(project, "--fmw-report-dir", str(chosen[where]))
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    errors = [line for line in result.stderr.str().splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "--fmw-report-dir" in errors[0], result.stderr.str()
    assert "passed" not in result.stdout.str() and list(cache.iterdir()) == []
