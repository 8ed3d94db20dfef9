"""The cpu target's heap path follows the EP's copy lifetime (issue 21, point 4): the direct
read's buffer is a local freed once the session exists, and the runtime keeps its own copy.
So a heap worker's peak resident memory holds two copies of the weights and its steady state
one: peak - steady is about one weights size. Real workers, real memory figures (VmHWM-based
peak of the worker and its RSS after creation), ratios with wide margins.
"""

from __future__ import annotations

import sys

import pytest
from rel_support import assert_no_survivors, run_args

pytestmark = [
    pytest.mark.memory,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS of the worker: Linux figures"),
]

SIZE = ("--model-size", "128MiB")  # the worker's peak must clear the launching parent's RSS


def test_heap_peak_holds_the_transient_second_copy(run_harness):
    """heap mode, 1 worker, 128 MiB: (peak - rss) / weights is ~1 (the read copy, freed after
    creation), and the steady state holds one private copy: weights <= USS < 2 x weights."""
    outcome = run_harness(*run_args(processes=1, modes="heap", model=SIZE), check_exit=0, timeout=300)
    assert_no_survivors(outcome.out)
    (row,) = outcome.results()
    assert row.output_ok and row.path_taken == "heap", row
    transient = (row.peak_bytes - row.rss_bytes) / row.weights_bytes
    assert 0.7 <= transient <= 1.3, (row.peak_bytes, row.rss_bytes, row.weights_bytes)
    assert row.weights_bytes <= row.uss_bytes < 2 * row.weights_bytes, (row.uss_bytes, row.weights_bytes)
