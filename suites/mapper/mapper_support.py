"""Shared helpers for the mapper_impl suites (no conftest: plain functions and one fixture).

Test modules import ``stats_guard`` (an autouse fixture) so that every test proves it leaves
mapper_impl's process-wide stats as it found them: no mapping, view or heap buffer leaks.

The suites run on Linux and on Windows (the windows-mapper workflow, real kernel32): what is
POSIX-only is skipped with its reason, what legitimately differs (Windows refuses to truncate
a mapped file, and may refuse to delete or replace it, while POSIX allows all three) is a
branch on ``WINDOWS``.
"""

from __future__ import annotations

import gc
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mapper_impl import FileMapper, _winapi, create_mapper, stats
from mapper_impl._stats import SINCE_START

REPO_ROOT = Path(__file__).resolve().parents[2]
WINDOWS = sys.platform == "win32"
#: Wine's version where this Windows is Wine (the Wine lane), else None.
WINE = _winapi.wine_version()

#: CreateSymbolicLinkW under Wine 8 reports success and creates nothing; Windows creates the
#: link or refuses it with ERROR_PRIVILEGE_NOT_HELD (1314, no SeCreateSymbolicLinkPrivilege
#: and no Developer Mode). test_wine_deviations.py fails once Wine creates the link.
SYMLINK_DEVIATION = (
    "Wine deviation: CreateSymbolicLinkW reports success but creates no link (Windows creates it,"
    " or fails with ERROR_PRIVILEGE_NOT_HELD: https://learn.microsoft.com/windows/win32/api/winbase/"
    "nf-winbase-createsymboliclinkw)"
)
#: What region views align to with the platform's mapper: the page size on POSIX, 64 KiB
#: (GetSystemInfo's dwAllocationGranularity) on Windows.
GRANULARITY = create_mapper().allocation_granularity

#: Win32 errors meaning "in use, refused": access denied, sharing violation, user-mapped file.
ERROR_ACCESS_DENIED = 5
ERROR_SHARING_VIOLATION = 32
ERROR_USER_MAPPED_FILE = 1224
REFUSED_WINERRORS = (ERROR_ACCESS_DENIED, ERROR_SHARING_VIOLATION, ERROR_USER_MAPPED_FILE)


def make_bytes(size: int, seed: int = 0) -> bytes:
    """Deterministic pseudo-random content (different seeds give different bytes)."""
    return random.Random(seed).randbytes(size)


def write_file(path: Path, size: int, seed: int = 0) -> bytes:
    """Write ``size`` deterministic bytes to ``path`` and return them."""
    data = make_bytes(size, seed)
    path.write_bytes(data)
    return data


def data_address(buffer) -> int:
    """Address of a buffer's first byte, as numpy (and ORT, through an OrtValue) sees it."""
    import numpy as np

    return np.frombuffer(buffer, dtype=np.uint8).__array_interface__["data"][0]


def settled_stats():
    """Stats with cyclic garbage collected (only when something is live: a full collection
    per test would dominate the suite's run time)."""
    snapshot = stats()
    if not snapshot.is_clean():
        gc.collect()
        snapshot = stats()
    return snapshot


def assert_clean() -> None:
    """Nothing mapped, no views, no heap buffers, no deferred unmaps."""
    snapshot = settled_stats()
    assert snapshot.is_clean(), snapshot


def open_handle_count() -> int:
    """Open file descriptors (POSIX) or kernel handles (Windows) of this process.

    On Windows every Python lock of CPython < 3.13 owns a semaphore handle, and a lock caught
    in a reference cycle (an exception's traceback holding its own frame) lives until the
    cyclic GC runs: collect first, so only handles that are really leaked are counted."""
    if WINDOWS:
        import psutil

        gc.collect()
        return psutil.Process().num_handles()
    if os.path.isdir("/proc/self/fd"):
        return len(os.listdir("/proc/self/fd"))
    import psutil

    return psutil.Process().num_fds()


def symlink_or_skip(link: Path, target: Path) -> None:
    """``link`` -> ``target``; on Windows, skip the test when symlinks cannot be created
    (they need SeCreateSymbolicLinkPrivilege or Developer Mode). Elsewhere a failure fails."""
    try:
        link.symlink_to(target)
    except (OSError, NotImplementedError) as err:
        if not WINDOWS:
            raise
        pytest.skip(f"cannot create a symlink on this Windows host ({err})")
    if WINE and not os.path.lexists(link):
        pytest.skip(SYMLINK_DEVIATION)


def is_refused_while_mapped(err: BaseException) -> bool:
    """Is ``err`` Windows refusing a replace/delete because the file is mapped (or opened by a
    concurrent load with FILE_SHARE_READ)? (PermissionError for access denied and sharing
    violations; ERROR_USER_MAPPED_FILE maps to a plain OSError.)"""
    return isinstance(err, OSError) and (
        isinstance(err, PermissionError) or getattr(err, "winerror", None) in REFUSED_WINERRORS
    )


def set_end_of_file_error(path, size: int) -> int:
    """Windows: try to truncate ``path`` to ``size`` with SetEndOfFile itself (os.truncate goes
    through the CRT, which turns the Win32 error into a vague errno) and return the last error
    (0 if it worked). Every kernel32 signature is declared, as in the mapper."""
    import ctypes
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    create = kernel32.CreateFileW
    create.argtypes = (
        wintypes.LPCWSTR,
        wintypes.DWORD,
        wintypes.DWORD,
        ctypes.c_void_p,
        wintypes.DWORD,
        wintypes.DWORD,
        wintypes.HANDLE,
    )
    create.restype = wintypes.HANDLE
    seek = kernel32.SetFilePointerEx
    seek.argtypes = (wintypes.HANDLE, ctypes.c_int64, ctypes.c_void_p, wintypes.DWORD)
    seek.restype = wintypes.BOOL
    set_end = kernel32.SetEndOfFile
    set_end.argtypes, set_end.restype = (wintypes.HANDLE,), wintypes.BOOL
    close = kernel32.CloseHandle
    close.argtypes, close.restype = (wintypes.HANDLE,), wintypes.BOOL
    generic_write, share_all, open_existing = 0x40000000, 0x7, 3
    handle = create(str(path), generic_write, share_all, None, open_existing, 0x80, None)
    if handle is None or handle == ctypes.c_void_p(-1).value:
        return ctypes.get_last_error()
    try:
        if not seek(handle, size, None, 0) or not set_end(handle):
            return ctypes.get_last_error()
        return 0
    finally:
        close(handle)


def assert_truncation_refused_while_mapped(path, size: int) -> None:
    """Windows: a mapped file cannot be truncated, even though the mapper closed its handles:
    SetEndOfFile fails with ERROR_USER_MAPPED_FILE (1224), a file object's truncate raises, the
    size stays. Not ``os.truncate(path)``: CPython 3.11 ignores the CRT's refusal there on
    Windows (posixmodule.c tests ``_chsize_s``'s result for < 0, but it returns a positive
    errno), so it returns as if it had truncated (found by the Wine lane; native Windows too)."""
    before = os.path.getsize(path)
    assert set_end_of_file_error(path, size) == ERROR_USER_MAPPED_FILE
    with open(path, "r+b") as f, pytest.raises(OSError):
        f.truncate(size)
    assert os.path.getsize(path) == before


def assert_refused_while_mapped(action, *args) -> OSError:
    """Windows: ``action(*args)`` must fail with a refusal (access denied, sharing violation,
    user-mapped file); returns the error."""
    with pytest.raises(OSError) as info:
        action(*args)
    assert is_refused_while_mapped(info.value), repr(info.value)
    return info.value


@pytest.fixture(autouse=True)
def stats_guard():
    """Every test must leave mapper_impl's stats no higher than it found them (lower is fine:
    a failed earlier test's objects may be freed meanwhile), so each leak fails its own test.
    ``leaked_loads`` counts loads already released by their finalizer: nothing held."""
    before = settled_stats().to_dict()
    yield
    after = settled_stats().to_dict()
    leaked = {
        key: (before[key], value) for key, value in after.items() if value > before[key] and key not in SINCE_START
    }
    assert not leaked, f"mapper stats leaked (before, after): {leaked}"


def child_env() -> dict:
    """Environment for a child interpreter that can import mapper_impl."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.pop("PYTHONFAULTHANDLER", None)
    return env


def child_command(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def run_child(code: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (argv[1:] = args) and capture its output."""
    return subprocess.run(
        [*child_command(code), *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


#: Child-code preamble: ``path`` is argv[1], ``m`` is mapper_impl, and the address-space limit
#: leaves 16 MiB above what the interpreter already uses: room for Python, not for a 64 MiB
#: mapping or copy. RLIMIT_AS is enforced on Linux only.
LITTLE_ADDRESS_SPACE = """
    import resource, sys
    import mapper_impl as m
    path = sys.argv[1]
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    limit = vm + 16 * 2**20   # room for Python, not for a 64 MiB copy
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
"""


def run_with_little_address_space(code: str, folder: Path) -> tuple[Path, list[str]]:
    """Run ``code`` (indented as `LITTLE_ADDRESS_SPACE`, which it follows) in a child on a sparse
    64 MiB file in ``folder``, so the limit touches nothing else; the child must exit 0.
    Returns the file and the child's stdout lines."""
    path = folder / "big.bin"
    with open(path, "wb") as f:
        f.truncate(64 * 2**20)
    result = run_child(LITTLE_ADDRESS_SPACE + code, str(path))
    assert result.returncode == 0, result.stderr
    return path, result.stdout.splitlines()


class CountingMapper(FileMapper):
    """The platform's real mapper (POSIX mmap or Windows kernel32), counting how often a load
    asks it to map."""

    def __init__(self) -> None:
        self.real = create_mapper()
        self.name = f"counting-{self.real.name}"
        self.allocation_granularity = self.real.allocation_granularity
        self.calls = 0

    def identity_of_path(self, path):
        return self.real.identity_of_path(path)

    def map_file(self, path, faults=None):
        self.calls += 1
        return self.real.map_file(path, faults)


def matmul_model(k: int, n: int) -> bytes:
    """Y = X @ W with W an initializer (zeros in the model: add_initializer replaces it): an
    ORT model whose weight a test hands over in place, over a mapped or a heap region."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(np.zeros((k, n), np.float32), "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()
