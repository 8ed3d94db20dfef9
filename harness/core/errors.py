"""Errors the command line turns into exit codes."""

from __future__ import annotations

import argparse


class InputError(ValueError):
    """A usage or input mistake: one line on stderr, exit code 2, no traceback."""


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
