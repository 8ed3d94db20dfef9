"""The sampling slack of every memory check: one rule for the runner at the barrier
(`harness.runner.memory`, in every worker) and the report (`harness.core.summary`). A module of
its own, with no imports, so a worker checking its sample does not import the summary's
statistics."""

from __future__ import annotations

#: Figures of one sample are read a few milliseconds apart and rounded to pages: a check
#: allows this much (plus `SLACK_SHARE` of the figure it needs) before it calls a sample
#: implausible (the runner's checks at the barrier and the report's alike).
SLACK_BYTES = 1024**2
SLACK_SHARE = 0.02


def short_of(have: int, need: int) -> bool:
    """``have`` is below ``need`` by more than the sampling slack."""
    return have + SLACK_BYTES + SLACK_SHARE * need < need
