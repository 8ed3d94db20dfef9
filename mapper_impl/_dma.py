"""DMA registration of weight regions: upstream registers each region it hands QNN with the
RPCMem (FastRPC) library and deregisters it in the release callback (whether or not mapping is
still enabled for the context: there may be registrations from before an error). This module
keeps that contract: register a region, deregister it, and count every registration in
`stats()`.

A failed deregistration follows the readable source (commit cc7ec9e): "Failed to deregister
buffer from RPCMEM: <ptr>", status MEM_ALLOC, and nothing is kept or retried: the buffer stays
registered and is counted as leaked (`stats().dma_leaked_registrations`, which a worker's
teardown reports as a leak). Keeping it and retrying it at teardown sweeps is an opt-in
extension of ours (``sweep=True``, the cpu target's ``--sweep-deregistrations``).

What backs a registration (`DmaBackend`):

- ``"bookkeeping"`` (the default): the registration is recorded, nothing else. There is no
  NPU or RPCMem off a Snapdragon device, and everything the pipeline decides (which stage
  failed, what is deregistered when, what a leak looks like) lives in the bookkeeping.
- ``"mlock"`` (opt-in, POSIX): the closest real analogue of importing a buffer for DMA, locking
  its pages in memory, bounded by ``RLIMIT_MEMLOCK`` (a real "cannot register" that the OS
  decides). Not the default because locking faults in every page of every region at
  registration: a mapped load would then pay the whole file's reads at session creation and
  hold it resident, which changes exactly the init-time and memory figures the harness
  measures, and a modest RLIMIT_MEMLOCK (8 MiB by default on many distributions) would make
  every real model fail registration.

A failed registration follows the readable source too (cc7ec9e qnn_backend_manager.cc 886-893:
``register_buf`` then ``to_fd``; on -1 it returns QNN_COMMON_ERROR_SYSTEM and undoes nothing):
the region stays registered with the backend, with no fd, and nobody will deregister it: a
stale registration (onnxruntime-qnn #337's words), counted per context (`stale`) and
process-wide (`stats().dma_stale_registrations`, a worker reports it as a leak). Undoing it
(``failed="undo"``, what the unmerged PR #337 proposed) is an opt-in.

Per context (`DmaRegistrations`, one per `load_context`), as upstream's registrations belong
to the backend manager that made them: a context's teardown deregisters only its own, so one
session's faults never touch another's.
"""

from __future__ import annotations

import ctypes
import itertools
import mmap
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable

from ._common import DeregistrationError, PlatformUnavailableError, RegionError, RegistrationError
from ._faults import FaultCursor
from ._stats import COUNTERS

_TOKENS = itertools.count(1)  # upstream gets an fd per registration; we hand out a token


class DmaBackend(ABC):
    """How a registration is realised. Raise OSError on failure (the layer above turns it into
    RegistrationError / DeregistrationError: OS errors become domain errors at this boundary)."""

    name: str

    @abstractmethod
    def register(self, address: int, size: int) -> None:
        """Make ``[address, address+size)`` available for DMA."""

    @abstractmethod
    def deregister(self, address: int, size: int) -> None:
        """Undo one `register` of exactly this range."""


class BookkeepingBackend(DmaBackend):
    """Records registrations only (see the module docstring for why it is the default)."""

    name = "bookkeeping"

    def register(self, address: int, size: int) -> None:
        return None

    def deregister(self, address: int, size: int) -> None:
        return None


class MlockBackend(DmaBackend):
    """``mlock``/``munlock`` over libc, with a per-page reference count: the kernel does not
    count locks, so two regions sharing a page (adjacent weights) must not unlock it for each
    other. Bounded by RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK."""

    name = "mlock"

    def __init__(self) -> None:
        if os.name == "nt":
            raise PlatformUnavailableError("the mlock DMA backend is POSIX only")
        libc = ctypes.CDLL(None, use_errno=True)
        self._mlock, self._munlock = libc.mlock, libc.munlock
        for fn in (self._mlock, self._munlock):
            fn.argtypes, fn.restype = (ctypes.c_void_p, ctypes.c_size_t), ctypes.c_int
        self._page = mmap.PAGESIZE
        self._pages: dict[int, int] = {}  # page number -> registrations holding it
        self._lock = threading.Lock()

    def _page_range(self, address: int, size: int) -> range:
        return range(address // self._page, (address + size - 1) // self._page + 1)

    def _runs(self, pages: list[int]) -> list[tuple[int, int]]:
        """Consecutive page numbers as (address, length) runs: one syscall per run."""
        runs: list[tuple[int, int]] = []
        for page in pages:
            if runs and runs[-1][0] + runs[-1][1] == page * self._page:
                runs[-1] = (runs[-1][0], runs[-1][1] + self._page)
            else:
                runs.append((page * self._page, self._page))
        return runs

    def _call(self, fn, address: int, length: int) -> None:
        if fn(address, length) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"{fn.__name__}: {os.strerror(code)}")

    def register(self, address: int, size: int) -> None:
        with self._lock:
            pages = list(self._page_range(address, size))
            new = [p for p in pages if p not in self._pages]
            locked: list[tuple[int, int]] = []
            try:
                for run in self._runs(new):
                    self._call(self._mlock, *run)
                    locked.append(run)
            except OSError:
                for run in locked:  # all or nothing: a failed registration holds no page
                    self._munlock(*run)
                raise
            for page in pages:
                self._pages[page] = self._pages.get(page, 0) + 1

    def deregister(self, address: int, size: int) -> None:
        with self._lock:
            pages = list(self._page_range(address, size))
            last = [p for p in pages if self._pages.get(p) == 1]
            for run in self._runs(last):
                self._call(self._munlock, *run)
            for page in pages:
                count = self._pages.get(page, 0) - 1
                if count > 0:
                    self._pages[page] = count
                else:
                    self._pages.pop(page, None)


BACKENDS = ("bookkeeping", "mlock")
#: What becomes of a registration whose ``to_fd`` failed: left "stale" (upstream) or "undo"ne.
FAILED_REGISTRATIONS = ("stale", "undo")
_shared: dict[str, DmaBackend] = {}
_shared_lock = threading.Lock()


def get_backend(backend: str | DmaBackend) -> DmaBackend:
    """The process's backend for a name (one per process: page counts must be shared by every
    context), or ``backend`` itself if it already is one."""
    if type(backend) is not str:  # a str first: an ABC's isinstance is slow, and every load asks
        if isinstance(backend, DmaBackend):
            return backend
    elif backend in _shared:
        return _shared[backend]
    if backend not in BACKENDS:
        raise ValueError(f"dma_backend must be one of {', '.join(BACKENDS)} or a DmaBackend, got {backend!r}")
    with _shared_lock:
        if backend not in _shared:
            _shared[backend] = BookkeepingBackend() if backend == "bookkeeping" else MlockBackend()
        return _shared[backend]


class Registration:
    """One registered region. ``view`` pins the region's memory while it is registered (a
    failed deregistration must not let the mapping be unmapped under the DMA engine).

    A slotted class, not a dataclass: a load makes one per weight region (thousands for an
    LLM), inside the timed part, as the EP registers each region inside context creation."""

    __slots__ = ("token", "path", "offset", "size", "address", "view")

    def __init__(
        self, token: int, path: str, offset: int, size: int, address: int, view: memoryview | None = None
    ) -> None:
        self.token = token
        self.path = path
        self.offset = offset
        self.size = size
        self.address = address
        self.view = view

    def __repr__(self) -> str:
        return (
            f"Registration(token={self.token}, path={self.path!r}, offset={self.offset}, "
            f"size={self.size}, address={self.address:#x})"
        )


def _as_data(err: BaseException) -> BaseException:
    """``err`` (and its cause) without tracebacks: a failure kept in a list must not keep this
    frame, its region view or its registrations alive (a traceback would, in a cycle only the
    garbage collector breaks, and the mapping would stay mapped after its load is closed)."""
    err.__traceback__ = None
    if err.__cause__ is not None:
        err.__cause__.__traceback__ = None
    return err


class DmaRegistrations:
    """One context's registrations: live ones, and (``sweep`` only) failed deregistrations
    kept for a sweep."""

    def __init__(
        self,
        path: str,
        backend: DmaBackend,
        faults: FaultCursor | None = None,
        *,
        sweep: bool = False,
        failed: str = "stale",
    ) -> None:
        if failed not in FAILED_REGISTRATIONS:
            raise ValueError(f"failed_registration must be one of {', '.join(FAILED_REGISTRATIONS)}, got {failed!r}")
        self.path = path
        self.backend = backend
        self.sweeps = sweep
        self.undo_failed = failed == "undo"
        self.leaked = 0  # failed deregistrations forgotten (upstream): still registered
        self.stale = 0  # failed registrations left behind (upstream): registered, never undone
        self.late_callbacks = 0  # release callbacks of a failed attempt that arrived late
        self._faults = faults
        self._lock = threading.Lock()
        self._live: dict[int, Registration] = {}
        self._pending: dict[int, Registration] = {}

    @property
    def live(self) -> int:
        """Registered and not asked to deregister (pending ones excluded)."""
        with self._lock:
            return len(self._live)

    @property
    def pending(self) -> int:
        """Failed deregistrations waiting for a sweep."""
        with self._lock:
            return len(self._pending)

    def register(self, view: memoryview, offset: int, address: int) -> Registration:
        """Register one region; RegistrationError (the request fails) if it cannot be. A
        failure after the backend registered it (upstream: ``to_fd`` returning -1) leaves the
        registration behind, stale, or undoes it (``failed="undo"``)."""
        reg = self._new(view, offset, address)
        with self._lock:
            self._live[reg.token] = reg
        COUNTERS.add_pair("dma_registrations", 1, "dma_registered_bytes", reg.size)
        return reg

    def register_requests(
        self,
        requests: list[tuple[int, int]],
        request: Callable[[int, int], memoryview],
        base: int,
        views: list[memoryview],
    ) -> list[tuple[int, RegionError | RegistrationError]]:
        """QNN's DMA-data requests of one load, in order: ``request(offset, size)`` gives the
        region (or raises RegionError: refused), which is then registered as `register` does;
        each accepted region's view is appended to ``views``. A refused or failed request is
        returned with its index and the next one is made (nothing disables them upstream);
        with ``failed="undo"`` the first failed registration ends the requests. Returns the
        failures, in order.

        One batch, not `register` per region: a load makes thousands of requests inside the
        timed part (the EP's own are C++), so the table and the counters are updated once, when
        the requests end (or an interrupt ends them: what was registered is still counted and
        still released by `release_all`)."""
        new, made, failures = self._new, {}, []
        try:
            for i, (offset, size) in enumerate(requests):
                try:
                    view = request(offset, size)
                    reg = new(view, offset, base + offset)
                except (RegionError, RegistrationError) as err:
                    failures.append((i, _as_data(err)))
                    if self.undo_failed and isinstance(err, RegistrationError):
                        break
                    continue
                made[reg.token] = reg
                views.append(view)
        finally:
            with self._lock:
                self._live.update(made)
            registered = sum(r.size for r in made.values())
            COUNTERS.add_pair("dma_registrations", len(made), "dma_registered_bytes", registered)
        return failures

    def _new(self, view: memoryview, offset: int, address: int) -> Registration:
        """The backend's registration of one region and its record (not yet in the table).
        The success path does only what the request needs: an error's text is made only for
        an error."""
        size = len(view)
        try:
            self.backend.register(address, size)
        except OSError as err:  # the backend refused it: nothing is registered
            raise RegistrationError(
                f"Failed to register DMA data mapping to RPCMEM: {self._where(offset, size, address)} ({err})"
            ) from err
        if self._faults is not None:
            try:
                self._faults.after_register()
            except OSError as err:
                raise RegistrationError(
                    f"Failed to register DMA data mapping to RPCMEM: {self._where(offset, size, address)} ({err}) "
                    f"[{self._left_behind(address, size)}]"
                ) from err
        return Registration(next(_TOKENS), self.path, offset, size, address, view)

    def _where(self, offset: int, size: int, address: int) -> str:
        return f"{self.path} [{offset}, {offset + size}) at {address:#x}"

    def _left_behind(self, address: int, size: int) -> str:
        """What becomes of a registration whose fd could not be had, in words for the error."""
        if self.undo_failed:
            try:
                self.backend.deregister(address, size)
                return "registration undone (opt-in, PR #337's proposal: not upstream behaviour)"
            except OSError as err:
                detail = f"undoing it failed too ({err}), "
        else:
            detail = ""
        with self._lock:
            self.stale += 1
        COUNTERS.add(dma_stale_registrations=1)
        return f"{detail}registration left behind, stale (never undone, as upstream)"

    def handed_out(self) -> list[Registration]:
        """The live registrations now: what QNN was handed and will call back for."""
        with self._lock:
            return list(self._live.values())

    def release_late(self, regs: list[Registration]) -> list[DeregistrationError]:
        """The failed attempt's release callbacks (one per registration in ``regs``, what it
        handed out), arriving late (after the retry began): each deregisters its own
        registration once; one whose registration is already gone (the teardown got there
        first) is a no-op, never a second deregistration."""
        with self._lock:
            self.late_callbacks += len(regs)
        return [e for e in map(self.release, regs) if e is not None]

    def _try_deregister(self, reg: Registration) -> DeregistrationError | None:
        try:
            if self._faults is not None:
                self._faults.before_deregister()
            self.backend.deregister(reg.address, reg.size)
        except OSError as err:
            return DeregistrationError(
                f"Failed to deregister buffer from RPCMEM: {reg.address:#x} "
                f"({self.path} [{reg.offset}, {reg.offset + reg.size}): {err}) -> MEM_ALLOC"
            )
        return None

    def release(self, reg: Registration) -> DeregistrationError | None:
        """Deregister ``reg`` (upstream's release callback). A registration this context does
        not hold (never registered, already released) succeeds as a no-op. A failure is
        returned (not raised: teardown must go on) and, as upstream, the registration is
        forgotten and counted as leaked; with ``sweep`` it is kept pending instead."""
        with self._lock:
            if self._live.pop(reg.token, None) is None:
                return None
        error = self._try_deregister(reg)
        if error is None:
            self._forget(reg)
        elif self.sweeps:
            with self._lock:
                self._pending[reg.token] = reg
            COUNTERS.add(dma_pending_deregistrations=1)
        else:
            self._forget(reg)
            self.leaked += 1
            COUNTERS.add(dma_leaked_registrations=1)
        return error

    def _forget(self, reg: Registration) -> None:
        reg.view = None
        COUNTERS.add_pair("dma_registrations", -1, "dma_registered_bytes", -reg.size)

    def release_all(self) -> list[DeregistrationError]:
        """Deregister every live registration (a failed attempt's cleanup, or teardown)."""
        with self._lock:
            regs = list(self._live.values())
        return [e for e in map(self.release, regs) if e is not None]

    def sweep(self) -> list[DeregistrationError]:
        """Retry every pending deregistration once; those that fail again stay pending."""
        with self._lock:  # claim them: a concurrent sweep (another context's) skips them
            regs = list(self._pending.values())
            self._pending.clear()
        errors = []
        for reg in regs:
            error = self._try_deregister(reg)
            if error is not None:
                errors.append(error)
                with self._lock:
                    self._pending[reg.token] = reg
                continue
            COUNTERS.add(dma_pending_deregistrations=-1)
            self._forget(reg)
        return errors

    def teardown(self) -> list[DeregistrationError]:
        """Deregister everything; with ``sweep``, retry the failures (this teardown's and
        earlier ones) once more."""
        errors = self.release_all()
        return errors + self.sweep() if self.sweeps else errors


# Registrations whose context is gone (torn down or failed) but which still hold failed
# deregistrations (opt-in sweep): every later sweeping teardown retries them (our extension:
# upstream forgets a failed deregistration).
_unswept: list[DmaRegistrations] = []
_unswept_lock = threading.Lock()


def keep_for_later_sweeps(dma: DmaRegistrations) -> None:
    """Remember ``dma`` if it still has pending deregistrations."""
    if dma.pending:
        with _unswept_lock:
            if not any(d is dma for d in _unswept):
                _unswept.append(dma)


def sweep_registrations() -> int:
    """Retry every pending deregistration left by contexts that are gone (torn down, dropped or
    failed) once, each with its own load's fault cursor so outcomes stay per load; returns how
    many are still pending (opt-in sweep only: without it nothing is ever pending). Every
    teardown of a sweeping context runs it; call it to sweep without one."""
    return sweep_unswept()


def sweep_unswept(*, skip: tuple[DmaRegistrations, ...] = ()) -> int:
    """`sweep_registrations`, except for ``skip`` (a context that swept its own already)."""
    with _unswept_lock:
        todo = [d for d in _unswept if not any(d is s for s in skip)]
    for dma in todo:
        dma.sweep()
    with _unswept_lock:
        _unswept[:] = [d for d in _unswept if d.pending]
        return sum(d.pending for d in _unswept)
