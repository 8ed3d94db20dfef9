"""The sampling slack of every memory check, for the runner and the report alike (no imports: workers use it)."""

from __future__ import annotations

SLACK_BYTES = 1024**2  #: Allowed (plus `SLACK_SHARE` of the figure) before a sample is implausible.
SLACK_SHARE = 0.02


def short_of(have: int, need: int) -> bool:
    """``have`` is below ``need`` by more than the sampling slack."""
    return have + SLACK_BYTES + SLACK_SHARE * need < need
