"""Errors the command line turns into exit codes."""

from __future__ import annotations


class InputError(ValueError):
    """A usage or input mistake: one line on stderr, exit code 2, no traceback."""


class RunInterrupted(RuntimeError):
    """Ctrl-C during a run: children are killed, what was measured is still written."""
