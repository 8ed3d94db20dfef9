"""The pytest plugin of qnn-fmw-harness: options, markers and fixtures for any project.

Installed with the package and registered as the ``pytest11`` entry point ``qnn_fmw_harness``,
so ``pip install qnn-fmw-harness`` is all a project needs (disable with ``-p no:qnn_fmw_harness``).
Nothing here knows where this repository is: the harness runs as ``python -m harness`` from the
installed distribution, in the test's own temp folder.

Options (group "qnn-fmw-harness"): ``--target``, ``--processes``, ``--model-size``,
``--model`` steer measurement tests through `harness_options`; ``--report-dir DIR`` keeps
every run folder of the session under ``DIR/runs/`` and renders ``DIR/report.html`` over them
at the end, with the pytest outcome of each test that produced a run (and of every failed test).

Markers: ``memory`` (multi-process measurement: all of them run in one xdist group, "serial",
so two never overlap; the plugin turns ``--dist load`` into ``loadgroup`` for that), ``qnn``
(needs onnxruntime-qnn), ``device`` (skipped unless `device_skip_reason` says this machine is a
QNN device), ``slow`` (skipped unless selected with ``-m slow``).

Fixtures: `harness_options`, `model_cache` (one model cache for every xdist worker of the
session), `harness_runner` (session-wide runner, for module-scoped fixtures), `run_harness`
(run ``python -m harness ...`` as a user would; returns a `HarnessOutcome`), `harness_run_dir`
(where a test's run folder goes), `weights_file` / `weights_file_factory` (deterministic
files to map) and `mapper_leak_guard` (fails the test if mapper_impl leaks a mapping).

The session recorder behind --report-dir is `harness.pytest_recorder`. How --report-dir
survives xdist: each process that runs tests appends "this test produced
this run folder" lines to ``DIR/.harness-session/<token>-<worker>.jsonl``; the controller
(which sees every test's report) merges those lines with the outcomes at session end and
renders. The token is made by the controller and handed to the workers, so lines of an earlier
session in the same DIR are never mixed in; ``DIR/runs/`` is emptied when a session starts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.pytest_recorder import SessionRecorder, shown_id

MARKERS = {
    "memory": "multi-process memory / init-time measurements (run serialized in one xdist group)",
    "qnn": "needs the real QNN EP from onnxruntime-qnn (HTP simulator on Linux x86_64)",
    "device": "needs a QNN device as the EP reports it (NPU-typed EP device, HTP usable, RPCMem loadable); "
    "skips elsewhere with the probe's reason",
    "slow": "long measurements, excluded from the default run (-m slow to run them)",
}
SERIAL_GROUP = "serial"
_TOKEN_KEY = "qnn_fmw_harness_token"
_LOADGROUP_KEY = "qnn_fmw_harness_loadgroup"
_RECORDER = "qnn_fmw_harness_recorder"


# ----------------------------------------------------------------------------- options and markers


def pytest_addoption(parser: pytest.Parser) -> None:
    from harness.targets import DEFAULT, NAMES

    group = parser.getgroup("qnn-fmw-harness", "file-mapped weights harness (qnn-fmw-harness)")
    group.addoption(
        "--target", default=DEFAULT, choices=NAMES, help=f"target for the measurement tests (default: {DEFAULT})"
    )
    group.addoption("--processes", default="2", help="N for the measurement tests, e.g. 2 or 1,2,4 (default: 2)")
    group.addoption(
        "--model-size",
        default="64MiB",
        help="generated model size; KiB..TiB = powers of 1024, KB..TB = powers of 1000 (default: 64MiB)",
    )
    group.addoption("--model", default=None, help="bring-your-own ONNX model for the measurement tests")
    group.addoption(
        "--report-dir",
        default=None,
        metavar="DIR",
        help="keep every run folder of the session in DIR/runs and render DIR/report.html over them, "
        "with each test's outcome",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    # memory tests share one xdist group; groups only hold under --dist loadgroup, which
    # behaves as "load" for every test without a group.
    if getattr(config.option, "dist", None) == "load":
        config.option.dist = "loadgroup"
    _check_options(config)
    report_dir = config.getoption("--report-dir")
    if report_dir:
        worker_input = getattr(config, "workerinput", None)
        token = worker_input.get(_TOKEN_KEY) if worker_input else None
        recorder = SessionRecorder(
            Path(report_dir).resolve(), token or uuid.uuid4().hex[:12], controller=worker_input is None
        )
        if recorder.controller:
            recorder.start()
        config.pluginmanager.register(recorder, _RECORDER)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(), "qnn_fmw_harness_xdist")


def _check_options(config: pytest.Config) -> None:
    """The plugin's options checked before any session starts: a mistake is a pytest usage
    error (exit 4, one line), never an INTERNALERROR or a session of failing tests."""
    from harness.core.errors import InputError
    from harness.core.files import check_writable
    from harness.core.limits import BOUNDS, parse_process_list
    from harness.core.units import parse_size

    try:
        limit = next(b.maximum for b in BOUNDS if b.dest == "processes")
        counts = parse_process_list(config.getoption("--processes"))
        if max(counts) > limit:
            raise InputError(f"{max(counts)}: at most {limit:g}")
    except InputError as err:
        raise pytest.UsageError(f"--processes {err}") from None
    try:
        parse_size(config.getoption("--model-size"))
        report_dir = config.getoption("--report-dir")
        if report_dir:
            if Path(report_dir).exists() and not Path(report_dir).is_dir():
                raise InputError(f"--report-dir {report_dir}: is a file, not a folder")
            check_writable(report_dir, "--report-dir")
    except InputError as err:
        raise pytest.UsageError(str(err)) from None


class _XdistHooks:
    """Hands the controller's session token to every xdist worker, and makes xdist_group hold."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        recorder = node.config.pluginmanager.get_plugin(_RECORDER)
        if recorder is not None:
            node.workerinput[_TOKEN_KEY] = recorder.token
        # workers parse the original command line again, so "--dist load" turned "loadgroup"
        # here must be told to them
        node.workerinput[_LOADGROUP_KEY] = getattr(node.config.option, "dist", None) == "loadgroup"

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """xdist's loadgroup sends a group to one worker by suffixing each test id with
        ``@group`` (it assigns ``item._nodeid``). pytest 9.2 derives ``nodeid`` from a structured
        id instead, so that assignment is lost and ``memory`` tests spread over the workers,
        measuring each other. Where the suffix did not take, set it on the structured id."""
        worker_input = getattr(config, "workerinput", None) or {}
        if not (getattr(config.option, "loadgroup", False) or worker_input.get(_LOADGROUP_KEY)):
            return
        for item in items:
            names = sorted(
                {
                    str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")
                }
            )
            suffix = "@" + "_".join(names)
            if names and not item.nodeid.endswith(suffix):
                _set_nodeid(item, item.nodeid + suffix)


def _set_nodeid(item: pytest.Item, nodeid: str) -> None:
    current = getattr(item, "_id", None)
    if current is not None and hasattr(type(current), "parse"):
        item._id = type(current).parse(nodeid)  # pytest >= 9.2: a structured NodeId
    else:
        item._nodeid = nodeid


def device_skip_reason() -> str | None:
    """None when this machine can run ``device`` tests, else why they skip: the QNN device probe
    asks the EP itself (an NPU-typed EP device, HTP usable, RPCMem loadable), never the OS or the
    CPU alone. It runs a child process (~1-2 s), once per process, and only when a device test
    was collected."""
    from harness.targets.qnn.device import device_skip_reason as probe

    return probe()  # "not a QNN device: <what the EP reported>"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks to group the nodeids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """memory tests share one xdist group; device tests skip off-device; slow ones need -m."""
    selected_markers = config.getoption("-m") or ""
    device_reason: list[str | None] = []  # asked once, and only when a device test exists
    for item in items:
        if item.get_closest_marker("memory"):
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))
        if item.get_closest_marker("device"):
            if not device_reason:
                device_reason.append(device_skip_reason())
            if device_reason[0] is not None:
                item.add_marker(pytest.mark.skip(reason=device_reason[0]))
        if item.get_closest_marker("slow") and "slow" not in selected_markers:
            item.add_marker(pytest.mark.skip(reason="slow measurement: run with -m slow"))


# ----------------------------------------------------------------------------- running the harness


@dataclass
class HarnessOptions:
    target: str
    processes: str
    model_size: str
    model: str | None
    report_dir: Path | None


@dataclass
class HarnessOutcome:
    """What one ``python -m harness`` call did: exit code, output, and its run folder."""

    returncode: int
    stdout: str
    stderr: str
    out: Path
    kept: Path | None = None  # the copy under --report-dir, when the run was kept there

    def results(self) -> list:
        from harness.core.schema import ResultRow
        from harness.core.tables import read_rows

        return read_rows(self.out / "results.csv", ResultRow)

    def summary(self) -> list:
        from harness.core.schema import SummaryRow
        from harness.core.tables import read_rows

        return read_rows(self.out / "summary.csv", SummaryRow)

    def headline(self) -> dict:
        from harness.core.headline import HEADLINE_JSON, read_headline

        return read_headline(self.out / HEADLINE_JSON)


def harness_env(model_cache: Path | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a harness subprocess: this one, with the session's model cache, and
    ``extra`` variables over both."""
    env = dict(os.environ)
    if model_cache is not None:
        env["HARNESS_CACHE_DIR"] = str(model_cache)
    env.update(extra or {})
    return env


def safe_name(nodeid: str) -> str:
    """A folder name for a test id: ``suites/x.py::test_a[1-2]`` -> ``x-test_a-1-2``."""
    tail = shown_id(nodeid).split("/")[-1].replace(".py::", "-").replace("::", "-").removesuffix(".py")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", tail).strip("-.")[:120] or "run"


class HarnessRunner:
    """Runs ``python -m harness`` in a subprocess, as a user would, with the session's model
    cache; with --report-dir, keeps each run folder it produced there and records which test
    produced it."""

    def __init__(self, config: pytest.Config, model_cache: Path) -> None:
        self.config = config
        self.model_cache = model_cache
        self._used: Counter[str] = Counter()

    @property
    def recorder(self) -> SessionRecorder | None:
        return self.config.pluginmanager.get_plugin(_RECORDER)

    def default_out(self, owner: str, scratch: Path) -> Path:
        """A fresh run folder for ``owner``: under DIR/runs with --report-dir (reserved with an
        exclusive mkdir, so two xdist workers never share one), else in ``scratch``."""
        recorder = self.recorder
        if recorder is not None:
            return recorder.reserve(safe_name(owner))
        self._used[owner] += 1
        suffix = "" if self._used[owner] == 1 else f"-{self._used[owner]}"
        return scratch / f"run{suffix}"

    def run(
        self,
        *args: str,
        owner: str,
        scratch: Path,
        out: Path | None = None,
        timeout: float = 600,
        check_exit: int | None = None,
        env: dict[str, str] | None = None,
    ) -> HarnessOutcome:
        reserved = out is None and self.recorder is not None
        out = Path(out) if out is not None else self.default_out(owner, scratch)
        argv = [sys.executable, "-m", "harness", *args]
        if args and args[0] in ("run", "bench") and "--out" not in args and "--help" not in args:
            argv += ["--out", str(out)]
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=scratch,
            env=harness_env(self.model_cache, env),
            stdin=subprocess.DEVNULL,
        )
        outcome = HarnessOutcome(proc.returncode, proc.stdout, proc.stderr, out)
        problem = sentence_problem(out)  # every run of every suite: one definition of every factor
        assert not problem, f"{out}: {problem}"
        if self.recorder is not None:
            outcome.kept = self.recorder.keep(owner, out, self.default_out)
            if outcome.kept is None and reserved and out.is_dir() and not any(out.iterdir()):
                out.rmdir()  # nothing was measured (a usage error, --help): leave no empty folder
        if check_exit is not None:
            assert proc.returncode == check_exit, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return outcome


def sentence_problem(out: Path) -> str:
    """Why the headline sentence a run wrote into ``out`` contradicts itself ("" when it does
    not, or when the run wrote none)."""
    from harness.core.headline import HEADLINE_JSON, factor_problem, read_headline

    if not (out / HEADLINE_JSON).is_file():
        return ""
    try:
        return factor_problem(str(read_headline(out / HEADLINE_JSON).get("sentence") or ""))
    except (OSError, ValueError):
        return ""  # not a headline of this version: the tests that wrote it check it


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
    """One cache folder for every xdist worker of the session (the base temp's parent is common
    to them), so generated models are built once; the cache publishes entries atomically, so
    racing builds are safe."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = shared / "model-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def harness_runner(pytestconfig: pytest.Config, model_cache: Path) -> HarnessRunner:
    """The session's runner: ``harness_runner.run(*args, owner=request.node.nodeid,
    scratch=tmp_dir)``; for fixtures wider than one test (owner = the module's node id)."""
    return HarnessRunner(pytestconfig, model_cache)


@pytest.fixture
def run_harness(harness_runner: HarnessRunner, request: pytest.FixtureRequest, tmp_path: Path):
    """``run_harness("run", "--model-size", "16MiB", ...)`` runs ``python -m harness`` as a user
    would (``--out`` added for run/bench unless given) and returns a `HarnessOutcome`."""

    def run(
        *args: str,
        out: Path | None = None,
        timeout: float = 600,
        check_exit: int | None = None,
        env: dict[str, str] | None = None,
    ) -> HarnessOutcome:
        return harness_runner.run(
            *args, owner=request.node.nodeid, scratch=tmp_path, out=out, timeout=timeout, check_exit=check_exit, env=env
        )

    return run


@pytest.fixture
def harness_run_dir(harness_runner: HarnessRunner, request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where this test's run folder goes: under --report-dir (kept and reported) or in tmp_path."""
    return harness_runner.default_out(request.node.nodeid, tmp_path)


# ----------------------------------------------------------------------------- mapper fixtures


@pytest.fixture
def weights_file_factory(tmp_path: Path):
    """``make(size=1 << 20, name="weights.bin", seed=0) -> Path``: a file of deterministic
    pseudo-random bytes (different seeds, different bytes) in the test's temp folder."""
    import random

    def make(size: int = 1 << 20, name: str = "weights.bin", seed: int = 0) -> Path:
        path = tmp_path / name
        path.write_bytes(random.Random(seed).randbytes(size))
        return path

    return make


@pytest.fixture
def weights_file(weights_file_factory) -> Path:
    """A 1 MiB weights file (deterministic bytes) to map."""
    return weights_file_factory()


@pytest.fixture
def mapper_leak_guard():
    """Fails the test when it leaves mapper_impl holding more mappings, views or heap buffers
    than before it (cyclic garbage is collected first, so only real leaks count)."""
    import gc

    from mapper_impl import stats

    def snapshot() -> dict:
        current = stats()
        if not current.is_clean():
            gc.collect()
            current = stats()
        return current.to_dict()

    before = snapshot()
    yield
    after = snapshot()
    # leaked_loads counts loads their finalizer already released: nothing is held by them
    leaked = {
        key: (before[key], value) for key, value in after.items() if value > before[key] and key != "leaked_loads"
    }
    assert not leaked, f"mapper_impl leaked (before, after): {leaked}"
