"""What is private to this repository's own test suites.

Options, markers and fixtures (``run_harness``, ``harness_options``, ``model_cache``...) come
from the package's pytest plugin, `harness.pytest_plugin`, registered by ``pip install -e .``
as the ``pytest11`` entry point ``qnn_fmw_harness``: any project gets them the same way.

The few helpers here are the ones more than one suite needs (each suite's own support module
imports them from here: the suite folders are not packages and cannot import each other).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

# Re-exported for the suites that import them from here (reliability helpers).
from harness.pytest_plugin import HarnessOutcome, harness_env

__all__ = ["ROOT", "HarnessOutcome", "harness_env", "kill_unfinished", "one_line_error", "qnn_skip_reason"]

#: The plugin suite runs pytest in temporary projects of its own (pytester).
pytest_plugins = ["pytester"]

#: This checkout (the suites read its workflows, README and sources).
ROOT = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    """Compile this checkout's own sources once, before the suites start their thousand-odd
    harness processes. With PYTHONDONTWRITEBYTECODE set (this machine's environment sets it)
    Python writes no .pyc, so every ``python -m harness`` and every worker compiled the
    harness's modules from source again: 0.13 s of a small run's parent alone, and a small run
    (N=2, both modes) took 3.46 CPU-s before and 2.95 after. pip leaves .pyc beside an installed
    package; an editable checkout has none. Only the controller compiles (xdist workers start
    after it), only when Python would not write them itself; the files go to ``__pycache__``
    beside the sources, which git ignores."""
    if sys.flags.dont_write_bytecode and not hasattr(config, "workerinput"):
        import compileall

        for package in ("harness", "mapper_impl"):
            compileall.compile_dir(ROOT / package, quiet=2)
    _dump_stacks_of_a_hung_session()


#: Seconds after which a session still running has every thread's stack dumped (a CI step's hang).
HUNG_SESSION_ENV = "QNN_FMW_HUNG_SESSION_S"


def _dump_stacks_of_a_hung_session() -> None:
    """In the controller and each xdist worker: every thread's stack on stderr once the session
    has run ``$QNN_FMW_HUNG_SESSION_S`` seconds. pytest's ``faulthandler_timeout`` covers a test
    only (and owns faulthandler's one timer); a hang between tests or at a worker's exit (a
    thread it waits for) would name nothing."""
    import faulthandler
    import os
    import threading

    seconds = os.environ.get(HUNG_SESSION_ENV, "")
    if seconds.isdigit() and int(seconds) > 0:
        print_stacks = threading.Timer(int(seconds), faulthandler.dump_traceback, (sys.__stderr__, True))
        print_stacks.daemon = True
        print_stacks.start()


@pytest.fixture(scope="session", autouse=True)
def _session_runner(harness_runner):
    """The session's runner exists before any test, so the helpers that run ``python -m
    harness`` themselves (`harness.pytest_runner.session_runner`) share its fork server."""
    return harness_runner


def one_line_error(proc: subprocess.CompletedProcess | HarnessOutcome, exit_code: int, *expected: str) -> str:
    """Exit ``exit_code`` with exactly one stderr line holding every ``expected`` text, and no
    traceback anywhere. Returns the line."""
    assert proc.returncode == exit_code, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def qnn_skip_reason() -> str | None:
    """Why the real QNN EP cannot run on this machine (platform, package), or None."""
    from harness.targets.qnn.ep import qnn_platform_supported

    ok, why = qnn_platform_supported()
    if not ok:
        return why
    try:
        import onnxruntime_qnn  # noqa: F401 - cheap: the package only computes library paths
    except ImportError:
        return "onnxruntime-qnn is not installed"
    return None


@pytest.fixture
def needs_qnn() -> None:
    """Skips the test where the real QNN EP cannot run, with `qnn_skip_reason`'s reason (the
    qnn suites use it for every test: ``pytest.mark.usefixtures("needs_qnn")``)."""
    reason = qnn_skip_reason()
    if reason:
        pytest.skip(reason)


def kill_unfinished(children: Iterable[subprocess.Popen]) -> None:
    """Kill and reap every child still running: the cleanup after children a test started
    together, so a failed assertion or a timeout never leaves one behind."""
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait()


#: How long a test waits for a line a child it started promised (a deadline, not a timing).
LINE_DEADLINE_S = 120.0


def line_from(child: subprocess.Popen, what: str, timeout: float = LINE_DEADLINE_S) -> str:
    """The next line of ``child``'s stdout, or a failure naming ``what`` was awaited: a child that
    never writes it (hung at start, under Wine or a loaded machine) fails the test instead of
    holding it, and its xdist worker, forever."""
    import threading

    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(child.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not box:
        child.kill()  # ends the read: the thread exits with the pipe
        raise AssertionError(f"no {what} from child {child.pid} within {timeout:.0f} s (killed)")
    return box[0]
