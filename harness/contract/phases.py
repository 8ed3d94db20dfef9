"""The phases of a worker's start-up, and the hook a target calls when it enters one.

Why a hook: the start-up peak is sampled at every phase change (`harness.runner.peak`), but a
target's session creation is where the phases change ("create" begins inside the EP's own
session creation, a fallback goes back to "load"). The target announces the phase here; the
worker installs its sampler's `mark` as the hook before it asks the target for sessions. With
no hook installed (a target used directly, in a test or the compile child) `mark` does nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.core.vocab import PeakPhase

#: Phases in start-up order (the `peak_phase` column's values): start (interpreter, imports),
#: load (map or read the weights), create (session creation), first_run (the first inference).
PHASES: tuple[PeakPhase, ...] = tuple(PeakPhase)

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
