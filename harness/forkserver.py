"""A fork server for suites running ``python -m harness`` hundreds of times (``--fmw-fork-server``, POSIX;
docs/testing.md): per run a JSON request and SCM_RIGHTS stdout/stderr in, ``pid N`` and ``exit CODE`` out."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import ForkServerUnavailable

#: What a small ``harness run`` parent imports (``-X importtime``), loaded once by the server.
PRELOAD = (
    "numpy",
    "psutil",
    "jinja2",
    "filelock",
    "rich.console",
    "rich.table",
    "harness.cli",
    "harness.console",
    "harness.runner.sweep",
    "harness.runner.progress",
    "harness.runner.metadata",
    "harness.runner.pagecache",
    "harness.prep.models",
    "harness.prep.folder",
    "harness.core.headline",
    "harness.core.gates",
    "harness.publish",
    "reports",
    "reports.cli",
    "reports.html",
)
#: Variables that act when an interpreter or a preloaded native library starts: a differing run gets a fresh one.
STARTUP_PREFIXES = ("PYTHON", "LD_", "LC_", "LANG", "OPENBLAS", "OMP_", "MKL_", "MALLOC_", "GLIBC_", "NUMPY")
#: The server's own environment over the caller's: BLAS with one thread (no pool thread to fork past).
SERVER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
MAX_SOCKET_PATH = 100  #: Longest AF_UNIX path (108 bytes on Linux, with the terminating NUL).
MAX_REQUEST = 4 << 20
START_TIMEOUT_S = 120.0  #: How long the server may take to preload and say "ready".
_LENGTH = struct.Struct("!I")


@dataclass
class ForkServer:
    """A started server: `run` one ``python ...`` command through it, `close` when done."""

    socket_path: Path
    env: dict[str, str]
    proc: subprocess.Popen

    @classmethod
    def start(cls, folder: Path, env: Mapping[str, str]) -> ForkServer:
        """Start a server in ``folder`` with ``env`` (plus `SERVER_ENV`); ForkServerUnavailable with the reason."""
        if not hasattr(os, "fork") or not hasattr(socket, "AF_UNIX") or not sys.platform.startswith("linux"):
            raise ForkServerUnavailable(f"no fork server on {sys.platform} (Linux only)")
        path = Path(folder) / "fork.sock"
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            raise ForkServerUnavailable(f"socket path longer than {MAX_SOCKET_PATH} bytes: {path}")
        env = dict(env)
        log = Path(folder) / "server.log"  # its stderr: a pipe nobody reads could fill and block it
        with open(log, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "harness.forkserver", str(path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env={**env, **SERVER_ENV},
                cwd=folder,
            )
        line = _first_line(proc, START_TIMEOUT_S)
        if line != "ready":
            proc.kill()
            proc.communicate()
            last = log.read_text(errors="replace").strip().splitlines()[-1:]
            said = line or (last or [f"nothing in {START_TIMEOUT_S:.0f} s"])[0]
            raise ForkServerUnavailable(f"the fork server did not start: {said}")
        return cls(path, env, proc)

    def serves(self, env: Mapping[str, str]) -> bool:
        """Whether a run with ``env`` may go through this server (no interpreter-start variable differs)."""
        keys = {k for k in (*env, *self.env) if k.startswith(STARTUP_PREFIXES)}
        return all(env.get(k) == self.env.get(k) for k in keys)

    def run(
        self, args: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float
    ) -> subprocess.CompletedProcess:
        """``python *args`` through the server, as ``subprocess.run(capture_output=True, text=True)`` would."""
        import tempfile

        argv = [sys.executable, *args]
        request = json.dumps({"argv": list(args), "cwd": str(cwd), "env": dict(env)}).encode()
        with (
            tempfile.TemporaryFile(dir=self.socket_path.parent) as out,
            tempfile.TemporaryFile(dir=self.socket_path.parent) as err,
        ):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(timeout)
                conn.connect(str(self.socket_path))
                socket.send_fds(conn, [_LENGTH.pack(len(request)) + request], [out.fileno(), err.fileno()])
                replies = _Replies(conn)
                pid = replies.expect("pid")
                try:
                    code = replies.expect("exit")
                except TimeoutError:
                    _kill(pid)
                    conn.settimeout(30)
                    replies.expect("exit")
                    raise subprocess.TimeoutExpired(argv, timeout, _text(out), _text(err)) from None
                except BaseException:  # interrupted while waiting: the run must not outlive us
                    _kill(pid)
                    raise
            return subprocess.CompletedProcess(argv, code, _text(out), _text(err))

    def close(self) -> None:
        """End the server (runs still going are left to finish, as subprocess children are)."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.socket_path.unlink(missing_ok=True)


class _Replies:
    """The server's reply lines, read straight from the socket (readable again after a timeout)."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.pending = conn, b""

    def expect(self, word: str) -> int:
        while b"\n" not in self.pending:
            chunk = self.conn.recv(256)
            if not chunk:
                break
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        fields = line.decode(errors="replace").split()
        if len(fields) != 2 or fields[0] != word or not fields[1].lstrip("-").isdigit():
            raise ForkServerUnavailable(f"the fork server answered {line[:80]!r}, not {word!r}")
        return int(fields[1])


def _first_line(proc: subprocess.Popen, timeout: float) -> str:
    """The server's first line ("ready", or why not), or "" when it says nothing within ``timeout``."""
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            return ""
    return proc.stdout.readline().decode(errors="replace").strip()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _text(file: Any) -> str:
    """A captured stream as ``text=True`` reads it: the locale's encoding, universal newlines."""
    import locale

    file.seek(0)
    data = file.read().decode(locale.getpreferredencoding(False), errors="strict")
    return data.replace("\r\n", "\n").replace("\r", "\n")


def serve(path: str) -> tuple[dict, list[int]] | None:
    """Preload, listen, fork a monitor per connection; returns only in a run's process (None when the caller closed)."""
    import importlib
    import selectors

    for name in PRELOAD:
        importlib.import_module(name)
    _warm_templates()
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        print(f"unusable: {threads} threads after preloading (a fork would copy only one)", flush=True)
        return None
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel
    print("ready", flush=True)
    with selectors.DefaultSelector() as selector:
        selector.register(listener, selectors.EVENT_READ)
        selector.register(sys.stdin.buffer, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fileobj is not listener:
                    if not sys.stdin.buffer.read1(1):  # the caller is gone
                        listener.close()
                        return None
                    continue
                conn, _ = listener.accept()
                if _peer_uid(conn) != os.getuid() or os.fork():
                    conn.close()  # a stranger, or the server after forking the monitor
                    continue
                listener.close()
                return _monitor(conn)


def _warm_templates() -> None:
    """Compile the report's template once (the run's report renders from the cached copy)."""
    from reports.html import warm_templates

    warm_templates()


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _monitor(conn: socket.socket) -> tuple[dict, list[int]]:
    """In the monitor: read the request, fork the run, report its pid and exit status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    request, fds = _receive(conn)
    pid = os.fork()
    if pid == 0:
        conn.close()
        return request, fds
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(f"pid {pid}\n".encode())
    except OSError:
        pass  # the caller is gone; the run goes on, as a subprocess child would
    _, status = os.waitpid(pid, 0)
    try:
        conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
    finally:
        os._exit(0)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 2)
    if len(fds) != 2 or len(data) < _LENGTH.size:
        os._exit(70)
    (length,) = _LENGTH.unpack_from(data)
    if length > MAX_REQUEST:
        os._exit(70)
    body = data[_LENGTH.size :]
    while len(body) < length:
        chunk = conn.recv(length - len(body))
        if not chunk:
            os._exit(70)
        body += chunk
    return json.loads(body), fds


def become_run(request: dict, fds: list[int]) -> None:
    """Turn this forked process into the requested run (streams, fds, folder, env, signals, argv) and run it."""
    null = os.open(os.devnull, os.O_RDONLY)
    for target, fd in ((0, null), (1, fds[0]), (2, fds[1])):
        os.dup2(fd, target)
    keep = {0, 1, 2}
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in keep:
            try:
                os.close(int(name))
            except OSError:
                pass  # the listing's own descriptor, already closed
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    args = list(request["argv"])
    if args[:1] == ["-m"] and len(args) >= 2:
        import runpy

        sys.argv = [args[1], *args[2:]]
        sys.path[0] = os.getcwd()  # what ``python -m`` puts first
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[:1] == ["-c"] and len(args) >= 2:
        sys.argv = ["-c", *args[2:]]
        sys.path[0] = ""
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    else:
        raise SystemExit(f"fork server: unsupported arguments {args[:1]}")


if __name__ == "__main__":
    job = serve(sys.argv[1])
    if job is not None:
        become_run(*job)
