"""What is private to this repository's own test suites.

Options, markers and fixtures (``run_harness``, ``harness_options``, ``model_cache``...) come
from the package's pytest plugin, `harness.pytest_plugin`, registered by ``pip install -e .``
as the ``pytest11`` entry point ``qnn_fmw_harness``: any project gets them the same way.
"""

from __future__ import annotations

from pathlib import Path

# Re-exported for the suites that import them from here (reliability helpers).
from harness.pytest_plugin import HarnessOutcome, harness_env

__all__ = ["ROOT", "HarnessOutcome", "harness_env"]

#: The plugin suite runs pytest in temporary projects of its own (pytester).
pytest_plugins = ["pytester"]

#: This checkout (the suites read its workflows, README and sources).
ROOT = Path(__file__).resolve().parent
