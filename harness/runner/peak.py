"""A worker's start-up peak, its own side: phases on the board, a sample per phase change, the kernel's peaks."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from harness.contract import phases
from harness.contract.phases import PHASES
from harness.runner.procmem import open_reader


@dataclass
class PeakResult:
    """What the worker saw of itself between start and stop (None: not measurable here)."""

    peak_private_bytes: int | None = None
    peak_phase: str | None = None
    peak_shared_bytes: int | None = None  #: Shared resident bytes in the sample where the private figure peaked.
    peak_rss_bytes: int | None = None
    samples: int = 0


class PeakSampler:
    """The worker's own samples: ``start``, ``mark`` at each phase, ``stop`` when ready."""

    def __init__(self, slot=None) -> None:
        self.phase = PHASES[0]
        self.peak = -1
        self.peak_phase: str | None = None
        self.peak_shared: int | None = None
        self.samples = 0
        self._slot = slot
        self._lock = threading.Lock()
        self._reader = None

    def start(self) -> PeakSampler:
        if self._slot is not None:
            self._slot.set(0)
        try:
            self._reader = open_reader()
        except OSError:
            self._reader = None  # no reader on this OS: the figures stay empty
        self.sample()
        return self

    def sample(self) -> None:
        """One sample, tagged with the current phase (read and tagged under one lock)."""
        with self._lock:
            reader = self._reader
            if reader is None:
                return
            try:
                value, shared = reader.read_split()
            except (OSError, ValueError):
                return
            self.samples += 1
            if value > self.peak:
                self.peak, self.peak_phase, self.peak_shared = value, self.phase, shared

    def mark(self, phase: str) -> None:
        """The worker enters ``phase``: a sample closes the old one, then the new one begins."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; phases are {', '.join(PHASES)}")
        self.sample()
        with self._lock:
            self.phase = phase
            if self._slot is not None:
                self._slot.set(PHASES.index(phase))
        self.sample()

    def stop(self) -> PeakResult:
        """End the start-up (a last sample first, then DONE on the board) and return the peak."""
        self.sample()
        if self._slot is not None:
            from harness.runner.phaseboard import DONE

            self._slot.set(DONE)
            self._slot.close()
            self._slot = None
        if self._reader is None:
            return PeakResult()
        kernel_private, kernel_rss = self._reader.kernel_peaks()
        self._reader.close()
        self._reader = None
        peak, phase, shared = self.peak, self.peak_phase, self.peak_shared
        if kernel_private is not None and kernel_private > peak:
            peak, phase, shared = kernel_private, None, None  # the kernel saw more between samples
        return PeakResult(
            peak_private_bytes=peak if peak >= 0 else None,
            peak_phase=phase,
            peak_shared_bytes=shared,
            peak_rss_bytes=kernel_rss,
            samples=self.samples,
        )


_ACTIVE: PeakSampler | None = None  #: The worker's sampler (one per process), whose `mark` is the installed phase hook.


def start(board: str = "", slot: int = -1) -> PeakSampler:
    """Start the worker's sampler on ``slot`` of ``board`` if given, and make it hear every phase mark."""
    global _ACTIVE
    phase_slot = None
    if board:
        from harness.runner.phaseboard import PhaseSlot

        try:
            phase_slot = PhaseSlot(board, slot)
        except (OSError, ValueError):
            phase_slot = None
    _ACTIVE = PeakSampler(phase_slot).start()
    phases.install(_ACTIVE.mark)
    return _ACTIVE


def stop() -> PeakResult:
    """Stop the sampler (the phase hook goes with it) and return what it saw."""
    global _ACTIVE
    sampler, _ACTIVE = _ACTIVE, None
    if sampler is None:
        return PeakResult()
    phases.install(None)
    return sampler.stop()
