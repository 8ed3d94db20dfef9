"""The phases of a worker's start-up and the hook a target calls on entering one (the peak sampler's `mark`)."""

from __future__ import annotations

from collections.abc import Callable

from harness.core.vocab import PeakPhase

PHASES: tuple[PeakPhase, ...] = tuple(PeakPhase)  #: Phases in start-up order (the `peak_phase` column's values).

PhaseHook = Callable[[str], None]
_hook: PhaseHook | None = None


def install(hook: PhaseHook | None) -> PhaseHook | None:
    """Make ``hook`` hear every `mark` (None: nobody listens); returns the one it replaces."""
    global _hook
    previous, _hook = _hook, hook
    return previous


def mark(phase: str) -> None:
    """The worker enters ``phase`` (one of `PHASES`; anything else is a programming error)."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; phases are {', '.join(PHASES)}")
    if _hook is not None:
        _hook(phase)
