"""Progress on stderr: a rich live area or plain lines with a heartbeat; text from data printed with markup off."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from harness.core.summary import row_ok
from harness.core.units import fmt_bytes, fmt_seconds
from harness.core.vocab import Start

HEARTBEAT_S = 10.0
PLAIN_STEP = 0.25  #: Plain mode prints a byte-progress line when this share more is done.
WORKER_STATES = ("starting", "ready", "exited", "timed out", "sampled", "done")


@dataclass
class _Stage:
    label: str
    t0: float
    done: int = 0
    total: int = 0
    unit: str = "bytes"
    printed_share: float = 0.0
    detail: str = ""  # what the stage is doing now (e.g. "compiling X for QNN")
    beats: int = 0  # "still busy" lines printed, one per HEARTBEAT_S since its own start

    def text(self) -> str:
        took = fmt_seconds(time.monotonic() - self.t0)
        if not self.total:
            return f"{self.label}: {self.detail + ', ' if self.detail else ''}{took}"
        amount = (
            f"{fmt_bytes(self.done)} / {fmt_bytes(self.total)}"
            if self.unit == "bytes"
            else f"{self.done} / {self.total} {self.unit}"
        )
        return f"{self.label}: {amount} ({100 * self.done / self.total:.0f}%), {took}"


@dataclass
class _Group:
    title: str
    t0: float
    states: dict[int | str, tuple[str, float]] = field(default_factory=dict)  # worker -> (state, elapsed s)
    beats: int = 0  # "still busy" lines printed, one per HEARTBEAT_S since its own start

    def text(self) -> str:
        now = time.monotonic() - self.t0
        took = fmt_seconds(now)
        workers = "  ".join(_worker_text(i, state, at, now) for i, (state, at) in sorted(self.states.items()))
        return f"{self.title}, {took}: {workers}"


STARTING_DETAIL = "(sessions + first inference)"  #: What a "starting" worker does (long first inferences here).


def _worker_text(index: int | str, state: str, at: float, now: float) -> str:
    """A finished state shows when it was reached; "starting" counts on until ready."""
    name = index if isinstance(index, str) else f"w{index}"
    if state == "starting":
        return f"{name} starting {STARTING_DETAIL} {fmt_seconds(now)}"
    return f"{name} {state} {fmt_seconds(at)}"


class Progress:
    """Progress events of one run. ``live=None`` picks live rendering when stderr is a terminal."""

    def __init__(self, quiet: bool = False, *, live: bool | None = None) -> None:
        from harness.console import make_console

        self.console = make_console(stderr=True)
        self.quiet = quiet
        self.live_mode = (not quiet) and (self.console.is_terminal if live is None else live)
        self._lock = threading.RLock()
        self._stage: _Stage | None = None
        self._group: _Group | None = None
        self._live: Any = None
        self._heartbeat: threading.Thread | None = None
        self._stop = threading.Event()
        self._t0 = 0.0

    def note(self, message: str) -> None:
        """One permanent line, printed with our lock released (taking both locks in the other order deadlocked)."""
        if self.quiet:
            return
        with self._lock:
            target = self._live.console if self._live is not None else self.console
        target.print(message, markup=False, highlight=False)

    def _render(self) -> Any:
        from rich.text import Text

        with self._lock:
            lines = [part.text() for part in (self._stage, self._group) if part is not None]
        return Text("\n".join(lines))

    def _start_live(self) -> None:
        if not self.live_mode or self._live is not None:
            return
        from rich.live import Live

        self._live = Live(
            get_renderable=self._render,
            console=self.console,
            refresh_per_second=4,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def _start_heartbeat(self) -> None:
        """Plain mode: a "still ..." line every HEARTBEAT_S during a stage or a group."""
        if self.quiet or self.live_mode or self._heartbeat is not None:
            return

        def beat() -> None:
            # Each stage and group counts its own HEARTBEAT_S from its own start.
            while not self._stop.wait(min(HEARTBEAT_S, 0.5) / 2):
                with self._lock:
                    parts = []
                    for part in (self._stage, self._group):
                        due = int((time.monotonic() - part.t0) // HEARTBEAT_S) if part is not None else 0
                        if part is not None and due > part.beats:
                            part.beats = due
                            parts.append(part.text())
                for text in parts:
                    self.note(f"  still busy: {text}")

        self._heartbeat = threading.Thread(target=beat, name="progress-heartbeat", daemon=True)
        self._heartbeat.start()

    def close(self) -> None:
        """Stop the live area and the heartbeat (idempotent)."""
        self._stop.set()
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None and heartbeat.is_alive():  # one Ctrl-C kept from starting is not joined
            heartbeat.join(timeout=1)
        with self._lock:
            live, self._live = self._live, None
            self._stage = self._group = None
        if live is not None:
            live.stop()

    @contextlib.contextmanager
    def stage(self, label: str) -> Iterator[Progress]:
        """A long step (building or compiling a model), its elapsed time shown while it runs."""
        with self._lock:
            self._stage = _Stage(label, time.monotonic())
        if not self.live_mode:
            self.note(f"{label}...")
        self._start_live()
        self._start_heartbeat()
        ok = False
        try:
            yield self
            ok = True
        finally:
            with self._lock:
                stage, self._stage = self._stage, None
            took = fmt_seconds(time.monotonic() - stage.t0) if stage else "-"
            self.note(f"{label}: {'done' if ok else 'stopped'} in {took}")

    def advance(self, done: int, total: int, unit: str = "bytes") -> None:
        """How far the current stage is (bytes written, steps done)."""
        with self._lock:
            stage = self._stage
            if stage is None:
                return
            stage.done, stage.total, stage.unit = done, total, unit
            share = done / total if total else 0.0
            due = not self.live_mode and share >= stage.printed_share + PLAIN_STEP - 1e-9 and share < 1
            if due:
                stage.printed_share = share
        if due:
            self.note(f"  {stage.text()}")

    def step(self, detail: str) -> None:
        """What the current stage is doing now, shown live and in every "still busy" line."""
        with self._lock:
            stage = self._stage
            if stage is None or stage.detail == detail:
                return
            stage.detail = detail
        if not self.live_mode:
            self.note(f"  {stage.label}: {detail}")

    def bytes_written(self, done: int, total: int) -> None:
        """Callback for builders that write a file of known size."""
        self.advance(done, total, "bytes")

    def group_started(self, index: int, total: int, group) -> None:
        self._t0 = time.monotonic()
        title = (
            f"[{index + 1}/{total}] {group.target} {group.mode} N={group.processes} "
            f"M={group.sessions_per_process} repeat={group.repeat}"
            + (" (timing pass: one worker at a time)" if getattr(group, "start", "") == Start.SEQUENTIAL else "")
        )
        with self._lock:
            self._group = _Group(title, self._t0)
        self.note(f"{title}: starting {group.processes} worker(s)")
        self._start_live()
        self._start_heartbeat()

    def step_started(self, index: int, total: int, step: list) -> None:
        """A step of the run: one group, or an interleaved timing pass of several."""
        if len(step) == 1:
            self.group_started(index, total, step[0])
            return
        self._t0 = time.monotonic()
        first = step[0]
        from harness.runner.timingpass import round_order

        members = ", ".join(f"{step[k].target} {step[k].mode}" for k in round_order(step, 0))
        title = (
            f"[{index + 1}-{index + len(step)}/{total}] timing pass N={first.processes} "
            f"M={first.sessions_per_process} repeat={first.repeat}: {members}, one worker at a time, interleaved"
        )
        with self._lock:
            self._group = _Group(title, self._t0)
        self.note(f"{title}: starting {sum(g.processes for g in step)} worker(s)")
        self._start_live()
        self._start_heartbeat()

    def step_event(self, group, worker: int, state: str, detail: str = "") -> None:
        """`worker_event` for a step: a worker of an interleaved pass is named with its group."""
        self.worker_event(worker if group is None else f"{group.target} {group.mode} w{worker}", state, detail)

    def step_finished(self, index: int, total: int, step: list, results: list) -> None:
        if len(step) == 1:
            self.group_finished(index, total, step[0], results[0])
            return
        rows = [row for result in results for row in result.rows]
        ok = sum(1 for r in rows if row_ok(r))
        took = fmt_seconds(time.monotonic() - self._t0)
        with self._lock:
            self._group = None
        self.note(
            f"[{index + 1}-{index + len(step)}/{total}] done in {took}: {ok} ok"
            + (f", {len(rows) - ok} failed" if len(rows) > ok else "")
        )
        for group, result in zip(step, results, strict=True):
            for row in result.rows:
                if row.error:
                    self.note(f"    {group.target} {group.mode} worker {row.worker}: {row.error[:300]}")

    def worker_event(self, worker: int | str, state: str, detail: str = "") -> None:
        """One worker's new state inside the current group (see WORKER_STATES)."""
        with self._lock:
            group = self._group
            if group is None:
                return
            elapsed = time.monotonic() - group.t0
            group.states[worker] = (state, elapsed)
        if not self.live_mode and state in ("ready", "exited", "timed out"):
            extra = f" ({detail})" if detail else ""
            who = worker if isinstance(worker, str) else f"worker {worker}"
            self.note(f"    {who} {state} after {fmt_seconds(elapsed)}{extra}")

    def group_finished(self, index: int, total: int, group, result) -> None:
        ok = sum(1 for r in result.rows if row_ok(r))
        failed = len(result.rows) - ok
        took = fmt_seconds(time.monotonic() - self._t0)
        status = f"{ok} ok" + (f", {failed} failed" if failed else "")
        with self._lock:
            self._group = None
        self.note(f"[{index + 1}/{total}] done in {took}: {status}")
        for row in result.rows:
            if row.error:
                self.note(f"    worker {row.worker}: {row.error[:300]}")
