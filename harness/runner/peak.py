"""Peak private memory of a worker during its start-up, sampled from inside the worker.

Why: what fails a load on a small machine is the *transient* peak while the sessions are
created (the heap path holds the file copy and the runtime's copy at once; a fallback holds
the mapping and the direct-read copy), not the steady state the parent samples at the barrier,
after the peak has passed. So a sampler thread runs in the worker from its first line to
"ready", reading the process's private figure every `INTERVAL_S` (>= 1 kHz asked; the rate
actually achieved is recorded, since a busy machine or a long GIL-holding call slows it):

- Linux: ``/proc/self/statm`` (resident - shared = anonymous pages, the private figure; file
  pages of a read-only mapping are "shared" there even with one user), read with ``os.preadv``
  into one preallocated buffer: a sample allocates no buffer, so the sampler does not add to
  what it measures. The kernel's own peak ``VmHWM`` is read once at the end: it counts file
  pages too, so it is `peak_rss_bytes`, never a private figure.
- Windows: ``GetProcessMemoryInfo`` into one preallocated structure (`harness.runner.winmem`):
  ``PrivateUsage`` per sample; the kernel keeps ``PeakPagefileUsage`` (the private peak, which
  the sampled maximum is raised to) and ``PeakWorkingSetSize`` (`peak_rss_bytes`).

Each sample is tagged with the phase the worker is in (`mark`): start (interpreter, imports),
load (map or read the weights), create (session creation), first_run (the first inference);
the peak names the phase of the sample that saw it. A sample is also taken at every phase
change, so a peak at a boundary is never missed between two ticks.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass

#: Wanted time between two samples: 0.5 ms asks for 2 kHz, so 1 kHz survives some slowdown.
INTERVAL_S = 0.0005
#: The GIL hand-over interval while the sampler runs (Python's default is 5 ms, which would cap
#: the sampler at ~200 Hz whenever the main thread runs Python code); restored at stop.
SWITCH_INTERVAL_S = 0.0005
#: Phases in start-up order (the `peak_phase` column's values).
PHASES = ("start", "load", "create", "first_run")


@dataclass
class PeakResult:
    """What the sampler saw between start and stop (None: not measurable on this OS)."""

    peak_private_bytes: int | None = None
    peak_phase: str | None = None
    peak_rss_bytes: int | None = None
    peak_sample_hz: float | None = None
    #: The longest time between two samples: a call that holds the GIL (a 256 MiB bytearray is
    #: zero-filled under it) blinds the sampler that long; a transient shorter than this and
    #: inside such a window can be missed (the phase-change samples bound it on both sides).
    peak_sample_max_gap_s: float | None = None
    samples: int = 0


class _StatmReader:
    """Linux: private (anonymous) bytes from /proc/self/statm, no buffer allocated per read."""

    def __init__(self) -> None:
        self.fd = os.open("/proc/self/statm", os.O_RDONLY)
        self.buf = bytearray(256)
        self.views = [self.buf]
        self.page = os.sysconf("SC_PAGE_SIZE")

    def private(self) -> int:
        n = os.preadv(self.fd, self.views, 0)
        buf = self.buf
        first = buf.find(b" ", 0, n)
        second = buf.find(b" ", first + 1, n)
        third = buf.find(b" ", second + 1, n)
        resident = int(buf[first + 1 : second])
        shared = int(buf[second + 1 : third])
        return (resident - shared) * self.page

    def kernel_peaks(self) -> tuple[int | None, int | None]:
        """(private peak, RSS peak) the kernel kept: Linux has only VmHWM (RSS)."""
        try:
            with open("/proc/self/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return None, int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        return None, None

    def close(self) -> None:
        os.close(self.fd)


def _reader():
    """The reader of this OS, or None where none exists (macOS: no figure, recorded empty)."""
    if sys.platform.startswith("linux"):
        return _StatmReader()
    if sys.platform == "win32":
        from harness.runner.winmem import ProcessCounters

        return ProcessCounters()
    return None


class PeakSampler:
    """The sampler thread; `start` at the worker's first line, `stop` when it is ready."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.phase = PHASES[0]
        self.peak = -1
        self.peak_phase: str | None = None
        self.samples = 0
        self.max_gap = 0.0
        self._last = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader = None
        self._started = 0.0
        self._switch = sys.getswitchinterval()

    def start(self) -> PeakSampler:
        try:
            self._reader = _reader()
        except OSError:
            self._reader = None
        if self._reader is None:
            return self
        self._started = time.perf_counter()
        self.sample()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._thread = threading.Thread(target=self._run, name="peak-sampler", daemon=True)
        self._thread.start()
        return self

    def sample(self) -> None:
        """One sample, tagged with the current phase (thread-safe: phase changes sample too).

        The read happens under the lock: read outside it, a value of the old phase could be
        tagged with the next one when the phase changed between the read and the tagging (a
        sampler thread preempted on a loaded machine between the two makes that likely)."""
        with self._lock:
            reader = self._reader
            if reader is None:
                return
            try:
                value = reader.private()
            except (OSError, ValueError):
                return
            now = time.perf_counter()
            self.samples += 1
            if self._last and now - self._last > self.max_gap:
                self.max_gap = now - self._last
            self._last = now
            if value > self.peak:
                self.peak, self.peak_phase = value, self.phase

    def mark(self, phase: str) -> None:
        """The worker enters ``phase``: a sample closes the old one, then the new one begins."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; phases are {', '.join(PHASES)}")
        self.sample()
        with self._lock:
            self.phase = phase
        self.sample()

    def _run(self) -> None:
        sleep, stopped, interval = time.sleep, self._stop.is_set, self.interval_s
        while not stopped():
            self.sample()
            sleep(interval)

    def stop(self) -> PeakResult:
        """End the sampling (a last sample first) and return what it saw."""
        if self._reader is None:
            return PeakResult()
        self.sample()
        elapsed = time.perf_counter() - self._started
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        sys.setswitchinterval(self._switch)
        kernel_private, kernel_rss = self._reader.kernel_peaks()
        self._reader.close()
        peak, phase = self.peak, self.peak_phase
        if kernel_private is not None and kernel_private > peak:
            peak = kernel_private  # the kernel saw a higher peak between two samples: phase unknown
            phase = None
        self._reader = None
        return PeakResult(
            peak_private_bytes=peak if peak >= 0 else None,
            peak_phase=phase,
            peak_rss_bytes=kernel_rss,
            peak_sample_hz=self.samples / elapsed if elapsed > 0 else None,
            peak_sample_max_gap_s=self.max_gap if self.samples > 1 else None,
            samples=self.samples,
        )


#: The worker's sampler (one per process); `mark` is a no-op when none runs (e.g. in tests
#: that create sessions through a target directly).
_ACTIVE: PeakSampler | None = None


def start() -> PeakSampler:
    global _ACTIVE
    _ACTIVE = PeakSampler().start()
    return _ACTIVE


def mark(phase: str) -> None:
    """Tell the running sampler which phase the worker is in (targets call this)."""
    if _ACTIVE is not None:
        _ACTIVE.mark(phase)


def stop() -> PeakResult:
    global _ACTIVE
    sampler, _ACTIVE = _ACTIVE, None
    return sampler.stop() if sampler is not None else PeakResult()
