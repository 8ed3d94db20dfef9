"""The harness's error tree, and the exit code of each branch (one place; `harness.cli` maps
them). Every error the harness raises on purpose is a `HarnessError`:

- `InputError` (usage or input mistake, also a ValueError): exit 2, one line, no traceback;
- `RunFailed` (the run could not go on: disk full, no descriptors): exit 1;
- `ReportFailed` (the run is measured, its report could not be written): exit 1;
- `SpawnError` (a worker could not be started): becomes a `RunFailed` of its run;
- `ContainerUnavailable` (no memory container for --memory-limit: no controller, no right):
  said as an `InputError` of the option, exit 2;
- `CorruptEntry` (a cache entry fails its own check): the cache rebuilds it, never user-facing;
- `QnnUnavailableError` (onnxruntime-qnn missing or without a device; also a RuntimeError);
- `StringsError` / `RegistryUnreachable` (reading the EP's binaries for its strings).

As in `mapper_impl._common`, OS errors become these at the boundary (``raise ... from err``).
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: Set by the SIGTERM/SIGHUP handler: an interruption raised where it is swallowed (a ``__del__``)
#: is raised again at the next step (`raise_if_interrupted`).
INTERRUPT_REQUESTED = threading.Event()


def raise_if_interrupted() -> None:
    if INTERRUPT_REQUESTED.is_set():
        raise KeyboardInterrupt


class HarnessError(Exception):
    """Base of every error the harness raises on purpose; ``exit_code`` is what the command
    line exits with when one reaches it."""

    exit_code = EXIT_FAILED


class InputError(HarnessError, ValueError):
    """A usage or input mistake: one line on stderr, exit code 2, no traceback."""

    exit_code = EXIT_USAGE


class RunFailed(HarnessError):
    """The run could not go on (disk full, no descriptors, a worker that cannot be started):
    metadata.json says ``"failed: <this text>"`` where it could still be written."""

    def __init__(self, message: str, out: Path | None = None) -> None:
        super().__init__(message)
        self.out = out


class ReportFailed(RunFailed):
    """The run was measured, but its report (report.html, the history or headline.json) could
    not be written. A report never writes a run's facts: metadata.json stays as the runner
    wrote it, and ``harness report`` renders the folder again."""


class SpawnError(HarnessError):
    """A worker process could not be started (no file descriptors, no memory, no process
    slots): the run cannot go on, and says so in one line."""


class ContainerUnavailable(HarnessError):
    """No memory container can be made here (`harness.runner.container`: no memory controller,
    no right to make a cgroup, a job call that failed): the message names what is missing.
    The command line says it as a usage error of --memory-limit (exit 2)."""


class ForkServerUnavailable(HarnessError, RuntimeError):
    """The test suites' fork server cannot be used here (platform, socket path, a failed
    start; `harness.forkserver`): the message says why; the caller decides whether to start
    its runs the ordinary way."""


class CorruptEntry(HarnessError):
    """A cache entry exists but fails its own consistency check."""


class QnnUnavailableError(HarnessError, RuntimeError):
    """onnxruntime-qnn is missing or exposes no QNN device on this machine."""


class StringsError(HarnessError, RuntimeError):
    """A wheel or library that cannot be read, or a download that failed for another reason."""


class RegistryUnreachable(StringsError):
    """pip could not reach the package index (no network, proxy, DNS)."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors raise InputError: one line on stderr and exit 2, because
    the usage dump argparse prints hides the actual problem."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(f"{self.prog}: {message}{self._suggestion(message)} (see --help)")

    def _suggestion(self, message: str) -> str:
        """``--proceses`` -> "(did you mean --processes?)": the closest flag of this parser or
        its sub-commands to each unrecognized one."""
        import difflib

        if not message.startswith("unrecognized arguments:"):
            return ""
        parsers = [self]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += list(action.choices.values())
        flags = sorted({flag for parser in parsers for flag in parser._option_string_actions if flag.startswith("--")})
        given = [word.split("=")[0] for word in message.split(":", 1)[1].split() if word.startswith("--")]
        close = [match for word in given for match in difflib.get_close_matches(word, flags, n=1, cutoff=0.75)]
        return f" (did you mean {' or '.join(dict.fromkeys(close))}?)" if close else ""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every option's default in its help ("(default: 256MiB)"), epilogs kept as written (the
    gate-metric list is one metric per line). Defaults are given as the text a user would type,
    so they print in the same units."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        # identity, not ==: 0 == False, and a count whose default is 0 must still show it
        if default is None or default is False or default is argparse.SUPPRESS or "%(default)" in text:
            return text
        if action.nargs == 0:  # a switch (--no-default-gates): its default is its absence
            return text
        if isinstance(action.default, list):  # repeatable options start empty: nothing to show
            return text
        return text + " (default: %(default)s)"
