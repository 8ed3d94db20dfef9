"""Safety nets: a dropped load is released and counted, a forked child gets fresh locks, errors pin nothing."""

from __future__ import annotations

import atexit  # noqa: F401 - weakref.finalize imports it on its first use: at import, not in a load
import math
import os
import threading
import traceback
import weakref
from collections.abc import Callable
from typing import Any

from ._stats import COUNTERS

MAX_BACKOFF_S = 60.0  #: The longest backoff a RetryPolicy may wait per attempt: a retry is for a transient failure.
MAX_ATTEMPTS = 1000  #: The most mapping attempts a RetryPolicy may make.


def _leaked(release: Callable[..., Any], *args: Any) -> None:
    """Finalizer of a load dropped without close(): count it, then release what it held."""
    COUNTERS.add(leaked_loads=1)
    release(*args)


def on_drop(owner: object, release: Callable[..., Any], *args: Any) -> weakref.finalize:
    """Run ``release(*args)`` when ``owner`` is collected unclosed, counting ``stats().leaked_loads``."""
    finalizer = weakref.finalize(owner, _leaked, release, *args)
    finalizer.atexit = False  # the OS releases everything at exit anyway
    return finalizer


def release_now(finalizer: weakref.finalize) -> Any:
    """An explicit close(): run the release once without counting a leak (None if it already ran)."""
    detached = finalizer.detach()
    if detached is None:
        return None
    _, _, args, _ = detached
    release, *rest = args
    return release(*rest)


def forget_frames(err: BaseException | None) -> None:
    """Clear the locals of every finished frame in ``err``'s traceback chain so it pins no buffer."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        traceback.clear_frames(err.__traceback__)
        err = err.__cause__ or err.__context__


def check_number(name: str, value: object, *, low: float, high: float, integer: bool = False) -> None:
    """ValueError unless ``value`` is a finite number (an int when ``integer``) in low..high."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        what = "an integer" if integer else "a number"
        raise ValueError(f"{name} must be {what} in {low:g}..{high:g}, got {value!r}")
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{name} must be a finite number in {low:g}..{high:g}, got {value!r}")


def _reset_in_child() -> None:
    """After fork, in the child: new module-level locks, no per-key lock."""
    from . import _dma
    from ._registry import REGISTRY

    REGISTRY.reset_locks()
    COUNTERS.lock = threading.RLock()
    _dma._shared_lock = threading.Lock()
    _dma._unswept_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_in_child)
