"""DMA registration of weight regions per context; failures stay stale or leak as cc7ec9e 886-893 unless opted."""

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
    """How a registration is realised; raises OSError (turned into domain errors above)."""

    name: str

    @abstractmethod
    def register(self, address: int, size: int) -> None:
        """Make ``[address, address+size)`` available for DMA."""

    @abstractmethod
    def deregister(self, address: int, size: int) -> None:
        """Undo one `register` of exactly this range."""


class BookkeepingBackend(DmaBackend):
    """Records registrations only (the default: no RPCMem here, and mlock would fault in every page)."""

    name = "bookkeeping"

    def register(self, address: int, size: int) -> None:
        return None

    def deregister(self, address: int, size: int) -> None:
        return None


class MlockBackend(DmaBackend):
    """``mlock``/``munlock`` with a per-page reference count (the kernel does not count locks)."""

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
FAILED_REGISTRATIONS = ("stale", "undo")  #: A registration whose ``to_fd`` failed: left "stale" (upstream) or undone.
_shared: dict[str, DmaBackend] = {}
_shared_lock = threading.Lock()


def get_backend(backend: str | DmaBackend) -> DmaBackend:
    """The process's backend for a name (one per process), or ``backend`` itself."""
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
    """One registered region; ``view`` pins its memory (slotted: a load makes thousands)."""

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
    """``err`` and its cause without tracebacks, so a kept failure pins no frame or mapping."""
    err.__traceback__ = None
    if err.__cause__ is not None:
        err.__cause__.__traceback__ = None
    return err


class DmaRegistrations:
    """One context's registrations: live ones and (``sweep`` only) failed deregistrations."""

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
        """Register one region; RegistrationError if not (a late failure stays stale or is undone)."""
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
        """QNN's DMA-data requests of one load, in one batch (thousands per load): returns the failures, in order."""
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
        """The backend's registration of one region and its record (not yet in the table)."""
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
        """The failed attempt's late release callbacks: each deregisters its own registration once."""
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
        """Deregister ``reg``; a failure is returned and leaked (upstream) or kept pending (``sweep``)."""
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
        """Deregister everything; with ``sweep``, retry the failures once more."""
        errors = self.release_all()
        return errors + self.sweep() if self.sweeps else errors


_unswept: list[DmaRegistrations] = []  # Contexts gone but still holding failed deregistrations (opt-in sweep).
_unswept_lock = threading.Lock()


def keep_for_later_sweeps(dma: DmaRegistrations) -> None:
    """Remember ``dma`` if it still has pending deregistrations."""
    if dma.pending:
        with _unswept_lock:
            if not any(d is dma for d in _unswept):
                _unswept.append(dma)


def sweep_registrations() -> int:
    """Retry every pending deregistration of contexts that are gone once; returns how many remain."""
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
