"""The harness's error tree and each branch's exit code (InputError 2, RunFailed 1), mapped by `harness.cli`."""

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
    """Base of every error the harness raises on purpose; ``exit_code`` is what the command line exits with."""

    exit_code = EXIT_FAILED


class InputError(HarnessError, ValueError):
    """A usage or input mistake: one line on stderr, exit code 2, no traceback."""

    exit_code = EXIT_USAGE


class RunFailed(HarnessError):
    """The run could not go on; metadata.json says ``"failed: <this text>"`` where it can."""

    def __init__(self, message: str, out: Path | None = None) -> None:
        super().__init__(message)
        self.out = out


class ReportFailed(RunFailed):
    """The run was measured but its report could not be written (metadata.json stays as the runner wrote it)."""


class SpawnError(HarnessError):
    """A worker process could not be started: the run cannot go on."""


class ContainerUnavailable(HarnessError):
    """No memory container can be made here; said as a usage error of --memory-limit (exit 2)."""


class ForkServerUnavailable(HarnessError, RuntimeError):
    """The suites' fork server cannot be used here; the caller decides whether to start runs the ordinary way."""


class CorruptEntry(HarnessError):
    """A cache entry exists but fails its own consistency check."""


class QnnUnavailableError(HarnessError, RuntimeError):
    """onnxruntime-qnn is missing or exposes no QNN device on this machine."""


class StringsError(HarnessError, RuntimeError):
    """A wheel or library that cannot be read, or a download that failed for another reason."""


class RegistryUnreachable(StringsError):
    """pip could not reach the package index (no network, proxy, DNS)."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors raise InputError: one line, exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(f"{self.prog}: {message}{self._suggestion(message)} (see --help)")

    def _suggestion(self, message: str) -> str:
        """``--proceses`` -> "(did you mean --processes?)"."""
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
    """Every option's default in its help, as a user would type it; epilogs kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        # Identity, not ==: a count whose default is 0 must still show it.
        if default is None or default is False or default is argparse.SUPPRESS or "%(default)" in text:
            return text
        if action.nargs == 0:  # a switch (--no-default-gates): its default is its absence
            return text
        if isinstance(action.default, list):  # repeatable options start empty: nothing to show
            return text
        return text + " (default: %(default)s)"
