"""The Linux memory container: one cgroup per group of workers (`harness.runner.container`),
whose kernel OOM-kill count says which worker the limit ended. v2 where its hierarchy has the
memory controller, else v1 below our own memory cgroup; a worker joins before its interpreter
starts (`join_command`); names carry the owner's PID namespace, pid and start time, so only a
harness of that namespace judges a cgroup stale (docs/running.md, "Capacity under a memory limit")."""

from __future__ import annotations

import errno
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import ContainerUnavailable

PREFIX = "qnn-fmw-"
#: How long removal waits for killed processes to leave the cgroup (more for GiBs of memory).
EMPTY_WAIT_S = 20.0
POLL_S = 0.01


Unavailable = ContainerUnavailable  # the name container.py catches


@dataclass(frozen=True)
class Hierarchy:
    version: int  # 1 or 2
    parent: Path  # where this run's cgroups are made

    @property
    def label(self) -> str:
        return f"cgroup v{self.version} at {self.parent}"


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (space, tab, newline, backslash) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mounts(mountinfo: str) -> list[tuple[str, Path, str, str]]:
    """(mount root, mount point, fs type, super options) of every cgroup mount in sight: of
    mounts on one point, the last (a bind mount over it hides the one below)."""
    out: dict[Path, tuple[str, Path, str, str]] = {}
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3:
            point = Path(_unescape(fields[4]))
            out.pop(point, None)
            if tail[0] in ("cgroup", "cgroup2"):
                out[point] = (_unescape(fields[3]), point, tail[0], tail[2])
    return list(out.values())


def _own_paths(proc_cgroup: str) -> dict[str, str]:
    """Controller (``""`` for v2's unified line) -> this process's cgroup path."""
    out = {}
    for line in proc_cgroup.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        for name in controllers.split(",") if controllers else [""]:
            out[name] = path
    return out


def _inside(root: str, point: Path, path: str) -> Path:
    """Where the cgroup ``path`` (as /proc/self/cgroup names it) is under a mount of ``root``;
    `Unavailable` when it is not below it (a bind-mounted sub-cgroup, as containers have)."""
    rel = os.path.relpath(path, root) if root != "/" else path.lstrip("/")
    if rel == ".." or rel.startswith("../"):
        raise Unavailable(
            f"this process's cgroup {path} is not below the memory mount's root {root} at {point} "
            "(a bind-mounted sub-cgroup): no limit can be applied from here"
        )
    return point if rel in (".", "") else point / rel


def find(mountinfo: str | None = None, proc_cgroup: str | None = None) -> Hierarchy:
    """The hierarchy this run's cgroups go in; `Unavailable` saying what is missing."""
    mountinfo = Path("/proc/self/mountinfo").read_text() if mountinfo is None else mountinfo
    proc_cgroup = Path("/proc/self/cgroup").read_text() if proc_cgroup is None else proc_cgroup
    own = _own_paths(proc_cgroup)
    mounts = _mounts(mountinfo)
    for root, point, kind, _ in mounts:
        if kind == "cgroup2" and "" in own:
            controllers = _read(point / "cgroup.controllers").split()
            if "memory" in controllers:
                return _v2_parent(_inside(root, point, own[""]), point)
    for root, point, kind, options in mounts:
        if kind == "cgroup" and "memory" in options.split(",") and "memory" in own:
            return Hierarchy(1, _inside(root, point, own["memory"]))
    raise Unavailable(
        "no cgroup memory controller is mounted (neither cgroup v2 with the memory controller "
        "nor a v1 memory hierarchy in /proc/self/mountinfo)"
    )


def _v2_parent(own: Path, mount: Path) -> Hierarchy:
    """The nearest cgroup at or above ``own``'s parent that delegates the memory controller."""
    here = own if own == mount else own.parent
    while True:
        if "memory" in _read(here / "cgroup.subtree_control").split():
            return Hierarchy(2, here)
        if here == mount:
            raise Unavailable(
                f"cgroup v2: no cgroup from {own.parent} up to {mount} enables the memory controller for "
                "its children (cgroup.subtree_control has no 'memory')"
            )
        here = here.parent


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str) -> None:
    """Write a control file the kernel made (never creates one: a plain folder has none)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def start_ticks(pid: int) -> int | None:
    """The process's start in clock ticks since boot (``/proc/<pid>/stat`` field 22); None: gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


def pid_namespace(pid: int | str = "self") -> int | None:
    """The inode of the process's PID namespace: what its pid means is this namespace's."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def owner_tag(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{PREFIX}{pid_namespace(pid)}-{pid}-{start_ticks(pid)}-"


def _owner_alive(name: str) -> bool:
    """May the run that made the cgroup ``name`` still be running? False only when it is
    proven dead: made in this PID namespace, and its pid is gone or started at another time."""
    try:
        namespace, pid, ticks, _ = name.removeprefix(PREFIX).split("-", 3)
        if int(namespace) != pid_namespace():
            return True  # another namespace's (or not our naming): its pid means nothing here
        return start_ticks(int(pid)) == int(ticks)
    except ValueError:
        return True  # not a name we made: never ours to remove


def create(hierarchy: Hierarchy, name: str, limit_bytes: int) -> Path:
    """Make the cgroup and set its limit; `Unavailable` (the OS error in words) when it cannot."""
    path = hierarchy.parent / name
    if not (hierarchy.parent / "cgroup.procs").is_file():
        raise Unavailable(f"{hierarchy.parent} is not a cgroup of the memory controller (no cgroup.procs)")
    try:
        path.mkdir()
    except OSError as err:
        why = "root is needed" if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else "the controller refused"
        raise Unavailable(f"cannot create a cgroup in {hierarchy.parent}: {err.strerror} ({why})") from err
    try:
        _set_limit(hierarchy.version, path, limit_bytes)
    except OSError as err:
        remove(path)
        raise Unavailable(f"cannot set the memory limit of {path}: {err.strerror}") from err
    found = _read(path / ("memory.max" if hierarchy.version == 2 else "memory.limit_in_bytes")).strip()
    if not (found.isdigit() and 0 < int(found) <= limit_bytes):  # the kernel's own word that it holds
        remove(path)
        raise Unavailable(f"{path}: the limit reads back as {found[:40]!r}, not {limit_bytes}: not a memory cgroup")
    return path


def _set_limit(version: int, path: Path, limit_bytes: int) -> None:
    if version == 2:
        _write(path / "memory.max", str(limit_bytes))
        if (path / "memory.swap.max").exists():
            _write(path / "memory.swap.max", "0")
        return
    _write(path / "memory.limit_in_bytes", str(limit_bytes))
    if (path / "memory.memsw.limit_in_bytes").exists():  # swap accounting on: memory + swap <= limit
        _write(path / "memory.memsw.limit_in_bytes", str(limit_bytes))


def join_command(path: Path, command: list[str]) -> list[str]:
    """``command`` started inside the cgroup: the shell moves itself in, then becomes it."""
    return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(path / "cgroup.procs"), *command]


def _counter(text: str, key: str) -> int | None:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def oom_kills(version: int, path: Path) -> int | None:
    """Processes of the cgroup the kernel's OOM killer ended (its own count); None: not read."""
    return _counter(_read(path / ("memory.events" if version == 2 else "memory.oom_control")), "oom_kill")


def peak_bytes(version: int, path: Path) -> int | None:
    """The cgroup's highest charge (anonymous memory and page cache) since it was made."""
    text = _read(path / ("memory.peak" if version == 2 else "memory.max_usage_in_bytes")).strip()
    return int(text) if text.isdigit() else None


def _pids(path: Path) -> list[int]:
    return [int(p) for p in _read(path / "cgroup.procs").split() if p.isdigit()]


def _children(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def remove(path: Path, wait_s: float = EMPTY_WAIT_S) -> bool:
    """Kill every process left in the cgroup and its child cgroups (this run's workers, or a
    dead run's), remove the children, then it. Waits only while processes are seen leaving
    (an EBUSY when none was ever seen ends at once). True when it is gone."""
    deadline, killed = time.monotonic() + wait_s, False
    while True:
        pids = _pids(path)
        killed = killed or bool(pids)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass  # already gone
        children = [child for child in _children(path) if not remove(child, max(0.0, deadline - time.monotonic()))]
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as err:
            if err.errno != errno.EBUSY or time.monotonic() > deadline or not killed or children:
                return False
        time.sleep(POLL_S)


def ours(parent: Path, tag: str) -> list[Path]:
    """The cgroups under ``parent`` whose names start with ``tag``."""
    try:
        return sorted(p for p in parent.iterdir() if p.name.startswith(tag) and p.is_dir())
    except OSError:
        return []


def remove_stale(parent: Path) -> list[str]:
    """Remove the cgroups a run that is no longer alive left under ``parent``; their names."""
    removed = []
    for path in ours(parent, PREFIX):
        if not _owner_alive(path.name) and remove(path):
            removed.append(path.name)
    return removed


class Container:
    """One group's cgroup: its workers join it as they start (`wrap`)."""

    def __init__(self, hierarchy: Hierarchy, path: Path, limit_bytes: int) -> None:
        self.version, self.path, self.limit_bytes = hierarchy.version, path, limit_bytes
        self.kind = f"cgroup v{hierarchy.version}"

    def wrap(self, command: list[str]) -> list[str]:
        return join_command(self.path, command)

    def add(self, proc: object) -> None:
        """Nothing to do: the process joined before its interpreter started (`wrap`)."""

    def members(self) -> list[int]:
        return _pids(self.path)

    def oom_kills(self) -> int | None:
        return oom_kills(self.version, self.path)

    def oom_pids(self) -> set[int] | None:
        return None  # the count does not say whom (the kernel log does, not ours to read)

    def peak_bytes(self) -> int | None:
        return peak_bytes(self.version, self.path)

    def close(self) -> bool:
        return remove(self.path)


class Session:
    """This process's cgroups: where they go, their names, the reaper that outlives a killed harness."""

    def __init__(self) -> None:
        self.hierarchy = find()
        self.tag = owner_tag()
        self.removed = remove_stale(self.hierarchy.parent)  # left by runs that were killed
        self.count = 0
        self.reaper = None

    def open(self, limit_bytes: int) -> Container:
        if self.reaper is None or self.reaper.poll() is not None:
            self.reaper = _start_reaper(self.hierarchy.parent, self.tag)
        self.count += 1
        path = create(self.hierarchy, f"{self.tag}g{self.count}", limit_bytes)
        return Container(self.hierarchy, path, limit_bytes)

    def check(self, limit_bytes: int) -> None:
        """Make a cgroup with this limit and remove it: proves the controller and the right."""
        path = create(self.hierarchy, f"{self.tag}check", limit_bytes)
        remove(path)

    def close(self) -> None:
        """Remove what is left of ours, then end the reaper (its stdin closes: nothing to do)."""
        for path in ours(self.hierarchy.parent, self.tag):
            remove(path)
        reaper, self.reaper = self.reaper, None
        if reaper is not None:
            import subprocess

            reaper.stdin.close()
            try:
                reaper.wait(timeout=EMPTY_WAIT_S)
            except subprocess.TimeoutExpired:
                pass  # it ends on its own once it has removed what is left; never block the exit


def _start_reaper(parent: Path, tag: str):
    import subprocess

    from harness.contract.spawn import python_child

    command, env = python_child("harness.runner._reaper", str(parent), tag)
    return subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # Ctrl-C and signals to the harness's group do not reach it
        cwd="/",
    )
