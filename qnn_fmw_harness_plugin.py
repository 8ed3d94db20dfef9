"""The pytest plugin (``pytest11`` ``qnn_fmw_harness``); swaps our package in per call when a project shadows it."""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
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
SHADOWABLE = ("harness", "reports")  #: Import names a user's project may shadow (mapper_impl is unique).
_HERE = Path(__file__).resolve().parent
_TOKEN_KEY = "qnn_fmw_harness_token"
_LOADGROUP_KEY = "qnn_fmw_harness_loadgroup"


def _owned(name: str) -> bool:
    return name.partition(".")[0] in SHADOWABLE


def _is_ours(module: Any) -> bool:
    file = getattr(module, "__file__", None)
    return file is not None and Path(file).resolve().parent.parent == _HERE


def _shadow_in(folder: str | Path) -> str | None:
    """``folder/harness.py``-like entry of a module that is not ours, if ``folder`` holds one."""
    base = Path(folder or ".").resolve()
    if base == _HERE:
        return None
    for name in SHADOWABLE:
        for candidate in (base / f"{name}.py", base / name / "__init__.py"):
            if candidate.is_file():
                return str(candidate)
    return None


def find_shadows(extra_folders: Iterable[str | Path] = ()) -> list[str]:
    """What would shadow our packages: a foreign module imported, one earlier on ``sys.path`` or in a folder."""
    found = []
    for name in SHADOWABLE:
        module = sys.modules.get(name)
        if module is not None and not _is_ours(module):
            found.append(str(getattr(module, "__file__", None) or module))
    for entry in sys.path:
        if Path(entry or ".").resolve() == _HERE:
            break
        if (hit := _shadow_in(entry)) is not None:
            found.append(hit)
    found += [hit for folder in extra_folders if (hit := _shadow_in(folder)) is not None]
    return list(dict.fromkeys(found))


class _Package:
    """Our ``harness``/``reports`` modules: kept out of ``sys.modules`` between calls when shadowed, else shared."""

    def __init__(self) -> None:
        self.isolated: bool | None = None  # decided once, before the first call
        self.shadows: list[str] = []
        self._kept: dict[str, Any] = {}
        self._depth = 0

    def decide(self, extra_folders: Iterable[str | Path] = ()) -> None:
        if self.isolated is None:
            self.shadows = find_shadows(extra_folders)
            self.isolated = bool(self.shadows)

    @contextmanager
    def active(self) -> Iterator[None]:
        """Our package importable under its own names for the duration of the block."""
        self.decide()
        if not self.isolated or self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        theirs = {name: sys.modules.pop(name) for name in [n for n in sys.modules if _owned(n)]}
        sys.modules.update(self._kept)
        sys.path.insert(0, str(_HERE))
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if str(_HERE) in sys.path:
                sys.path.remove(str(_HERE))
            self._kept = {name: sys.modules.pop(name) for name in [n for n in sys.modules if _owned(n)]}
            sys.modules.update(theirs)

    def borrow(self, name: str) -> Any:
        """``harness.pytest_plugin.<name>()`` before shadows are known: imported for the call, removed after."""
        if self.isolated is not None or any(_is_ours(m) for n, m in list(sys.modules.items()) if _owned(n)):
            return self.call(name)
        theirs = {n: sys.modules.pop(n) for n in [n for n in sys.modules if _owned(n)]}
        sys.path.insert(0, str(_HERE))
        try:
            from harness import pytest_plugin

            return getattr(pytest_plugin, name)()
        finally:
            if str(_HERE) in sys.path:
                sys.path.remove(str(_HERE))
            for n in [n for n in sys.modules if _owned(n)]:
                del sys.modules[n]
            sys.modules.update(theirs)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``harness.pytest_plugin.<name>(*args, **kwargs)``, its result guarded."""
        with self.active():
            from harness import pytest_plugin

            return self.guard(getattr(pytest_plugin, name)(*args, **kwargs))

    def guard(self, value: Any) -> Any:
        """An object of our package handed to the user's code: wrapped when isolated so its methods run with ours."""
        if not self.isolated:
            return value
        if isinstance(value, list):
            return [self.guard(v) for v in value]
        return _Guarded(value) if _owned(type(value).__module__) else value


class _Guarded:
    """A proxy whose attribute reads and method calls run with our package active."""

    __slots__ = ("_target",)

    def __init__(self, target: Any) -> None:
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name: str) -> Any:
        with PACKAGE.active():
            value = getattr(self._target, name)
        if callable(value) and not isinstance(value, type):

            @functools.wraps(value)
            def call(*args: Any, **kwargs: Any) -> Any:
                with PACKAGE.active():
                    return PACKAGE.guard(value(*args, **kwargs))

            return call
        return PACKAGE.guard(value)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __repr__(self) -> str:
        return repr(self._target)


PACKAGE = _Package()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qnn-fmw-harness", "file-mapped weights harness (qnn-fmw-harness)")
    for flag, keywords in PACKAGE.borrow("option_arguments"):
        group.addoption(flag, **keywords)


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    folders = [config.rootpath, config.invocation_params.dir, *(_arg_folders(config))]
    PACKAGE.decide(folders)
    xdist = config.pluginmanager.hasplugin("xdist")
    # Memory tests share one xdist group, which holds only under --dist loadgroup.
    if xdist and getattr(config.option, "dist", None) == "load":
        config.option.dist = "loadgroup"
    PACKAGE.call("check_options", config)
    worker_input = getattr(config, "workerinput", None)
    recorder = PACKAGE.call("start_recorder", config, worker_input.get(_TOKEN_KEY) if worker_input else None)
    if recorder is not None:
        config.pluginmanager.register(_RecorderHooks(recorder), "qnn_fmw_harness_recorder")
    if xdist:
        config.pluginmanager.register(_XdistHooks(recorder), "qnn_fmw_harness_xdist")


def _arg_folders(config: pytest.Config) -> list[Path]:
    """The folders of the command line's test paths: pytest may put them first on sys.path."""
    folders = []
    for arg in config.args:
        path = config.invocation_params.dir / arg.split("::")[0]
        try:
            if path.exists():
                folders.append(path if path.is_dir() else path.parent)
        except (OSError, ValueError):  # a name the OS refuses is pytest's to report
            continue
    return folders


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    if PACKAGE.isolated:
        lines.append(f"qnn-fmw-harness: shadowed by {', '.join(PACKAGE.shadows)}; the plugin uses its own package")
    notice = PACKAGE.call("gates_notice", config)
    return [*lines, notice] if notice else lines


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks to group the nodeids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """memory tests share one xdist group (under xdist); device tests skip off-device; slow ones need -m."""
    selected_markers = config.getoption("-m") or ""
    xdist = config.pluginmanager.hasplugin("xdist")
    device_reason: list[str | None] = []  # asked once, and only when a device test exists
    for item in items:
        if xdist and item.get_closest_marker("memory"):
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))
        if item.get_closest_marker("device"):
            if not device_reason:
                device_reason.append(PACKAGE.call("device_skip_reason"))
            if device_reason[0] is not None:
                item.add_marker(pytest.mark.skip(reason=device_reason[0]))
        if item.get_closest_marker("slow") and "slow" not in selected_markers:
            item.add_marker(pytest.mark.skip(reason="slow measurement: run with -m slow"))


class _RecorderHooks:
    """The --fmw-report-dir session recorder's hooks, run with our package active."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Controller: every phase of every test (xdist forwards the workers' reports)."""
        self.recorder.record_report(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Controller: one report over every run of the session, with the tests' outcomes."""
        self.recorder.finish(session)


class _XdistHooks:
    """Hands the controller's session token to every xdist worker, and makes xdist_group hold."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self.recorder is not None:
            node.workerinput[_TOKEN_KEY] = self.recorder.token
        # Workers parse the original command line again: tell them "--dist load" became "loadgroup".
        node.workerinput[_LOADGROUP_KEY] = getattr(node.config.option, "dist", None) == "loadgroup"

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Set xdist's ``@group`` suffix on the structured id where pytest 9.2 lost it."""
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


@pytest.fixture(scope="session")
def harness_options(pytestconfig: pytest.Config) -> Any:
    """The session's ``--fmw-*`` options (target, processes, model_size, model, report_dir)."""
    return PACKAGE.call("harness_options", pytestconfig)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One model cache folder for every xdist worker of the session."""
    return PACKAGE.call("shared_model_cache", tmp_path_factory)


@pytest.fixture(scope="session")
def harness_runner(pytestconfig: pytest.Config, model_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The session's runner (``run(*args, owner=..., scratch=...)``), for fixtures wider than one test."""
    runner = PACKAGE.call("HarnessRunner", pytestconfig, model_cache, lambda: tmp_path_factory.mktemp("fork"))
    yield runner
    runner.close()


@pytest.fixture
def run_harness(harness_runner: Any, request: pytest.FixtureRequest, tmp_path: Path):
    """``run_harness("run", ...)`` runs ``python -m harness`` as a user would; returns a `HarnessOutcome`."""

    def run(
        *args: str,
        out: Path | None = None,
        timeout: float = 600,
        check_exit: int | None = None,
        env: dict[str, str] | None = None,
    ) -> Any:
        return harness_runner.run(
            *args, owner=request.node.nodeid, scratch=tmp_path, out=out, timeout=timeout, check_exit=check_exit, env=env
        )

    return run


@pytest.fixture
def harness_run_dir(harness_runner: Any, request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where this test's run folder goes: under --fmw-report-dir (kept and reported) or in tmp_path."""
    return harness_runner.default_out(request.node.nodeid, tmp_path)


@pytest.fixture
def weights_file_factory(tmp_path: Path):
    """``make(size=1 << 20, name="weights.bin", seed=0) -> Path``: deterministic pseudo-random bytes."""

    def make(size: int = 1 << 20, name: str = "weights.bin", seed: int = 0) -> Path:
        return PACKAGE.call("write_weights_file", tmp_path, size, name, seed)

    return make


@pytest.fixture
def weights_file(weights_file_factory) -> Path:
    """A 1 MiB weights file (deterministic bytes) to map."""
    return weights_file_factory()


@pytest.fixture
def mapper_leak_guard():
    """Fails the test when it leaves mapper_impl holding more than before it (cyclic garbage collected first)."""
    with PACKAGE.active():
        from harness.pytest_plugin import mapper_leak_guard as guard

        context = guard()
        context.__enter__()
    yield
    with PACKAGE.active():
        context.__exit__(None, None, None)
