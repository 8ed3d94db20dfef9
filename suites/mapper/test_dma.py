"""The DMA-registration layer: register a region, deregister it, keep a failed deregistration
for teardown sweeps, count everything in stats(); and the opt-in mlock backend, whose limits
are the OS's own (RLIMIT_MEMLOCK), checked against the kernel's VmLck figure."""

from __future__ import annotations

import json
import mmap
import os
import sys

import pytest
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    assert_clean,
    run_child,
    settled_stats,
    stats_guard,
    write_file,
)

from mapper_impl import (
    DeregistrationError,
    DmaBackend,
    FaultPlan,
    MapperStats,
    RegistrationError,
    load_context,
    load_weights,
    stats,
)
from mapper_impl._dma import BookkeepingBackend, DmaRegistrations, MlockBackend, get_backend

SIZE = 40 * 4096 + 123
LINUX = sys.platform.startswith("linux")


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "dma.bin"
    write_file(path, SIZE, seed=41)
    with load_weights(path) as loaded:
        yield loaded


class FailingBackend(DmaBackend):
    """A backend whose OS calls fail on demand (the injected errors are OSErrors, as mlock's)."""

    name = "failing"

    def __init__(self, register_errno: int = 0, deregister_errno: int = 0) -> None:
        self.register_errno = register_errno
        self.deregister_errno = deregister_errno
        self.calls: list[tuple[str, int, int]] = []

    def register(self, address: int, size: int) -> None:
        self.calls.append(("register", address, size))
        if self.register_errno:
            raise OSError(self.register_errno, os.strerror(self.register_errno))

    def deregister(self, address: int, size: int) -> None:
        self.calls.append(("deregister", address, size))
        if self.deregister_errno:
            raise OSError(self.deregister_errno, os.strerror(self.deregister_errno))


def register(dma: DmaRegistrations, weights, offset: int, size: int):
    return dma.register(weights.region(offset, size), offset, weights.base_address + offset)


def test_register_and_release_are_counted(weights):
    """Each registration counts (and its bytes) until released; the backend sees base+offset."""
    backend = FailingBackend()
    dma = DmaRegistrations(weights.path, backend)
    a = register(dma, weights, 0, 100)
    b = register(dma, weights, 8192, 4000)
    assert (a.address, b.address) == (weights.base_address, weights.base_address + 8192)
    assert a.token != b.token
    assert (stats().dma_registrations, stats().dma_registered_bytes) == (2, 4100)
    assert dma.live == 2 and dma.pending == 0
    assert dma.release(a) is None
    assert (stats().dma_registrations, stats().dma_registered_bytes) == (1, 4000)
    assert dma.teardown() == []
    assert backend.calls == [
        ("register", a.address, 100),
        ("register", b.address, 4000),
        ("deregister", a.address, 100),
        ("deregister", b.address, 4000),
    ]
    assert stats().dma_registrations == 0


def test_releasing_what_was_never_registered_succeeds(weights):
    """Releasing a registration this context does not hold (another context's, or one already
    released) succeeds and calls nothing, as upstream's release of an unknown pointer."""
    backend = FailingBackend()
    mine, other = DmaRegistrations(weights.path, backend), DmaRegistrations(weights.path, backend)
    reg = register(other, weights, 0, 10)
    calls = len(backend.calls)
    assert mine.release(reg) is None
    assert other.release(reg) is None and other.release(reg) is None
    assert len(backend.calls) == calls + 1  # only the one real deregistration
    assert stats().dma_registrations == 0


def test_registration_failure_is_a_registration_error(weights):
    """An OS failure to register is RegistrationError in upstream's words, naming the file,
    the range and the OS error; nothing is counted."""
    dma = DmaRegistrations(weights.path, FailingBackend(register_errno=12))
    with pytest.raises(RegistrationError, match="Failed to register DMA data mapping to RPCMEM") as info:
        register(dma, weights, 4096, 10)
    assert f"{weights.path} [4096, 4106)" in str(info.value)
    assert os.strerror(12) in str(info.value)
    assert isinstance(info.value.__cause__, OSError)
    assert dma.live == 0 and stats().dma_registrations == 0


def test_failed_deregistration_returns_mem_alloc_and_is_forgotten_as_a_leak(weights):
    """Upstream (readable source, cc7ec9e): a failed deregistration returns MEM_ALLOC and
    nothing is kept or retried. The registration is forgotten (it pins nothing), and counted as
    leaked: still registered with the backend, never undone."""
    backend = FailingBackend(deregister_errno=16)
    dma = DmaRegistrations(weights.path, backend)
    reg = register(dma, weights, 100, 50)
    leaked = stats().dma_leaked_registrations
    error = dma.release(reg)
    assert isinstance(error, DeregistrationError) and error.status == "MEM_ALLOC"
    assert str(error).startswith(f"Failed to deregister buffer from RPCMEM: {reg.address:#x}")
    assert (dma.live, dma.pending, dma.leaked) == (0, 0, 1)
    snapshot = stats()
    assert (snapshot.dma_registrations, snapshot.dma_pending_deregistrations) == (0, 0)
    assert snapshot.dma_leaked_registrations == leaked + 1 and snapshot.leaks()
    assert reg.view is None  # nothing kept: the mapping is free to go
    backend.deregister_errno = 0
    assert dma.sweep() == [] and len(backend.calls) == 2  # no sweep retries it: only register + 1 try
    weights.close()
    assert_clean()


def test_opt_in_sweep_keeps_a_failed_deregistration_pinned_and_retries_it(weights):
    """``sweep=True`` (our extension): a failed deregistration is kept pending and still
    counted, and it pins the region's memory: closing the load defers the unmap until a sweep
    succeeds."""
    backend = FailingBackend(deregister_errno=16)
    dma = DmaRegistrations(weights.path, backend, sweep=True)
    reg = register(dma, weights, 100, 50)
    error = dma.release(reg)
    assert isinstance(error, DeregistrationError)
    assert (dma.live, dma.pending, dma.leaked) == (0, 1, 0)
    snapshot = stats()
    assert (snapshot.dma_registrations, snapshot.dma_pending_deregistrations) == (1, 1)
    assert not snapshot.is_clean()
    weights.close()
    assert settled_stats().deferred_unmaps == 1  # the DMA engine may still read it
    assert len(dma.sweep()) == 1 and dma.pending == 1  # still failing: still kept
    backend.deregister_errno = 0
    assert dma.sweep() == [] and dma.pending == 0
    assert_clean()


@pytest.mark.parametrize("sweep", [False, True], ids=["upstream", "sweep"])
def test_teardown_deregisters_everything(weights, sweep):
    """teardown(): every live registration is deregistered. FaultPlan counts per load: 2
    failures over 3 registrations. Upstream: the 2 are leaked. Opt-in sweep: the same teardown
    retries them and they succeed."""
    plan = FaultPlan(deregister_failures=2)
    dma = DmaRegistrations(weights.path, get_backend("bookkeeping"), plan.cursor(), sweep=sweep)
    for offset in (0, 4096, 8192):
        register(dma, weights, offset, 100)
    errors = dma.teardown()
    assert len(errors) == 2 and all("injected by FaultPlan" in str(e) for e in errors)
    assert (dma.live, dma.pending, stats().dma_registrations) == (0, 0, 0)
    assert dma.leaked == (0 if sweep else 2)


def test_stats_cover_registrations():
    """is_clean() is false while anything is registered or pending."""
    zero = dict.fromkeys(MapperStats.__dataclass_fields__, 0)
    assert MapperStats(**zero).is_clean()
    for field in ("dma_registrations", "dma_registered_bytes", "dma_pending_deregistrations"):
        assert not MapperStats(**{**zero, field: 1}).is_clean(), field


def test_backends_by_name():
    """Names give the process's one backend of that kind; an instance passes through; an
    unknown name is a ValueError naming the choices."""
    assert get_backend("bookkeeping") is get_backend("bookkeeping")
    assert isinstance(get_backend("bookkeeping"), BookkeepingBackend)
    backend = FailingBackend()
    assert get_backend(backend) is backend
    with pytest.raises(ValueError, match="bookkeeping, mlock"):
        get_backend("rpcmem")


# -- the mlock backend (opt-in) --------------------------------------------------------------


def locked_kib() -> int:
    """This process's locked memory as the kernel counts it (VmLck)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmLck:"))


def can_mlock() -> bool:
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    except ImportError:
        return False
    return (hasattr(os, "geteuid") and os.geteuid() == 0) or soft == resource.RLIM_INFINITY or soft >= 2**20


needs_mlock = pytest.mark.skipif(
    not (LINUX and can_mlock()), reason="needs Linux (VmLck) and 1 MiB of RLIMIT_MEMLOCK or CAP_IPC_LOCK"
)


@needs_mlock
def test_mlock_backend_locks_pages_with_a_count_per_page(weights):
    """mlock really locks: VmLck grows by the pages a region spans. Two regions sharing a page
    do not unlock it for each other (the kernel does not count locks, the backend does)."""
    page = mmap.PAGESIZE
    dma = DmaRegistrations(weights.path, MlockBackend())  # a private page table for the test
    base = locked_kib()
    a = register(dma, weights, 0, 2 * page + 10)  # pages 0, 1, 2
    assert locked_kib() - base == 3 * page // 1024
    b = register(dma, weights, 2 * page + 100, page)  # pages 2 (shared with a) and 3
    assert locked_kib() - base == 4 * page // 1024
    dma.release(a)
    assert locked_kib() - base == 2 * page // 1024  # page 2 stays locked for b
    dma.release(b)
    assert locked_kib() == base
    assert stats().dma_registrations == 0


@needs_mlock
def test_mlock_backend_through_load_context(tmp_path):
    """dma_backend="mlock": the context's regions are locked while it lives, unlocked by its
    teardown."""
    path = tmp_path / "locked.bin"
    write_file(path, SIZE, seed=42)
    page = mmap.PAGESIZE
    base = locked_kib()
    with load_context(
        path, [(0, page), (2 * page, 2 * page)], lambda w, v: None, disable_file_mapped_weights="0", dma_backend="mlock"
    ) as ctx:
        assert ctx.path_taken == "mapped"
        assert locked_kib() - base == 3 * page // 1024
    assert locked_kib() == base
    assert_clean()


MEMLOCK_CHILD = """
    import json, os, resource, sys
    import mapper_impl as m
    os.chdir(sys.argv[1])
    if os.geteuid() == 0:                      # root has CAP_IPC_LOCK: drop to 'nobody'
        import pwd
        nobody = pwd.getpwnam("nobody").pw_uid
        os.setgroups([]); os.setgid(nobody); os.setuid(nobody)
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 * 1024, min(hard, 64 * 1024)))
    def vmlck():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmLck:"))
    seen = []
    ctx = m.load_context("limited.bin", [(0, 16 * 1024), (0, 1024 * 1024)],
                         lambda w, views: seen.append((w.path_taken, vmlck())) or len(views),
                         disable_file_mapped_weights="0", dma_backend="mlock")
    out = {"path_taken": ctx.path_taken, "stage": ctx.fallback_stage,
           "errors": [str(e) for e in ctx.errors], "seen": seen, "vmlck_after": vmlck()}
    ctx.close()
    out["clean"] = m.stats().is_clean()
    print(json.dumps(out))
"""


@pytest.mark.skipif(not LINUX, reason="RLIMIT_MEMLOCK and VmLck: Linux")
def test_mlock_past_rlimit_memlock_fails_registration_for_real(tmp_path):
    """A real registration failure, decided by the OS: with RLIMIT_MEMLOCK at 64 KiB (and no
    CAP_IPC_LOCK), the 16 KiB region locks and the 1 MiB one cannot; the register stage fails,
    the first region is unlocked again, and the one direct read creates the context."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("running as root without a 'nobody' user to drop to")
    path = tmp_path / "limited.bin"
    write_file(path, 2 * 1024 * 1024, seed=43)
    path.chmod(0o644)
    tmp_path.chmod(0o755)
    result = run_child(MEMLOCK_CHILD, str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["path_taken"], out["stage"]) == ("fallback", "register")
    assert out["errors"][0].startswith(
        "mapped register: RegistrationError: Failed to register DMA data mapping to RPCMEM: limited.bin [0, 1048576)"
    )
    assert "mlock" in out["errors"][0] and (
        "Cannot allocate memory" in out["errors"][0] or "Operation not permitted" in out["errors"][0]
    )
    assert out["seen"] == [["fallback", 0]]  # the first region was unlocked before the retry
    assert out["vmlck_after"] == 0 and out["clean"] is True


def test_a_loads_requests_are_registered_as_one_batch(weights):
    """`register_requests` (a load's requests, inside the timed part): every accepted region is
    registered, in order, as `register` would; a refused or failed one is returned with its
    index, without a traceback (a kept traceback would pin the region's view and the mapping),
    and the next request is still made; the counters hold the batch's registrations."""
    backend = FailingBackend()
    dma = DmaRegistrations(weights.path, backend)
    views: list = []
    requests = [(0, 100), (SIZE - 10, 20), (8192, 4000)]  # the second runs past the end: refused
    failures = dma.register_requests(requests, weights.request, weights.base_address, views)
    assert [i for i, _ in failures] == [1] and type(failures[0][1]).__name__ == "RegionError"
    assert all(err.__traceback__ is None for _, err in failures)
    assert [len(v) for v in views] == [100, 4000]
    assert [call[1:] for call in backend.calls] == [(weights.base_address, 100), (weights.base_address + 8192, 4000)]
    assert dma.live == 2 and (stats().dma_registrations, stats().dma_registered_bytes) == (2, 4100)
    assert dma.teardown() == [] and stats().dma_registrations == 0
    views.clear()


def test_an_interrupted_batch_still_counts_and_releases_what_it_registered(weights):
    """An interrupt (Ctrl-C) between two requests: the regions registered before it are in the
    table and the counters, so the failed attempt's release deregisters every one of them."""
    calls = []

    def request(offset, size):
        if calls:
            raise KeyboardInterrupt
        calls.append(offset)
        return weights.request(offset, size)

    dma = DmaRegistrations(weights.path, get_backend("bookkeeping"))
    views: list = []
    with pytest.raises(KeyboardInterrupt):
        dma.register_requests([(0, 100), (4096, 100)], request, weights.base_address, views)
    assert len(views) == 1 and dma.live == 1 and stats().dma_registrations == 1
    assert dma.release_all() == [] and stats().dma_registrations == 0
    views.clear()


def test_a_failed_registration_leaves_nothing_mapped_after_the_fallback(tmp_path):
    """The second registration fails (upstream's ``to_fd`` -1, left stale); the direct read
    follows and, once the context is closed, the failed attempt's mapping is gone at once: no
    kept failure's frame holds a region view (the garbage collector is off: nothing waits for
    it)."""
    import gc

    path = tmp_path / "short.bin"
    write_file(path, SIZE, seed=44)
    gc.disable()
    try:
        ctx = load_context(
            path,
            [(0, 100), (4096, 100), (8192, 100)],
            lambda w, views: len(views),
            disable_file_mapped_weights="0",
            faults=FaultPlan(register_at=2),
        )
        assert (ctx.path_taken, ctx.fallback_stage) == ("fallback", "register")
        ctx.close()
        assert stats().live_mappings == 0 and stats().deferred_unmaps == 0
    finally:
        gc.enable()
