"""The phase board: one small shared file through which a group's workers tell the parent who
they are and which start-up phase they are in, without a system call per change.

Why: the start-up peak is sampled by the parent (`harness.runner.peakwatch`), not inside the
worker: a sampler thread in the worker is blinded whenever the worker holds Python's GIL in a
long C call (a 256 MiB copy zero-fills and copies under it), which cut its rate to 100-650 Hz
and left gaps of a second. The parent's samples still need the worker's phase, and the phase
must not cost the worker a write to a pipe or a file. So each worker maps the group's board
and stores into its own slot:

- bytes 0-7: its pid (little-endian), written once, before the first state;
- byte 8: the state, ``count << 3 | phase``: ``phase`` is an index into
  `harness.runner.peak.PHASES`, or `DONE` once the worker is ready (the peak is over), and
  ``count`` (1..31, never 0) changes at every mark, so a state of 0 means "not started" and
  the parent can tell that a phase changed while it read the worker's memory, even when the
  worker went back to a phase it was in before (a failed create returns to "load").

A single byte store is atomic on every CPU the harness runs on; the parent reads the state
before and after each sample and keeps the sample's tag only when both agree.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

SLOT_BYTES = 16
STATE_OFFSET = 8
#: The state's phase field once the worker's start-up is over (ready, or failed).
DONE = 7
_PID = struct.Struct("<Q")


def state_phase(state: int) -> int:
    """The phase index (or DONE) a state byte carries."""
    return state & 7


class PhaseBoard:
    """The parent's side: creates the board (zeroed: every slot "not started") and reads it."""

    def __init__(self, path: Path, slots: int) -> None:
        self.path = Path(path)
        self.slots = slots
        # An earlier board (or anything a reused run folder holds under this name, a link out of
        # it included) is removed, never written through: O_EXCL creates a new file or fails.
        self.path.unlink(missing_ok=True)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(self.path, flags, 0o600)
        try:
            os.write(fd, bytes(SLOT_BYTES * max(slots, 1)))
            self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)

    def state(self, slot: int) -> int:
        return self._map[slot * SLOT_BYTES + STATE_OFFSET]

    def pid(self, slot: int) -> int:
        return _PID.unpack_from(self._map, slot * SLOT_BYTES)[0]

    def close(self) -> None:
        self._map.close()


class PhaseSlot:
    """A worker's side: its own slot of the board, mapped writable."""

    def __init__(self, path: str, slot: int) -> None:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        try:
            size = os.fstat(fd).st_size
            if slot < 0 or (slot + 1) * SLOT_BYTES > size:
                raise ValueError(f"phase slot {slot} is outside the board {path} ({size} bytes)")
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)  # the mapping keeps what it needs
        self._at = slot * SLOT_BYTES
        self._count = 0
        _PID.pack_into(self._map, self._at, os.getpid())

    def set(self, phase: int) -> None:
        """Enter ``phase`` (an index into PHASES, or DONE): one byte store."""
        self._count = self._count % 31 + 1
        self._map[self._at + STATE_OFFSET] = self._count << 3 | phase

    def close(self) -> None:
        self._map.close()
