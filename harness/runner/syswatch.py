"""The system's side of the start-up peak: minimum available memory, maximum commit charge and its limit."""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass

INTERVAL_S = 0.002  #: Time between two system samples (the parent has little else to do while workers start).
_KEYS = (b"MemAvailable:", b"Committed_AS:", b"CommitLimit:")


@dataclass
class SystemPeak:
    """What the watch saw (bytes; None: not measured on this OS)."""

    min_available_bytes: int | None = None
    max_committed_bytes: int | None = None
    commit_limit_bytes: int | None = None
    start_available_bytes: int | None = None  #: The first sample, before any worker: the headroom "fits" divides.
    start_committed_bytes: int | None = None
    overcommit_mode: int | None = None  #: Linux vm.overcommit_memory (only 2 enforces the limit); None elsewhere.
    samples: int = 0


class _MeminfoReader:
    def __init__(self) -> None:
        self.fd = os.open("/proc/meminfo", os.O_RDONLY)
        self.buf = bytearray(16384)
        self.views = [self.buf]

    def read(self) -> tuple[int | None, int | None, int | None]:
        n = os.preadv(self.fd, self.views, 0)
        out = []
        for key in _KEYS:
            at = self.buf.find(key, 0, n)
            if at < 0:
                out.append(None)
                continue
            end = self.buf.find(b"\n", at, n)
            out.append(int(self.buf[at + len(key) : end].split()[0]) * 1024)
        return out[0], out[1], out[2]

    def close(self) -> None:
        os.close(self.fd)


class _OtherReader:
    def read(self) -> tuple[int | None, int | None, int | None]:
        if sys.platform == "win32":
            from harness.runner.winmem import performance_info

            info = performance_info()
            if info is not None:
                return info.physical_available, info.commit_total, info.commit_limit
        import psutil

        return int(psutil.virtual_memory().available), None, None

    def close(self) -> None:
        pass


def overcommit_mode() -> int | None:
    try:
        with open("/proc/sys/vm/overcommit_memory", encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


class SystemWatch:
    """``with SystemWatch() as watch: ...start workers...`` then ``watch.result``."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.result = SystemPeak(overcommit_mode=overcommit_mode())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader = None

    def sample(self) -> None:
        if self._reader is None:
            return
        try:
            available, committed, limit = self._reader.read()
        except (OSError, ValueError, IndexError):
            return
        r = self.result
        if r.samples == 0:
            r.start_available_bytes, r.start_committed_bytes = available, committed
        r.samples += 1
        if available is not None and (r.min_available_bytes is None or available < r.min_available_bytes):
            r.min_available_bytes = available
        if committed is not None and (r.max_committed_bytes is None or committed > r.max_committed_bytes):
            r.max_committed_bytes = committed
        if limit is not None:
            r.commit_limit_bytes = limit

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> SystemWatch:
        try:
            self._reader = _MeminfoReader() if sys.platform.startswith("linux") else _OtherReader()
        except OSError:
            self._reader = None
            return self
        self.sample()
        self._thread = threading.Thread(target=self._run, name="system-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> SystemPeak:
        """Stop watching (idempotent); a last sample first."""
        if self._reader is not None:
            self._stop.set()
            thread, self._thread = self._thread, None
            if thread is not None and thread.is_alive():  # one Ctrl-C kept from starting is not joined
                thread.join(timeout=1.0)
            self.sample()
            self._reader.close()
            self._reader = None
        return self.result

    def __exit__(self, *exc: object) -> None:
        self.stop()
