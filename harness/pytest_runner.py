"""Running ``python -m harness`` from a pytest session as a user would (the fixtures' runner, the fork server)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.pytest_recorder import SessionRecorder, shown_id

if TYPE_CHECKING:
    from harness.forkserver import ForkServer

FORK_SERVER = "--fmw-fork-server"  #: The plugin's own option: run_harness through `harness.forkserver`.
RECORDER_KEY = pytest.StashKey[SessionRecorder]()  #: The session recorder between hooks (pytest's per-config stash).
_SESSION_RUNNERS: list[HarnessRunner] = []  #: This process's live session runners (pytester may nest one).


@dataclass
class HarnessOutcome:
    """What one ``python -m harness`` call did: exit code, output, and its run folder."""

    returncode: int
    stdout: str
    stderr: str
    out: Path
    kept: Path | None = None  # the copy under --fmw-report-dir, when the run was kept there

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


def package_root() -> Path:
    """The folder holding this ``harness`` package (site-packages, or the checkout)."""
    return Path(__file__).resolve().parent.parent


def harness_env(model_cache: Path | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A harness subprocess's environment: the session's model cache, this package first on PYTHONPATH, ``extra``."""
    env = dict(os.environ)
    if model_cache is not None:
        env["HARNESS_CACHE_DIR"] = str(model_cache)
    paths = [str(package_root()), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.update(extra or {})
    return env


def safe_name(nodeid: str) -> str:
    """A folder name for a test id: ``suites/x.py::test_a[1-2]`` -> ``x-test_a-1-2``."""
    tail = shown_id(nodeid).split("/")[-1].replace(".py::", "-").replace("::", "-").removesuffix(".py")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", tail).strip("-.")[:120] or "run"


def run_python(
    args: Sequence[str], *, cwd: Path, env: dict[str, str], timeout: float, preexec: Callable[[], None] | None = None
) -> subprocess.CompletedProcess:
    """`HarnessRunner.python` of the session runner, or a plain subprocess before there is one."""
    runner = session_runner()
    if runner is not None:
        return runner.python(args, cwd=cwd, env=env, timeout=timeout, preexec=preexec)
    return _subprocess_python(args, cwd=cwd, env=env, timeout=timeout, preexec=preexec)


def _subprocess_python(
    args: Sequence[str], *, cwd: Path, env: dict[str, str], timeout: float, preexec: Callable[[], None] | None
) -> subprocess.CompletedProcess:
    """``subprocess.run(capture_output=True, text=True)`` with files, not pipes, for the output: a
    pipe reads to its end only once every holder of its write end has closed it (a worker left
    behind; under Wine, its desktop: docs/ci.md), and on Windows ``run`` reads on after the kill, so
    the timeout would not end the wait."""
    import locale
    import tempfile

    argv = [sys.executable, *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=cwd, env=env, preexec_fn=preexec
        )
        try:
            proc.wait(timeout=timeout)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        texts = []
        for file in (out, err):
            file.seek(0)
            text = file.read().decode(locale.getpreferredencoding(False), errors="replace")
            texts.append(text.replace("\r\n", "\n").replace("\r", "\n"))
    return subprocess.CompletedProcess(argv, proc.returncode, *texts)


def session_runner() -> HarnessRunner | None:
    """This process's session runner, or None before the fixture exists."""
    return _SESSION_RUNNERS[-1] if _SESSION_RUNNERS else None


class HarnessRunner:
    """Runs ``python -m harness`` as a user would, with the session's model cache; keeps runs for --fmw-report-dir."""

    def __init__(
        self, config: pytest.Config, model_cache: Path, server_folder: Callable[[], Path] | None = None
    ) -> None:
        self.config = config
        self.model_cache = model_cache
        self._used: Counter[str] = Counter()
        #: makes the fork server's folder (``--fmw-fork-server``); None once started or refused
        self._server_folder = server_folder if config.getoption("fmw_fork_server", False) else None
        self._server: ForkServer | None = None
        _SESSION_RUNNERS.append(self)

    def _fork_server(self) -> ForkServer | None:
        """The fork server, started on first use; None without the option or when it cannot start (one warning)."""
        if self._server_folder is not None:
            from harness.core.errors import ForkServerUnavailable
            from harness.forkserver import ForkServer

            make, self._server_folder = self._server_folder, None
            try:
                self._server = ForkServer.start(make(), harness_env(self.model_cache))
            except ForkServerUnavailable as err:
                warnings.warn(pytest.PytestWarning(f"{FORK_SERVER}: {err}; runs start as subprocesses"), stacklevel=2)
        return self._server

    def close(self) -> None:
        """End the fork server, if one was started."""
        if _SESSION_RUNNERS and _SESSION_RUNNERS[-1] is self:
            _SESSION_RUNNERS.pop()
        if self._server is not None:
            self._server.close()
            self._server = None

    def python(
        self,
        args: Sequence[str],
        *,
        cwd: Path,
        env: dict[str, str],
        timeout: float,
        preexec: Callable[[], None] | None = None,
    ) -> subprocess.CompletedProcess:
        """``python *args`` as ``subprocess.run(capture_output=True, text=True)``: forked when allowed, else spawned."""
        server = self._fork_server() if preexec is None else None
        if server is not None and server.serves(env):
            return server.run(args, cwd=cwd, env=env, timeout=timeout)
        return _subprocess_python(args, cwd=cwd, env=env, timeout=timeout, preexec=preexec)

    @property
    def recorder(self) -> SessionRecorder | None:
        return self.config.stash.get(RECORDER_KEY, None)

    def default_out(self, owner: str, scratch: Path) -> Path:
        """A fresh run folder for ``owner``: under DIR/runs (exclusive mkdir), else in ``scratch``."""
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
        proc = self.python(argv[1:], cwd=scratch, env=harness_env(self.model_cache, env), timeout=timeout)
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
    """Why the headline sentence in ``out`` contradicts itself ("" when it does not or there is none)."""
    from harness.core.headline import HEADLINE_JSON, factor_problem, read_headline

    if not (out / HEADLINE_JSON).is_file():
        return ""
    try:
        return factor_problem(str(read_headline(out / HEADLINE_JSON).get("sentence") or ""))
    except (OSError, ValueError):
        return ""  # not a headline of this version: the tests that wrote it check it


def shared_model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache folder for every xdist worker of the session (entries published atomically)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = shared / "model-cache"
    path.mkdir(exist_ok=True)
    return path
