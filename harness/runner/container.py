"""Memory containers (``run --memory-limit``, ``capacity``): each group in a limit of its own, one
implementation per OS (Linux `_cgroup`, Windows `_jobmem`); `mark_limited` turns the kernel's
count of what the limit ended into the rows' words. What cannot be had is refused before work."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from harness.core.errors import ContainerUnavailable, InputError
from harness.core.units import fmt_bytes

if sys.platform.startswith("linux"):
    from harness.runner import _cgroup as _impl
elif sys.platform == "win32":
    from harness.runner import _jobmem as _impl
else:
    _impl = None

#: The words a worker's row gets when the limit ended it.
OOM_TEXT = "out of memory at the limit ({limit})"
#: Does the container count the page cache its processes fault in? (A cgroup does; a job's
#: commit limit does not: mapped file pages are never commit.) Where it does, the weights'
#: pages are evicted before each group so the workers' own faults charge them to it.
COUNTS_PAGE_CACHE = sys.platform.startswith("linux")

_session: Any = None


def _current() -> Any:
    """This process's session of containers, made at the first use (stale cgroups removed)."""
    global _session
    if _impl is None:
        raise InputError(f"--memory-limit: no memory container on {sys.platform} (Linux cgroups or Windows jobs)")
    if _session is None:
        try:
            _session = _impl.Session()
        except ContainerUnavailable as err:
            raise InputError(f"--memory-limit: {err}") from err
    return _session


def check(limit_bytes: int) -> list[str]:
    """Make and remove one container with this limit before any work; the stale ones removed."""
    session = _current()
    try:
        session.check(limit_bytes)
    except ContainerUnavailable as err:
        raise InputError(f"--memory-limit: {err}") from err
    return list(session.removed)


def describe() -> str:
    """Which container this OS gives, e.g. "cgroup v1 at /sys/fs/cgroup/memory/..."."""
    session = _current()
    return session.hierarchy.label if hasattr(session, "hierarchy") else session.label


def open_container(limit_bytes: int) -> Any:
    """A new container with this limit (a cgroup, a job); `RuntimeError`-free: InputError."""
    try:
        return _current().open(limit_bytes)
    except ContainerUnavailable as err:
        raise InputError(f"--memory-limit: {err}") from err


def shutdown() -> None:
    """Remove what is left of this process's containers and end its reaper (idempotent)."""
    global _session
    session, _session = _session, None
    if session is not None:
        session.close()


@contextmanager
def session() -> Iterator[None]:
    """Containers opened inside are all gone at the end, however it ends."""
    try:
        yield
    finally:
        shutdown()


@dataclass
class LimitOutcome:
    """What the kernel says the limit did to one group."""

    limit_bytes: int
    oom_kills: int | None  # processes the limit ended (None: the count could not be read)
    oom_pids: set[int] | None  # which (Windows names them; a cgroup's count does not)
    peak_bytes: int | None  # the container's highest charge
    kind: str  # "cgroup v1", "cgroup v2", "job object"

    @property
    def text(self) -> str:
        return OOM_TEXT.format(limit=fmt_bytes(self.limit_bytes))


def outcome(container: Any) -> LimitOutcome:
    return LimitOutcome(
        container.limit_bytes, container.oom_kills(), container.oom_pids(), container.peak_bytes(), container.kind
    )


def _ended_by_limit(row: Any, found: LimitOutcome, ours: set[int]) -> bool:
    if found.oom_pids is not None:  # Windows: the kernel named the process that hit the limit
        return bool(row.error) and row.pid in found.oom_pids
    killed = getattr(signal, "SIGKILL", None)  # the kernel counted no OOM kill: none was the limit's
    return killed is not None and row.exit_code == -killed and row.worker not in ours and found.oom_kills != 0


def mark_limited(rows: list[Any], found: LimitOutcome, ours: set[int]) -> None:
    """The group's limit and peak on every row; a worker the kernel's count says the limit ended
    gets ``oom_killed`` and "out of memory at the limit (SIZE)". ``ours``: the harness's own kills."""
    suspects = [r for r in rows if _ended_by_limit(r, found, ours)]
    explained = found.oom_pids is not None or (found.oom_kills or 0) >= len(suspects)
    for row in rows:
        row.memory_limit_bytes = found.limit_bytes
        row.container_peak_bytes = found.peak_bytes
        row.oom_killed = False if found.oom_kills is not None else None
    for row in suspects:
        if explained:
            row.oom_killed = True
            row.error = f"{found.text}: {row.error}" if row.error else found.text
        else:
            row.oom_killed = None
            counted = "could not be read" if found.oom_kills is None else f"is {found.oom_kills}"
            row.error = (
                f"{row.error} (the {found.kind}'s OOM kill count {counted}, for {len(suspects)} workers killed "
                "by SIGKILL: which were the limit's cannot be told)"
            )


def open_limit(limit_bytes: int | None) -> Any:
    """The group's container, or None without a limit."""
    return open_container(limit_bytes) if limit_bytes else None


def wrap(container: Any, command: list[str]) -> list[str]:
    """``command`` started inside the container (no container: as it is)."""
    return command if container is None else container.wrap(command)


def join(container: Any, proc: Any, log_file: Any) -> None:
    """Put a started worker in the container (Windows); one that cannot be limited is stopped."""
    from harness.core.errors import SpawnError

    if container is None:
        return
    try:
        container.add(proc)
    except Exception as err:
        proc.kill()
        proc.wait()
        log_file.close()
        raise SpawnError(f"could not put a worker in its memory container: {err}") from err


def close_limit(container: Any) -> LimitOutcome | None:
    """What the limit did (read first), then the container removed; never raises."""
    if container is None:
        return None
    try:
        found = outcome(container)
    except OSError:
        found = LimitOutcome(container.limit_bytes, None, None, None, container.kind)
    try:
        container.close()
    except OSError:
        pass
    return found
