"""`load_weights`: map a weights file with a narrow retry policy, or read it to the heap.

The order of decisions follows the EP: disabled -> heap; otherwise try to map, retrying only
errors a retry can cure; when mapping cannot be had, falling back to the heap is the
caller's explicit choice (``fallback_to_heap``), recorded in ``path_taken="fallback"`` with
every error that led there.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from ._base import FileMapper, MappedFile
from ._common import (
    ClosedError,
    HeapReadError,
    MappingError,
    PlatformUnavailableError,
    parse_disable_flag,
    validate_region,
)
from ._faults import FaultCursor, FaultPlan
from ._heap import read_into_heap
from ._registry import REGISTRY

PATHS_TAKEN = ("mapped", "heap", "fallback")


@dataclass(frozen=True)
class RetryPolicy:
    """Retry a failed mapping up to ``max_attempts`` times in all, only for MappingError and
    never for PlatformUnavailableError (no retry can make mapping exist)."""

    max_attempts: int = 3
    backoff_s: float = 0.0

    def __post_init__(self) -> None:
        attempts = self.max_attempts
        if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
            raise ValueError(f"max_attempts must be an integer >= 1, got {attempts!r}")
        backoff = self.backoff_s
        if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or not backoff >= 0:
            raise ValueError(f"backoff_s must be a number >= 0, got {backoff!r}")

    def should_retry(self, err: MappingError, attempts_made: int) -> bool:
        return not isinstance(err, PlatformUnavailableError) and attempts_made < self.max_attempts

    def wait(self, attempts_made: int) -> None:
        if self.backoff_s:
            time.sleep(self.backoff_s * attempts_made)


class Weights:
    """A loaded weights file: ``buffer`` is a read-only memoryview of all of it."""

    def __init__(
        self,
        path: str,
        buffer: memoryview,
        path_taken: str,
        attempts: int,
        errors: list[str],
        mapping: MappedFile | None = None,
        faults: FaultCursor | None = None,
    ) -> None:
        self.path = path
        self.path_taken = path_taken
        self.attempts = attempts
        self.errors = list(errors)
        self.size = len(buffer)
        self._buffer: memoryview | None = buffer
        self._mapping = mapping
        self._faults = faults
        self._lock = threading.Lock()

    @property
    def mapped(self) -> bool:
        return self._mapping is not None

    @property
    def closed(self) -> bool:
        return self._buffer is None

    @property
    def buffer(self) -> memoryview:
        buffer = self._buffer
        if buffer is None:
            raise ClosedError(f"weights of {self.path} are closed")
        return buffer

    def region(self, offset: int, size: int) -> memoryview:
        """A weight region, refused by upstream's rules; mapped loads get an aligned OS view."""
        with self._lock:  # one consistent (buffer, mapping) pair even if another thread closes
            buffer, mapping = self._buffer, self._mapping
            if buffer is None:
                raise ClosedError(f"weights of {self.path} are closed")
            if mapping is not None:
                return mapping.region(offset, size, self._faults)
            validate_region(offset, size, self.size)
            return buffer[offset : offset + size]

    def verify(self) -> None:
        """Raise StaleFileError if a mapped file changed on disk (no-op for heap loads)."""
        mapping = self._mapping
        if mapping is not None:
            mapping.verify()

    def close(self) -> None:
        """Idempotent. The mapping is unmapped when its last user closes and no view pins it."""
        with self._lock:
            buffer, self._buffer = self._buffer, None
            mapping, self._mapping = self._mapping, None
        if buffer is None:
            return
        try:
            buffer.release()
        except BufferError:
            pass  # exported to numpy/ORT: the memory stays valid until they let go
        if mapping is not None:
            REGISTRY.release(mapping)

    def __enter__(self) -> Weights:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<Weights {self.path!r} {self.size} bytes path_taken={self.path_taken} "
            f"attempts={self.attempts}{' closed' if self.closed else ''}>"
        )


def _heap_weights(
    path: str, path_taken: str, attempts: int, errors: list[str], faults: FaultCursor | None
) -> Weights:
    buf = read_into_heap(path, faults)
    return Weights(path, memoryview(buf).toreadonly(), path_taken, attempts, errors)


def load_weights(
    path: str | os.PathLike,
    *,
    disable_file_mapped_weights: bool | str = False,
    max_attempts: int = 3,
    faults: FaultPlan | None = None,
    fallback_to_heap: bool = True,
    mapper: FileMapper | None = None,
    backoff_s: float = 0.0,
) -> Weights:
    """Load a weights file the way the QNN EP loads a context binary.

    Raises FileCheckError subclasses for unusable files (missing, empty, directory, no
    permission), MappingError if mapping failed and ``fallback_to_heap`` is False, and
    HeapReadError if the heap read failed too (its message carries the mapping errors).
    """
    disabled = parse_disable_flag(disable_file_mapped_weights)
    policy = RetryPolicy(max_attempts, backoff_s)
    if faults is not None and not isinstance(faults, FaultPlan):
        raise TypeError(f"faults must be a FaultPlan or None, got {type(faults).__name__}")
    path = os.fspath(path)
    cursor = faults.cursor() if faults is not None else None
    if disabled:
        return _heap_weights(path, "heap", 0, [], cursor)
    if mapper is None:
        from . import create_mapper

        mapper = create_mapper()
    errors: list[str] = []
    attempts = 0
    last_error: MappingError | None = None
    while True:
        attempts += 1
        try:
            mapped = REGISTRY.acquire(path, mapper, cursor)
        except MappingError as err:
            last_error = err
            errors.append(f"attempt {attempts}: {err}")
            if policy.should_retry(err, attempts):
                policy.wait(attempts)
                continue
            break
        buffer = mapped.buffer[:]  # this load's own view, released by its own close()
        return Weights(path, buffer, "mapped", attempts, errors, mapping=mapped, faults=cursor)
    if not fallback_to_heap:
        raise MappingError(
            f"cannot map {path} after {attempts} attempt(s): {errors[-1]}",
            os_error=last_error.os_error if last_error is not None else None,
        ) from last_error
    try:
        return _heap_weights(path, "fallback", attempts, errors, cursor)
    except HeapReadError as err:
        raise HeapReadError(f"{err} (after mapping failed: {'; '.join(errors)})") from err
