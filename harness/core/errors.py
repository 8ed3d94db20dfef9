"""Errors the command line turns into exit codes."""

from __future__ import annotations

import argparse


class InputError(ValueError):
    """A usage or input mistake: one line on stderr, exit code 2, no traceback."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors raise InputError: one line on stderr and exit 2, because
    the usage dump argparse prints hides the actual problem."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(f"{self.prog}: {message} (see --help)")


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
