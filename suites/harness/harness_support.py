"""Shared by the harness suites: the small objects their unit tests hand to the runner's parts."""

from __future__ import annotations

from pathlib import Path

from harness.runner.group import GroupSpec


def group_spec(mode: str = "mapped") -> GroupSpec:
    """A group of two cpu workers that progress and console output can be shown for: nothing
    runs it, so its folders are the current one."""
    return GroupSpec(
        target="cpu",
        mode=mode,
        processes=2,
        sessions_per_process=1,
        repeat=0,
        model_folder=Path("."),
        workdir=Path("."),
        worker_timeout_s=1.0,
    )
