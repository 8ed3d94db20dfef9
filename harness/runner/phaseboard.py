"""The phase board: a shared file where each worker stores its pid and phase in its slot (``count << 3 | phase``)."""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

SLOT_BYTES = 16
STATE_OFFSET = 8
DONE = 7  #: The state's phase field once the worker's start-up is over (ready, or failed).
_PID = struct.Struct("<Q")


def state_phase(state: int) -> int:
    """The phase index (or DONE) a state byte carries."""
    return state & 7


class PhaseBoard:
    """The parent's side: creates the board (zeroed: every slot "not started") and reads it."""

    def __init__(self, path: Path, slots: int) -> None:
        self.path = Path(path)
        self.slots = slots
        self.path.unlink(missing_ok=True)  # Whatever the name holds (a link too) goes: O_EXCL creates a new file.
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
