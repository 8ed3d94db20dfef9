"""The Windows memory container: a job object whose limit bounds its processes' commit, recording who hit it."""

from __future__ import annotations

import ctypes

from harness.core.errors import ContainerUnavailable
from mapper_impl._winapi import (
    DWORD,
    INVALID_HANDLE_VALUE,
    JOB_OBJECT_ASSOCIATE_COMPLETION_PORT_INFORMATION_CLASS,
    JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS,
    JOB_OBJECT_LIMIT_JOB_MEMORY,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOB_OBJECT_MSG_JOB_MEMORY_LIMIT,
    JOBOBJECT_ASSOCIATE_COMPLETION_PORT,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    load,
)

EXTENDED_LIMIT_INFORMATION_CLASS = JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS
ASSOCIATE_COMPLETION_PORT_INFORMATION = JOB_OBJECT_ASSOCIATE_COMPLETION_PORT_INFORMATION_CLASS
LIMIT_FLAGS = JOB_OBJECT_LIMIT_JOB_MEMORY | JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
MSG_JOB_MEMORY_LIMIT = JOB_OBJECT_MSG_JOB_MEMORY_LIMIT
#: The structures of the one bindings module (`mapper_impl._winapi`): Windows x64's layout on any host.
EXTENDED_LIMIT_INFORMATION = JOBOBJECT_EXTENDED_LIMIT_INFORMATION
ASSOCIATE_COMPLETION_PORT = JOBOBJECT_ASSOCIATE_COMPLETION_PORT

Unavailable = ContainerUnavailable  # the name container.py catches


def _kernel32():
    return load("kernel32")


def _failed(call: str) -> Unavailable:
    error = ctypes.get_last_error()
    return Unavailable(f"{call} failed: {ctypes.FormatError(error).strip()} (error {error})")


class Container:
    """One group's job object with its memory limit and completion port."""

    kind = "job object"

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._k32 = _kernel32()
        self._job = self._k32.CreateJobObjectW(None, None)
        if not self._job:
            raise _failed("CreateJobObjectW")
        self._port = None
        try:
            info = EXTENDED_LIMIT_INFORMATION()
            info.BasicLimitInformation.LimitFlags = LIMIT_FLAGS
            info.JobMemoryLimit = limit_bytes
            if not self._k32.SetInformationJobObject(
                self._job, EXTENDED_LIMIT_INFORMATION_CLASS, ctypes.byref(info), ctypes.sizeof(info)
            ):
                raise _failed("SetInformationJobObject (JOB_OBJECT_LIMIT_JOB_MEMORY)")
            self._port = self._k32.CreateIoCompletionPort(INVALID_HANDLE_VALUE, None, 0, 1)
            if not self._port:
                raise _failed("CreateIoCompletionPort")
            port = ASSOCIATE_COMPLETION_PORT(None, self._port)
            if not self._k32.SetInformationJobObject(
                self._job, ASSOCIATE_COMPLETION_PORT_INFORMATION, ctypes.byref(port), ctypes.sizeof(port)
            ):
                raise _failed("SetInformationJobObject (completion port)")
        except BaseException:
            self.close()
            raise
        self._messages: list[tuple[int, int]] = []

    def wrap(self, command: list[str]) -> list[str]:
        return command  # joined after the start (`add`): Windows has no exec

    def add(self, proc: object) -> None:
        handle = getattr(proc, "_handle", 0)
        if not self._k32.AssignProcessToJobObject(self._job, handle):
            raise _failed("AssignProcessToJobObject")

    def members(self) -> list[int]:
        return []

    def _drain(self) -> list[tuple[int, int]]:
        """(message, process id) of every notification the kernel posted so far."""
        if self._port is None:
            return self._messages
        message, key, overlapped = DWORD(), ctypes.c_size_t(), ctypes.c_void_p()
        while self._k32.GetQueuedCompletionStatus(
            self._port, ctypes.byref(message), ctypes.byref(key), ctypes.byref(overlapped), 0
        ):
            self._messages.append((message.value, overlapped.value or 0))
        return self._messages

    def oom_pids(self) -> set[int] | None:
        return {pid for message, pid in self._drain() if message == MSG_JOB_MEMORY_LIMIT}

    def oom_kills(self) -> int | None:
        return len(self.oom_pids() or ())

    def peak_bytes(self) -> int | None:
        info = EXTENDED_LIMIT_INFORMATION()
        if self._job is None or not self._k32.QueryInformationJobObject(
            self._job, EXTENDED_LIMIT_INFORMATION_CLASS, ctypes.byref(info), ctypes.sizeof(info), None
        ):
            return None
        return int(info.PeakJobMemoryUsed)

    def close(self) -> bool:
        """Close the job (its kill-on-close flag ends what is left in it) and the port."""
        self._drain()
        for name in ("_job", "_port"):
            handle = getattr(self, name, None)
            if handle:
                self._k32.CloseHandle(handle)
            setattr(self, name, None)
        return True


class Session:
    """Windows needs no session: jobs die with their handles, none can be left behind."""

    removed: list[str] = []
    label = "job objects (JOB_OBJECT_LIMIT_JOB_MEMORY)"

    def open(self, limit_bytes: int) -> Container:
        return Container(limit_bytes)

    def check(self, limit_bytes: int) -> None:
        Container(limit_bytes).close()

    def close(self) -> None:
        pass
