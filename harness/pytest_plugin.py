"""The pytest plugin's logic behind the hooks and fixtures `qnn_fmw_harness_plugin` declares (docs/testing.md)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.contract.options import Variant
from harness.pytest_recorder import SessionRecorder
from harness.pytest_runner import (  # noqa: F401 - the plugin's fixtures and the suites use them from here
    FORK_SERVER,
    RECORDER_KEY,
    HarnessOutcome,
    HarnessRunner,
    harness_env,
    session_runner,
    shared_model_cache,
)

#: An install from before the entry point moved loads the real plugin through this.
pytest_plugins = ["qnn_fmw_harness_plugin"]
PREFIX = "fmw-"  #: The run options the plugin takes under this prefix, with their declared flags, types and choices.
RUN_OPTIONS = {
    "target": Variant(help="target for the measurement tests: {target_names} (default: {default})"),
    "processes": Variant(default="2", help="N for the measurement tests, e.g. 2 or 1,2,4 (default: {default})"),
    "model_size": Variant(
        default="128MiB", help="generated model size; {size_help} (default: {default}, the size the saving gates need)"
    ),
    "models": Variant(single=True, help="bring-your-own ONNX model for the measurement tests"),
}
REPORT_DIR = "--fmw-report-dir"  #: The plugin's own option (no run option): where the session's runs and report go.
OPTIONS_KEY = pytest.StashKey["HarnessOptions"]()  #: The parsed options, once per session.


def run_option_arguments() -> list[tuple[str, str, dict[str, Any]]]:
    """(field, flag, addoption keywords) of the run options the plugin takes, in declaration order."""
    from harness.contract.options import add_run_options
    from harness.core.units import SIZE_HELP
    from harness.targets import NAMES

    found: list[tuple[str, str, dict[str, Any]]] = []
    shown = ", ".join(NAMES[:-1]) + f" or {NAMES[-1]}" if len(NAMES) > 1 else NAMES[0]
    text = {"target_names": shown, "size_help": SIZE_HELP}
    for name in RUN_OPTIONS:  # in the plugin's order (its --help's)

        def collect(flag: str, name: str = name, **keywords: Any) -> None:
            found.append((name, flag, keywords))

        add_run_options(collect, [name], prefix=PREFIX, variants=RUN_OPTIONS, targets=NAMES, text=text)
    return found


def option_arguments() -> list[tuple[str, dict[str, Any]]]:
    """Every option of the plugin as (flag, keywords), plain text only (read with the package borrowed)."""
    options = [
        (flag, {k: v for k, v in keywords.items() if k not in ("type", "choices")})
        for _, flag, keywords in run_option_arguments()
    ]
    report_dir = {
        "dest": "fmw_report_dir",
        "metavar": "DIR",
        "help": "keep every run folder of the session in DIR/runs and render DIR/report.html over them, "
        "with each test's outcome",
    }
    fork_server = {
        "dest": "fmw_fork_server",
        "action": "store_true",
        "help": "start each `python -m harness` of run_harness by forking one pre-imported interpreter per "
        "pytest process (Linux; each run is still a process of its own, with its own arguments, folder, "
        "environment, output and exit code): for suites of many short runs",
    }
    return [*options, (REPORT_DIR, report_dir), (FORK_SERVER, fork_server)]


@dataclass
class HarnessOptions:
    """The session's measurement options parsed as ``run`` parses them; ``run_args()`` as spelled."""

    target: str
    processes: list[int]
    model_size: int  # bytes
    model: Path | None
    report_dir: Path | None
    given: dict[str, str] = field(default_factory=dict, repr=False)  # field name -> the text given

    def run_args(self) -> list[str]:
        """``--target``, ``--processes`` and the model's arguments, for ``run_harness("run", ...)``."""
        from harness.contract.options import flag_of

        return [flag_of("target"), self.target, flag_of("processes"), self.given["processes"], *self.model_args()]

    def model_args(self) -> list[str]:
        """``--model PATH``, or ``--model-size SIZE`` as the user spelled it."""
        from harness.contract.options import flag_of

        if self.model is not None:
            return [flag_of("models"), str(self.model)]
        return [flag_of("model_size"), self.given["model_size"]]


def _parse(flag: str, text: str, keywords: dict[str, Any]) -> Any:
    """One option's text parsed as argparse would; a mistake is a one-line pytest usage error."""
    import argparse

    choices = keywords.get("choices")
    if choices and text not in choices:
        raise pytest.UsageError(f"{flag} {text}: choose from {', '.join(choices)}")
    parse = keywords.get("type")
    try:
        return parse(text) if parse is not None else text
    except (argparse.ArgumentTypeError, ValueError, TypeError) as err:
        raise pytest.UsageError(f"{flag} {err}") from None


def parse_options(config: pytest.Config) -> HarnessOptions:
    """The ``--fmw-*`` options of ``config`` parsed and checked against ``run``'s bounds."""
    from harness.core.errors import InputError
    from harness.core.limits import check_bounds

    values: dict[str, Any] = {}
    given: dict[str, str] = {}
    for name, flag, keywords in run_option_arguments():
        text = config.getoption(keywords["dest"])
        values[name] = None if text is None else _parse(flag, text, keywords)
        if text is not None:
            given[name] = text
    try:
        check_bounds(SimpleNamespace(**values), prefix=PREFIX)
    except InputError as err:
        raise pytest.UsageError(str(err)) from None
    report_dir = config.getoption(REPORT_DIR)
    return HarnessOptions(
        target=values["target"],
        processes=values["processes"],
        model_size=values["model_size"],
        model=values["models"],
        report_dir=Path(report_dir).resolve() if report_dir else None,
        given=given,
    )


def harness_options(config: pytest.Config) -> HarnessOptions:
    """The session's measurement options (parsed once by `check_options`)."""
    options = config.stash.get(OPTIONS_KEY, None)
    if options is None:
        options = config.stash[OPTIONS_KEY] = parse_options(config)
    return options


def check_options(config: pytest.Config) -> None:
    """The plugin's options checked before the session: a mistake is a usage error (exit 4), one line."""
    from harness.core.errors import InputError
    from harness.core.files import check_writable

    config.stash[OPTIONS_KEY] = parse_options(config)
    try:
        report_dir = config.getoption(REPORT_DIR)
        if report_dir:
            if Path(report_dir).exists() and not Path(report_dir).is_dir():
                raise InputError(f"{REPORT_DIR} {report_dir}: is a file, not a folder")
            check_writable(report_dir, REPORT_DIR)
            _check_apart(Path(report_dir))
    except InputError as err:
        raise pytest.UsageError(str(err)) from None
    except OSError as err:  # a name too long, a folder that cannot be looked at: still a usage error
        raise pytest.UsageError(f"{REPORT_DIR} {report_dir}: {err.strerror or err}") from None


def _check_apart(report_dir: Path) -> None:
    """Not the file system's root, and apart from the model cache: the plugin empties DIR/runs/."""
    from harness.cache import default_cache_dir
    from harness.core.errors import InputError
    from harness.core.files import real_path

    folder, cache = real_path(report_dir), real_path(default_cache_dir())
    if folder == Path(folder.anchor):
        raise InputError(f"{REPORT_DIR} {report_dir}: the file system's root; choose a folder of the session's own")
    if folder == cache or cache in folder.parents or real_path(folder / "runs") in (cache, *cache.parents):
        raise InputError(f"{REPORT_DIR} {report_dir} and the model cache {cache} overlap: keep them apart")


def start_recorder(config: pytest.Config, token: str | None) -> SessionRecorder | None:
    """The --fmw-report-dir recorder of this process (None without it); the controller makes the token."""
    report_dir = config.getoption(REPORT_DIR)
    if not report_dir:
        return None
    worker_input = getattr(config, "workerinput", None)
    recorder = SessionRecorder(
        Path(report_dir).resolve(), token or uuid.uuid4().hex[:12], controller=worker_input is None
    )
    if recorder.controller:
        recorder.start()
    config.stash[RECORDER_KEY] = recorder
    return recorder


def gates_notice(config: pytest.Config) -> str | None:
    """One line naming the default gates the session's generated model cannot exercise; None when all can."""
    from harness.contract.options import RunOptions, flag_of
    from harness.core.gates import parse_gates
    from harness.targets import get_target

    options = harness_options(config)
    if options.model:
        return None  # the size of the user's own model is known only once it is prepared
    facts = {"weights_bytes": options.model_size, "processes": max(options.processes)}
    exprs = [expr for expr, _ in get_target(options.target).default_gates(RunOptions(target=options.target))]
    unmet = {}
    for gate in parse_gates(exprs):
        failing = [str(c) for c in gate.when if c.metric in facts and not c.holds(facts[c.metric])]
        if failing:
            unmet[gate.check.metric] = " and ".join(failing)
    if not unmet:
        return None
    why = "; ".join(f"{name} needs {cond}" for name, cond in unmet.items())
    size, processes = (f"{flag_of(n, PREFIX)} {options.given[n]}" for n in ("model_size", "processes"))
    return (
        f"qnn-fmw-harness: {size}, {processes}: "
        f"{len(unmet)} default gate(s) of --target {options.target} will skip in the runs ({why})"
    )


def device_skip_reason() -> str | None:
    """None when this machine can run ``device`` tests (probed once per process), else why they skip."""
    from harness.targets.qnn.device import device_skip_reason as probe

    return probe()  # "not a QNN device: <what the EP reported>"


def write_weights_file(folder: Path, size: int = 1 << 20, name: str = "weights.bin", seed: int = 0) -> Path:
    """A file of deterministic pseudo-random bytes (different seeds, different bytes)."""
    import random

    path = folder / name
    path.write_bytes(random.Random(seed).randbytes(size))
    return path


@contextmanager
def mapper_leak_guard() -> Iterator[None]:
    """Fails when the block leaves mapper_impl holding more mappings, views or heap buffers than before."""
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
    # leaked_loads counts loads their finalizer already released.
    leaked = {
        key: (before[key], value) for key, value in after.items() if value > before[key] and key != "leaked_loads"
    }
    assert not leaked, f"mapper_impl leaked (before, after): {leaked}"
