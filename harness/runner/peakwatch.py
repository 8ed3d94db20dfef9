"""The start-up peak of every worker of a group, sampled by the parent at 1 kHz or faster (outside their GIL)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from harness.runner.phaseboard import DONE, PhaseBoard, state_phase
from harness.runner.procmem import open_reader

INTERVAL_S = 0.0005  #: 0.5 ms asks for 2 kHz, so 1 kHz survives a loaded machine.


@dataclass
class WatchedPeak:
    """What the parent saw of one worker's start-up (None: not watched)."""

    peak_private_bytes: int | None = None
    peak_phase: str | None = None
    peak_shared_bytes: int | None = None  #: The shared resident bytes in the sample where the private figure peaked.
    samples: int = 0
    peak_sample_hz: float | None = None
    peak_sample_max_gap_s: float | None = None


@dataclass
class _Slot:
    """One worker under watch."""

    spawned_pid: int
    reader: object | None = None
    finished: bool = False
    peak: int = -1
    phase: int = 0
    shared: int | None = None
    samples: int = 0
    first: float = 0.0
    last: float = 0.0
    max_gap: float = 0.0
    pid_checks: int = 0


class PeakWatch:
    """``with PeakWatch(board, phases) as watch: spawn, watch.expect(slot, pid), wait``."""

    MAX_PID_CHECKS = 50  #: How often a slot's reported pid is checked against the spawned process before giving up.

    def __init__(self, board: PhaseBoard, phases: tuple[str, ...], interval_s: float = INTERVAL_S) -> None:
        self.board = board
        self.phases = phases
        self.interval_s = interval_s
        self._slots: dict[int, _Slot] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def expect(self, slot: int, spawned_pid: int) -> None:
        """Watch ``slot`` once its worker (``spawned_pid`` or a child of it) announces itself."""
        with self._lock:
            self._slots[slot] = _Slot(spawned_pid)

    def samples(self, slot: int) -> int:
        with self._lock:
            found = self._slots.get(slot)
            return found.samples if found else 0

    def sweep(self) -> None:
        """One sample of every worker still starting."""
        with self._lock:
            for index, slot in self._slots.items():
                if not slot.finished:
                    self._sample(index, slot)

    def _sample(self, index: int, slot: _Slot) -> None:
        before = self.board.state(index)
        if before == 0:
            return  # not started yet
        if slot.reader is None and not self._attach(index, slot):
            return
        try:
            private, shared = slot.reader.read_split()  # type: ignore[union-attr]
        except (OSError, ValueError):
            self._finish(slot)  # the process is gone: its peak is what was seen until then
            return
        after = self.board.state(index)
        now = time.perf_counter()
        if slot.samples:
            slot.max_gap = max(slot.max_gap, now - slot.last)
        else:
            slot.first = now
        slot.samples, slot.last = slot.samples + 1, now
        stable = before == after and state_phase(before) != DONE
        if stable and private > slot.peak:  # a sample across a phase change: counted, not a peak
            slot.peak, slot.shared, slot.phase = private, shared, state_phase(before)
        if state_phase(after) == DONE:
            self._finish(slot)

    def _attach(self, index: int, slot: _Slot) -> bool:
        from harness.contract.spawn import worker_pid_in_tree

        slot.pid_checks += 1
        pid = self.board.pid(index)
        try:
            if pid and worker_pid_in_tree(slot.spawned_pid, pid):
                slot.reader = open_reader(pid)
                return True
        except OSError:
            pass
        if slot.pid_checks >= self.MAX_PID_CHECKS:
            slot.finished = True  # not ours, or not readable: this worker is not watched
        return False

    def _finish(self, slot: _Slot) -> None:
        slot.finished = True
        if slot.reader is not None:
            slot.reader.close()  # type: ignore[attr-defined]
            slot.reader = None

    def result(self, slot: int) -> WatchedPeak:
        with self._lock:
            found = self._slots.get(slot)
        if found is None or found.samples == 0:
            return WatchedPeak()
        span = found.last - found.first
        phase = self.phases[found.phase] if found.peak >= 0 and found.phase < len(self.phases) else None
        return WatchedPeak(
            peak_private_bytes=found.peak if found.peak >= 0 else None,
            peak_phase=phase,
            peak_shared_bytes=found.shared,
            samples=found.samples,
            peak_sample_hz=(found.samples - 1) / span if found.samples > 1 and span > 0 else None,
            peak_sample_max_gap_s=found.max_gap if found.samples > 1 else None,
        )

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sweep()

    def __enter__(self) -> PeakWatch:
        self._thread = threading.Thread(target=self._run, name="peak-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (idempotent): a last sweep, every reader closed; safe after an interrupted start."""
        self._stop.set()
        thread, self._thread = self._thread, None
        try:
            if thread is not None:
                if thread.is_alive():
                    thread.join(timeout=1.0)
                self.sweep()
        finally:  # a second Ctrl-C during the last sweep still closes every descriptor / handle
            with self._lock:
                for slot in self._slots.values():
                    self._finish(slot)

    def __exit__(self, *exc: object) -> None:
        self.stop()


def merged_peak(record, watched: WatchedPeak) -> dict:
    """The row's peak columns: the higher of the worker's samples and the parent's, with its phase."""
    own = record.peak_private_bytes
    if watched.peak_private_bytes is not None and (own is None or watched.peak_private_bytes > own):
        private, phase, shared = watched.peak_private_bytes, watched.peak_phase, watched.peak_shared_bytes
    else:
        private, phase, shared = own, record.peak_phase, record.peak_shared_bytes
    return {
        "peak_private_bytes": private,
        "peak_phase": phase,
        "peak_shared_bytes": shared,
        "peak_rss_bytes": record.peak_rss_bytes,
        "peak_sample_hz": watched.peak_sample_hz,
        "peak_sample_max_gap_s": watched.peak_sample_max_gap_s,
    }
