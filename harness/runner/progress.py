"""Progress of a long run, on stderr (stdout carries the summary table).

Text from data (worker errors, paths) is printed as it is, never as rich markup."""

from __future__ import annotations

import time

from harness.core.units import fmt_seconds


class Progress:
    """One line per group: which group, then how it went."""

    def __init__(self, quiet: bool = False) -> None:
        from harness.console import make_console

        self.console = make_console(stderr=True)
        self.quiet = quiet
        self._t0 = 0.0

    def note(self, message: str) -> None:
        if not self.quiet:
            self.console.print(message)

    def group_started(self, index: int, total: int, group) -> None:
        self._t0 = time.monotonic()
        self.note(f"[{index + 1}/{total}] {group.target} {group.mode} N={group.processes} "
                  f"M={group.sessions_per_process} repeat={group.repeat}: starting {group.processes} worker(s)")

    def group_finished(self, index: int, total: int, group, result) -> None:
        ok = sum(1 for r in result.rows if r.output_ok)
        failed = len(result.rows) - ok
        took = fmt_seconds(time.monotonic() - self._t0)
        status = f"{ok} ok" + (f", {failed} failed" if failed else "")
        self.note(f"[{index + 1}/{total}] done in {took}: {status}")
        for row in result.rows:
            if row.error:
                self.note(f"    worker {row.worker}: {row.error[:300]}")
