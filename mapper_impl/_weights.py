"""`load_weights`: map a weights file (the map stage alone), or read it to the heap (no retry unless opted in)."""

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
from ._lifecycle import MAX_ATTEMPTS, MAX_BACKOFF_S, check_number, on_drop, release_now
from ._platform import create_mapper
from ._registry import REGISTRY, MappingRegistry

PATHS_TAKEN = ("mapped", "heap", "fallback")


@dataclass(frozen=True)
class RetryPolicy:
    """Opt-in retries of the map stage (upstream never retries), only after a MappingError."""

    max_attempts: int = 1
    backoff_s: float = 0.0

    def __post_init__(self) -> None:
        check_number("max_attempts", self.max_attempts, low=1, high=MAX_ATTEMPTS, integer=True)
        check_number("backoff_s", self.backoff_s, low=0, high=MAX_BACKOFF_S)

    def should_retry(self, err: MappingError, attempts_made: int) -> bool:
        return not isinstance(err, PlatformUnavailableError) and attempts_made < self.max_attempts

    def wait(self, attempts_made: int) -> None:
        if self.backoff_s:
            time.sleep(self.backoff_s * attempts_made)


class Weights:
    """A loaded weights file: ``buffer`` views all of it; `disable()` switches mapping off for it alone."""

    def __init__(
        self,
        path: str,
        buffer: memoryview,
        path_taken: str,
        attempts: int,
        errors: list[str],
        mapping: MappedFile | None = None,
        registry: MappingRegistry | None = None,
    ) -> None:
        self.path = path
        self.path_taken = path_taken
        self.attempts = attempts
        self.errors = list(errors)
        self.size = len(buffer)
        self.base_address = mapping.base_address if mapping is not None else None
        self._buffer: memoryview | None = buffer
        self._mapping = mapping
        self._enabled = True
        self._lock = threading.Lock()
        self._release = on_drop(self, _release_mapping, mapping, registry or REGISTRY)  # dropped without close()

    @property
    def mapped(self) -> bool:
        return self._mapping is not None

    @property
    def closed(self) -> bool:
        return self._buffer is None

    @property
    def feature_enabled(self) -> bool:
        return self._enabled

    @property
    def buffer(self) -> memoryview:
        buffer = self._buffer
        if buffer is None:
            raise ClosedError(f"weights of {self.path} are closed")
        return buffer

    def disable(self) -> None:
        """Refuse this load's further region requests (ABORTED, upstream's wording)."""
        self._enabled = False

    def region(self, offset: object, size: object) -> memoryview:
        """A weight region: a read-only slice of the whole-file buffer, refused by upstream's rules."""
        with self._lock:  # one consistent (buffer, mapping) pair even if another thread closes
            buffer, mapping = self._buffer, self._mapping
        if buffer is None:
            raise ClosedError(f"weights of {self.path} are closed")
        if mapping is not None:
            return mapping.region(offset, size, feature_enabled=self._enabled)
        offset, size = validate_region(offset, size, self.size, feature_enabled=self._enabled)
        with self._lock:  # sliced before a concurrent close() can release the buffer
            if self._buffer is None:
                raise ClosedError(f"weights of {self.path} are closed")
            return self._buffer[offset : offset + size]

    def request(self, offset: object, size: object) -> memoryview:
        """`region` for one of a load's requests, fast for a valid integer request."""
        buffer = self._buffer
        if (
            buffer is not None
            and self._enabled
            and type(offset) is int
            and type(size) is int
            and 0 <= offset
            and 0 < size <= self.size - offset
        ):
            try:
                return buffer[offset : offset + size]
            except ValueError:  # released by a concurrent close(): region() says so
                pass
        return self.region(offset, size)

    def verify(self) -> None:
        """Raise StaleFileError if a mapped file changed on disk (no-op for heap loads)."""
        mapping = self._mapping
        if mapping is not None:
            mapping.verify()

    def close(self) -> None:
        """Idempotent; the mapping unmaps when its last user is gone."""
        with self._lock:
            buffer, self._buffer = self._buffer, None
            self._mapping = None  # the finalizer holds the mapping: release_now gives it back
        if buffer is None:
            return
        try:
            buffer.release()
        except BufferError:
            pass  # exported to numpy/ORT: the memory stays valid until they let go
        release_now(self._release)

    def __enter__(self) -> Weights:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<Weights {self.path!r} {self.size} bytes path_taken={self.path_taken} "
            f"attempts={self.attempts}{' closed' if self.closed else ''}>"
        )


def _release_mapping(mapping: MappedFile | None, registry: MappingRegistry) -> None:
    """This load's share of the mapping, given back to its scope's table."""
    if mapping is not None:
        registry.release(mapping)


def heap_weights(path: str, path_taken: str, attempts: int, errors: list[str], faults: FaultCursor | None) -> Weights:
    """A direct read: the whole file in one private buffer."""
    buf = read_into_heap(path, faults)
    return Weights(path, memoryview(buf).toreadonly(), path_taken, attempts, errors)


def default_mapper(mapper: FileMapper | None) -> FileMapper:
    return mapper if mapper is not None else create_mapper()


def check_faults(faults: object) -> FaultCursor | None:
    """A fresh cursor for this load (TypeError for anything but a FaultPlan or None)."""
    if faults is not None and not isinstance(faults, FaultPlan):
        raise TypeError(f"faults must be a FaultPlan or None, got {type(faults).__name__}")
    return faults.cursor() if faults is not None else None


def map_stage(
    path: str, mapper: FileMapper, cursor: FaultCursor | None, policy: RetryPolicy, registry: MappingRegistry = REGISTRY
) -> tuple[Weights | None, int, list[str], MappingError | None]:
    """Acquire the mapping, retried as ``policy`` allows: (Weights or None, attempts, errors, last)."""
    errors: list[str] = []
    attempts = 0
    while True:
        attempts += 1
        try:
            mapped = registry.acquire(path, mapper, cursor)
        except MappingError as err:
            errors.append(f"attempt {attempts}: {err}")
            if policy.should_retry(err, attempts):
                policy.wait(attempts)
                continue
            return None, attempts, errors, err
        buffer = mapped.buffer[:]  # this load's own view, released by its own close()
        weights = Weights(path, buffer, "mapped", attempts, errors, mapping=mapped, registry=registry)
        return weights, attempts, errors, None


def load_weights(
    path: str | os.PathLike,
    *,
    disable_file_mapped_weights: bool | str = False,
    max_attempts: int = 1,
    faults: FaultPlan | None = None,
    fallback_to_heap: bool = True,
    mapper: FileMapper | None = None,
    backoff_s: float = 0.0,
) -> Weights:
    """Map a weights file, or read it into the heap when disabled or (``fallback_to_heap``) when mapping failed."""
    disabled = parse_disable_flag(disable_file_mapped_weights)
    policy = RetryPolicy(max_attempts, backoff_s)
    cursor = check_faults(faults)
    path = os.fspath(path)
    if disabled:
        return heap_weights(path, "heap", 0, [], cursor)
    weights, attempts, errors, last_error = map_stage(path, default_mapper(mapper), cursor, policy)
    if weights is not None:
        return weights
    if not fallback_to_heap:
        raise MappingError(
            f"cannot map {path} after {attempts} attempt(s): {errors[-1]}",
            os_error=last_error.os_error if last_error is not None else None,
        ) from last_error
    try:
        return heap_weights(path, "fallback", attempts, errors, cursor)
    except HeapReadError as err:
        raise HeapReadError(f"{err} (after mapping failed: {'; '.join(errors)})") from err
