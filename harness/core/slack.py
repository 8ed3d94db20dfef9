"""The sampling slack of every memory check, for the runner and the report alike (no imports: workers use it)."""

from __future__ import annotations

#: A check allows this much (plus `SLACK_SHARE` of the figure) before it calls a sample implausible.
SLACK_BYTES = 1024**2
SLACK_SHARE = 0.02


def short_of(have: int, need: int) -> bool:
    """``have`` is below ``need`` by more than the sampling slack."""
    return have + SLACK_BYTES + SLACK_SHARE * need < need
