"""Peak private memory of a worker during its start-up: the worker's side.

Why: what fails a load on a small machine is the *transient* peak while the sessions are
created (the heap path holds the file copy and the runtime's copy at once; a fallback holds
the mapping and the direct-read copy), not the steady state the parent samples at the barrier.
The steady sampling at 1 kHz or faster is the parent's (`harness.runner.peakwatch`): a thread
in here shares the worker's GIL and is blinded by every long C call. The worker's own part is
small and exact:

- it announces its pid and each phase on its slot of the group's `PhaseBoard` (one byte store
  per phase change), so the parent's samples carry the phase;
- it samples itself at every phase change (`mark`), so a peak at a boundary is never missed
  between two of the parent's ticks;
- at the end it reads the kernel's own peaks: Linux ``VmHWM`` (counts file pages too, so it is
  `peak_rss_bytes`, never a private figure); Windows ``PeakPagefileUsage`` (the private peak,
  which the sampled maximum is raised to) and ``PeakWorkingSetSize`` (`peak_rss_bytes`).

Reads allocate nothing (`harness.runner.procmem`, the readers the parent's watch uses too).
Phases in start-up order: start (interpreter, imports), load (map or read the weights),
create (session creation), first_run (the first inference).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from harness.core.vocab import PeakPhase
from harness.runner.procmem import open_reader

#: Phases in start-up order (the `peak_phase` column's values).
PHASES: tuple[PeakPhase, ...] = tuple(PeakPhase)


@dataclass
class PeakResult:
    """What the worker saw of itself between start and stop (None: not measurable here)."""

    peak_private_bytes: int | None = None
    peak_phase: str | None = None
    #: The shared (file-backed) resident bytes in the sample where the private figure peaked.
    peak_shared_bytes: int | None = None
    peak_rss_bytes: int | None = None
    samples: int = 0


class PeakSampler:
    """The worker's own samples: ``start`` at its first line, ``mark`` at each phase, ``stop``
    when it is ready. ``slot`` is its slot of the group's phase board (None: no parent watch)."""

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


#: The worker's sampler (one per process); `mark` is a no-op when none runs (e.g. in tests
#: that create sessions through a target directly).
_ACTIVE: PeakSampler | None = None


def start(board: str = "", slot: int = -1) -> PeakSampler:
    """Start the worker's sampler, on ``slot`` of the phase board at ``board`` if one is given
    (a board that cannot be opened only means the parent's watch sees no phases)."""
    global _ACTIVE
    phase_slot = None
    if board:
        from harness.runner.phaseboard import PhaseSlot

        try:
            phase_slot = PhaseSlot(board, slot)
        except (OSError, ValueError):
            phase_slot = None
    _ACTIVE = PeakSampler(phase_slot).start()
    return _ACTIVE


def mark(phase: str) -> None:
    """Tell the running sampler which phase the worker is in (targets call this)."""
    if _ACTIVE is not None:
        _ACTIVE.mark(phase)


def stop() -> PeakResult:
    global _ACTIVE
    sampler, _ACTIVE = _ACTIVE, None
    return sampler.stop() if sampler is not None else PeakResult()
