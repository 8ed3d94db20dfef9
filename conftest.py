"""The pytest surface of the harness: a few options, fixtures and hooks.

Options: ``--target``, ``--processes``, ``--model-size``, ``--model``, ``--report-dir``.
Markers (declared in pyproject.toml): ``memory`` (multi-process measurements, run in one
xdist group so they never overlap), ``qnn``, ``device``, ``slow``.
Fixtures: ``harness_options`` (the options above), ``model_cache`` (one cache folder shared
by every xdist worker, so generated models are built once per test session),
``run_harness`` (runs ``python -m harness run`` in a subprocess and returns its outcome) and
``harness_run_dir`` (where a measurement test writes its run folder: under --report-dir when
given, so one report of every measurement is rendered at the end of the session).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness", "file-mapped weights harness")
    from harness.targets import NAMES

    group.addoption("--target", default="cpu", choices=NAMES,
                    help="target for the measurement suites (default cpu)")
    group.addoption("--processes", default="2", help="N for the measurement suites (default 2)")
    group.addoption("--model-size", default="64MiB", help="generated model size (default 64MiB)")
    group.addoption("--model", default=None, help="bring-your-own ONNX model for the measurement suites")
    group.addoption("--report-dir", default=None,
                    help="keep every measurement's run folder here and render one report at the end")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks to group the nodeids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """memory tests share one xdist group; device tests skip where the QNN EP reports no device
    (probed once per process, only when a device test was collected); slow ones need -m."""
    selected_markers = config.getoption("-m") or ""
    device_reason = None
    if any(item.get_closest_marker("device") for item in items):
        from harness.targets.qnn.device import device_skip_reason

        device_reason = device_skip_reason()
    for item in items:
        if item.get_closest_marker("memory"):
            item.add_marker(pytest.mark.xdist_group("serial"))
        if item.get_closest_marker("device") and device_reason:
            item.add_marker(pytest.mark.skip(reason=f"needs a QNN device: {device_reason}"))
        if item.get_closest_marker("slow") and "slow" not in selected_markers:
            item.add_marker(pytest.mark.skip(reason="slow measurement: run with -m slow"))


@dataclass
class HarnessOptions:
    target: str
    processes: str
    model_size: str
    model: str | None
    report_dir: Path | None


@pytest.fixture(scope="session")
def harness_options(pytestconfig: pytest.Config) -> HarnessOptions:
    report_dir = pytestconfig.getoption("--report-dir")
    return HarnessOptions(
        target=pytestconfig.getoption("--target"),
        processes=pytestconfig.getoption("--processes"),
        model_size=pytestconfig.getoption("--model-size"),
        model=pytestconfig.getoption("--model"),
        report_dir=Path(report_dir).resolve() if report_dir else None,
    )


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shared by all xdist workers of one session (the base temp's parent is common to them);
    models are built into a temp folder and renamed into place, so racing builds are safe."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = shared / "model-cache"
    path.mkdir(exist_ok=True)
    return path


@dataclass
class HarnessOutcome:
    returncode: int
    stdout: str
    stderr: str
    out: Path

    def results(self) -> list:
        from harness.core.schema import ResultRow
        from harness.core.tables import read_rows

        return read_rows(self.out / "results.csv", ResultRow)

    def summary(self) -> list:
        from harness.core.schema import SummaryRow
        from harness.core.tables import read_rows

        return read_rows(self.out / "summary.csv", SummaryRow)


def harness_env(model_cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["HARNESS_CACHE_DIR"] = str(model_cache)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


@pytest.fixture
def harness_run_dir(request: pytest.FixtureRequest, harness_options: HarnessOptions, tmp_path: Path) -> Path:
    if harness_options.report_dir is None:
        return tmp_path / "run"
    name = request.node.name.replace("/", "_").replace("[", "-").replace("]", "")
    return harness_options.report_dir / "runs" / name


@pytest.fixture
def run_harness(model_cache: Path, tmp_path: Path):
    """Run ``python -m harness <args>`` as a user would; returns a HarnessOutcome."""

    def run(*args: str, out: Path | None = None, timeout: float = 600, check_exit: int | None = None):
        out = out or tmp_path / "run"
        argv = [sys.executable, "-m", "harness", *args]
        if args and args[0] == "run" and "--out" not in args:
            argv += ["--out", str(out)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env=harness_env(model_cache), stdin=subprocess.DEVNULL)
        outcome = HarnessOutcome(proc.returncode, proc.stdout, proc.stderr, out)
        if check_exit is not None:
            assert proc.returncode == check_exit, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return outcome

    return run


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Render one report over every measurement run folder kept under --report-dir (on the
    xdist controller only, after all workers have written their folders)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    report_dir = session.config.getoption("--report-dir")
    if not report_dir:
        return
    runs = sorted(p.parent for p in (Path(report_dir) / "runs").glob("*/results.csv"))
    if not runs:
        return
    from reports.cli import report_main

    out = Path(report_dir) / "report.html"
    report_main([*map(str, runs), "--out", str(out), "--no-default-gates"])
