"""One process's memory read without allocating (Linux ``/proc/<pid>/statm``; Windows `winmem`)."""

from __future__ import annotations

import os
import sys


class StatmReader:
    """Linux: (private, shared) bytes of a process from /proc/<pid>/statm ("self": this one)."""

    def __init__(self, pid: int | str) -> None:
        self.pid = pid
        self.fd = os.open(f"/proc/{pid}/statm", os.O_RDONLY)
        self.buf = bytearray(256)
        self.views = [self.buf]
        self.page = os.sysconf("SC_PAGE_SIZE")

    def read_split(self) -> tuple[int, int | None]:
        n = os.preadv(self.fd, self.views, 0)
        buf = self.buf
        first = buf.find(b" ", 0, n)
        second = buf.find(b" ", first + 1, n)
        third = buf.find(b" ", second + 1, n)
        resident, shared = int(buf[first + 1 : second]), int(buf[second + 1 : third])
        return (resident - shared) * self.page, shared * self.page

    def kernel_peaks(self) -> tuple[int | None, int | None]:
        """(private peak, RSS peak) the kernel kept: Linux has only VmHWM (RSS)."""
        try:
            with open(f"/proc/{self.pid}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return None, int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        return None, None

    def close(self) -> None:
        os.close(self.fd)


def open_reader(pid: int | None = None):
    """The reader of process ``pid`` (None: this process); OSError where none exists."""
    if sys.platform.startswith("linux"):
        return StatmReader("self" if pid is None else pid)
    if sys.platform == "win32":
        from harness.runner.winmem import ProcessCounters

        return ProcessCounters(pid)
    raise OSError(f"no per-process memory reader on {sys.platform}")
