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

How --report-dir survives xdist: each process that runs tests appends "this test produced
this run folder" lines to ``DIR/.harness-session/<token>-<worker>.jsonl``; the controller
(which sees every test's report) merges those lines with the outcomes at session end and
renders. The token is made by the controller and handed to the workers, so lines of an earlier
session in the same DIR are never mixed in; ``DIR/runs/`` is emptied when a session starts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

MARKERS = {
    "memory": "multi-process memory / init-time measurements (run serialized in one xdist group)",
    "qnn": "needs the real QNN EP from onnxruntime-qnn (HTP simulator on Linux x86_64)",
    "device": "needs a QNN device as the EP reports it (NPU-typed EP device, HTP usable, RPCMem loadable); "
    "skips elsewhere with the probe's reason",
    "slow": "long measurements, excluded from the default run (-m slow to run them)",
}
SERIAL_GROUP = "serial"
RUNS = "runs"
SESSION_DIR = ".harness-session"
REPORT = "report.html"
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
        if self.recorder is not None:
            outcome.kept = self.recorder.keep(owner, out, self.default_out)
            if outcome.kept is None and reserved and out.is_dir() and not any(out.iterdir()):
                out.rmdir()  # nothing was measured (a usage error, --help): leave no empty folder
        if check_exit is not None:
            assert proc.returncode == check_exit, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return outcome


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
    leaked = {key: (before[key], value) for key, value in after.items() if value > before[key]}
    assert not leaked, f"mapper_impl leaked (before, after): {leaked}"


# ----------------------------------------------------------------------------- --report-dir


@dataclass
class SessionRecorder:
    """Keeps the session's run folders and the outcomes of the tests that produced them."""

    report_dir: Path
    token: str
    controller: bool
    outcomes: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))

    @property
    def runs(self) -> Path:
        return self.report_dir / RUNS

    @property
    def index(self) -> Path:
        return self.report_dir / SESSION_DIR

    def start(self) -> None:
        """Controller, before any test: a clean runs/ and session index for this session. Only
        what an earlier session of this plugin left is removed: the plugin is active in every
        project that installed the package, and ``--report-dir .`` in a project whose ``runs/``
        holds something else (TensorBoard's default folder) must not delete it."""
        for folder in (self.runs, self.index):
            _check_ours(folder, self.report_dir)
        for folder in (self.runs, self.index):
            if folder.exists():
                shutil.rmtree(folder)
        self.runs.mkdir(parents=True, exist_ok=True)
        self.index.mkdir(parents=True, exist_ok=True)

    def reserve(self, name: str) -> Path:
        """A new, empty folder runs/NAME (or NAME-2, NAME-3...: the first that did not exist)."""
        for k in range(1, 10_000):
            path = self.runs / (name if k == 1 else f"{name}-{k}")
            try:
                path.mkdir(parents=True)
                return path
            except FileExistsError:
                continue
        raise RuntimeError(f"{self.runs}: no free run folder name for {name}")

    def keep(self, owner: str, out: Path, fresh_out) -> Path | None:
        """Record that ``owner`` produced the run folder ``out`` (copied under runs/ when it lies
        elsewhere); None when ``out`` holds no measured run."""
        results = out / "results.csv"
        try:
            measured = results.is_file() and len(results.read_text(encoding="utf-8").splitlines()) > 1
        except OSError:
            measured = False
        if not measured:
            return None
        kept = out
        if self.runs.resolve() not in out.resolve().parents:
            kept = fresh_out(owner, out.parent)
            shutil.copytree(out, kept, ignore=shutil.ignore_patterns("workers"), dirs_exist_ok=True)
            _rename_run(kept)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        line = json.dumps({"nodeid": owner, "folder": str(kept)}) + "\n"
        with open(self.index / f"{self.token}-{worker}.jsonl", "a", encoding="utf-8") as handle:
            handle.write(line)
        return kept

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Controller: every phase of every test (xdist forwards the workers' reports)."""
        if self.controller:
            self.outcomes[report.nodeid].append((report.when, _outcome(report)))

    def recorded_runs(self) -> list[tuple[str, str]]:
        lines = []
        for path in sorted(self.index.glob(f"{self.token}-*.jsonl")):
            for text in path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(text)
                    lines.append((str(record["nodeid"]), str(record["folder"])))
                except (ValueError, KeyError, TypeError):
                    continue  # a torn line of a worker that died mid-write
        return lines

    def outcome_of(self, nodeid: str) -> str:
        """A test's outcome; for a module or class id (a wide fixture's run), the worst outcome
        of the tests inside it."""
        phases = self.outcomes.get(nodeid)
        if phases is not None:
            return _merge(phases)
        inside = [_merge(p) for n, p in self.outcomes.items() if n.startswith(nodeid + "::")]
        for worst in ("failed", "error", "xpassed", "passed", "xfailed", "skipped"):
            if worst in inside:
                return worst
        return "unknown"

    def test_records(self) -> tuple[list[Any], dict[str, int]]:
        from harness.publish import test_record

        records, seen, with_runs = [], set(), set()
        for nodeid, folder in self.recorded_runs():
            if (nodeid, folder) not in seen and (Path(folder) / "results.csv").is_file():
                seen.add((nodeid, folder))
                with_runs.add(nodeid)
                records.append(test_record(shown_id(nodeid), self.outcome_of(nodeid), folder))
        for nodeid, phases in self.outcomes.items():
            outcome = _merge(phases)
            if outcome in ("failed", "error") and nodeid not in with_runs:
                records.append(test_record(shown_id(nodeid), outcome, ""))
        counts = Counter(_merge(p) for p in self.outcomes.values())
        return records, dict(counts)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Controller: one report over every run of the session, with the tests' outcomes."""
        if not self.controller:
            return
        from harness.core.errors import InputError
        from harness.publish import render_test_session

        records, counts = self.test_records()
        folders = list(dict.fromkeys(r.folder for r in records if r.folder))
        terminal = session.config.pluginmanager.get_plugin("terminalreporter")
        try:
            path = render_test_session(folders, self.report_dir / REPORT, records, counts)
            line = f"qnn-fmw-harness: {len(folders)} run(s), report: {path}"
        except (InputError, OSError) as err:  # the session's own outcome must survive a bad --report-dir
            line = f"qnn-fmw-harness: no report rendered: {err}"
        if terminal is not None:
            terminal.write_line(line)


def _check_ours(folder: Path, report_dir: Path) -> None:
    """UsageError unless ``folder`` is absent, or a folder holding only what this plugin writes
    there: run folders of this harness (or empty ones) in runs/, ``*.jsonl`` in the index."""
    from harness.runner.outdir import is_run_folder

    if not os.path.lexists(folder):
        return
    foreign: list[str] = []
    if folder.is_symlink() or not folder.is_dir():
        foreign = ["it is not a folder"]
    else:
        try:
            for entry in sorted(folder.iterdir()):
                if folder.name == SESSION_DIR:
                    ours = entry.suffix == ".jsonl" and entry.is_file() and not entry.is_symlink()
                else:
                    ours = (
                        entry.is_dir() and not entry.is_symlink() and (is_run_folder(entry) or not any(entry.iterdir()))
                    )
                if not ours:
                    foreign.append(entry.name)
        except OSError as err:
            foreign = [f"cannot list it: {err.strerror or err}"]
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise pytest.UsageError(
            f"--report-dir {report_dir}: {folder.name}/ holds what this plugin did not write ({shown}); "
            "it empties that folder at the start of a session, so choose another --report-dir"
        )


def _rename_run(folder: Path) -> None:
    """A kept copy is its own run: its run id becomes its folder name (two tests that both wrote
    to a folder called "run" must not show up as two runs named "run")."""
    for name, key in (("metadata.json", "run"), ("headline.json", None)):
        path = folder / name
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            (data.setdefault(key, {}) if key else data)["run_id"] = folder.name
            path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        except (OSError, ValueError, AttributeError):
            pass  # a folder without readable metadata is reported under its folder name anyway


def shown_id(nodeid: str) -> str:
    """A test id without the ``@group`` suffix xdist's loadgroup adds."""
    return re.sub(r"@[\w.-]+$", "", nodeid)


def _outcome(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    return report.outcome


def _merge(phases: list[tuple[str, str]]) -> str:
    """One outcome from a test's setup / call / teardown reports, as pytest's summary counts
    them: a failed setup or teardown is an error, a failed call a failure."""
    by_phase = dict(phases)
    if by_phase.get("call") == "failed":
        return "failed"
    if "failed" in (by_phase.get("setup"), by_phase.get("teardown")):
        return "error"
    for phase in ("call", "setup"):
        if by_phase.get(phase) in ("skipped", "xfailed", "xpassed"):
            return by_phase[phase]
    return by_phase.get("call", "passed" if by_phase else "unknown")
