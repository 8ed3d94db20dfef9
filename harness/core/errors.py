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
