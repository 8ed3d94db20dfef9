"""The plugin must not break the projects that install it: with and without pytest-xdist under
``--strict-markers``, beside a conftest that declares the un-namespaced ``--model``,
``--target`` and ``--processes``, and in a project whose own ``harness`` and ``reports``
modules shadow the package's (checked on a real wheel install of this checkout).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

#: One xdist worker runs this module: its module fixtures (a run, a cache, an install) are made
#: once, not once on each worker (docs/testing.md).
pytestmark = pytest.mark.xdist_group("plugin_foreign")

REPO = Path(__file__).resolve().parents[2]
SMALL_RUN = '"run", "--model-size", "4MiB", "--processes", "1", "--quiet"'

MEMORY_TESTS = """
import pytest

@pytest.mark.memory
def test_measured(harness_options):
    assert harness_options.target == "cpu"

@pytest.mark.memory
@pytest.mark.parametrize("i", range(2))
def test_more(i):
    pass
"""

CLASHING_CONFTEST = """
def pytest_addoption(parser):
    parser.addoption("--model", default="theirs.onnx")
    parser.addoption("--target", default="gpu")
    parser.addoption("--processes", default="8")
"""

CLASHING_TESTS = """
def test_both_options(pytestconfig, harness_options):
    assert pytestconfig.getoption("--model") == "mine.onnx"
    assert pytestconfig.getoption("--target") == "gpu"
    assert pytestconfig.getoption("--processes") == "8"
    assert str(harness_options.model) == "ours.onnx" and harness_options.processes == [1, 2]
"""


def run_pytest(project: pytest.Pytester, *args: str, timeout: float = 300) -> pytest.RunResult:
    return project.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=timeout)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    assert REPO not in pytester.path.resolve().parents, pytester.path
    return pytester


@pytest.mark.parametrize("xdist", [["-p", "no:xdist"], ["-n", "2"]], ids=["without-xdist", "with-xdist"])
def test_memory_tests_under_strict_markers(project, xdist):
    """Without xdist the plugin adds no xdist_group (its marker would be unknown: exit 3,
    INTERNALERROR); with xdist the group holds."""
    project.makepyfile(test_memory=MEMORY_TESTS)
    result = run_pytest(project, "--strict-markers", *xdist)
    text = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in text and "xdist_group" not in text, text
    result.assert_outcomes(passed=3)
    assert result.ret == 0


@pytest.mark.parametrize("xdist", [["-p", "no:xdist"], ["-n", "2"]], ids=["without-xdist", "with-xdist"])
def test_beside_a_conftest_with_the_bare_option_names(project, xdist):
    """The project's own --model/--target/--processes and the plugin's --fmw-* live side by side."""
    project.makeconftest(CLASHING_CONFTEST)
    project.makepyfile(test_clash=CLASHING_TESTS)
    args = ["--model", "mine.onnx", "--fmw-model", "ours.onnx", "--fmw-processes", "1,2", "--strict-markers"]
    result = run_pytest(project, *args, *xdist)
    assert "already used" not in result.stderr.str(), result.stderr.str()
    result.assert_outcomes(passed=1)


def test_the_header_names_the_gates_a_small_model_skips(project):
    """128 MiB (the default) exercises every default gate of the cpu target; below it, the
    header says which gates skip and why, before any test runs."""
    project.makepyfile(test_ok="def test_ok():\n    pass\n")
    default = run_pytest(project).stdout.str()
    assert "default gate(s)" not in default, default
    small = run_pytest(project, "--fmw-model-size", "64MiB").stdout.str()
    line = next(line for line in small.splitlines() if "default gate(s)" in line)
    assert "--fmw-model-size 64MiB" in line and "3 default gate(s) of --target cpu will skip" in line
    for gate in ("mapped_uss_ratio", "mapped_pss_ratio", "init_ratio"):
        assert f"{gate} needs weights_bytes>=128MiB" in line, line
    one = run_pytest(project, "--fmw-processes", "1").stdout.str()
    assert "2 default gate(s)" in one and "mapped_uss_ratio needs processes>=2" in one, one


def test_a_bad_target_is_a_usage_error(project):
    project.makepyfile(test_ok="def test_ok():\n    pass\n")
    result = run_pytest(project, "--fmw-target", "gpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--fmw-target gpu: choose from cpu, ort-native, qnn, genai" in result.stderr.str()
    assert "Traceback" not in result.stderr.str()


# ----------------------------------------------------------------------------- shadowed names


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """This checkout built as a wheel and installed into a folder of its own (``pip install
    --target``), as ``pip install qnn-fmw-harness`` would; the source is copied first so the
    build leaves nothing in the checkout."""
    source = tmp_path_factory.mktemp("source")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "harness", "reports", "mapper_impl"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in [n.decode() for n in listed if n] + ["pyproject.toml", "README.md", "qnn_fmw_harness_plugin.py"]:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    site = tmp_path_factory.mktemp("site")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(site)]
    proc = subprocess.run([*pip, str(source)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.skip(f"pip could not build this checkout here: {proc.stderr.strip().splitlines()[-1:]}")
    return site


SHADOW_TESTS = f"""
import harness, reports

def test_the_projects_own_modules():
    assert harness.WHO == "their harness" and reports.WHO == "their reports"

def test_a_real_run(run_harness):
    outcome = run_harness({SMALL_RUN})
    assert outcome.returncode == 0, outcome.stderr
    assert len(outcome.results()) == 2 and outcome.headline()["verdict"] == "pass"
    assert harness.WHO == "their harness"  # still theirs after the plugin used its own
"""


@pytest.mark.parametrize(
    "python, xdist",
    [
        pytest.param(["-m"], ["-p", "no:xdist"], marks=pytest.mark.slow),
        (["-m"], ["-n", "2"]),
        pytest.param(["-P", "-m"], ["-p", "no:xdist"], marks=pytest.mark.slow),
    ],
    ids=["without-xdist", "with-xdist", "console-script"],
)
def test_a_project_with_its_own_harness_and_reports(installed, tmp_path, python, xdist):
    """``python -m pytest`` puts the project first on sys.path, so its ``harness.py`` and
    ``reports/`` shadow the package's: the plugin still loads, its fixtures and
    --fmw-report-dir work, and the project's tests import their own modules. The CLI children
    get the package first on PYTHONPATH although the project is on it too. ``python -P``
    starts pytest as its console script does (the folder not on sys.path): the shadow is then
    found in the rootdir, before the plugin imports anything."""
    project = tmp_path / "project"
    (project / "reports").mkdir(parents=True)
    (project / "harness.py").write_text('WHO = "their harness"\n')
    (project / "reports" / "__init__.py").write_text('WHO = "their reports"\n')
    (project / "test_shadow.py").write_text(SHADOW_TESTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    # the project on PYTHONPATH too (its CLI children must still get the package's harness),
    # except for the console-script start, whose sys.path must not hold the project at first
    env["PYTHONPATH"] = os.pathsep.join([str(installed)] + ([] if "-P" in python else [str(project)]))
    report_dir = tmp_path / "rd"
    argv = [sys.executable, *python, "pytest", "-p", "no:cacheprovider", "--strict-markers", *xdist]
    proc = subprocess.run(
        [*argv, "--fmw-report-dir", str(report_dir)], cwd=project, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout and "1 run(s), report:" in proc.stdout, proc.stdout
    assert "qnn-fmw-harness: shadowed by " in proc.stdout and "harness.py" in proc.stdout, proc.stdout
    assert (report_dir / "report.html").is_file()
    # the install under test is the one loaded: its entry point names the top-level module
    (dist,) = installed.glob("qnn_fmw_harness-*.dist-info")
    assert "qnn_fmw_harness = qnn_fmw_harness_plugin" in (dist / "entry_points.txt").read_text()


def test_loading_the_plugin_leaves_nothing_of_the_package_imported(project):
    """pytest asks for the options when it loads the plugin, before the rootdir's conftests (where
    a project's own ``harness`` may come from): the plugin reads the declarations then, and
    takes its package out of ``sys.modules`` again, so a conftest finds none of it there."""
    project.makeconftest(
        "import sys\nSEEN = sorted(n for n in sys.modules if n.partition('.')[0] in ('harness', 'reports'))\n"
    )
    project.makepyfile(test_seen="import conftest\n\ndef test_nothing_imported():\n    assert conftest.SEEN == []\n")
    result = run_pytest(project, "-p", "no:xdist", "--fmw-processes", "2")
    result.assert_outcomes(passed=1)
