"""Issue 42: one setting given two ways, or one single-valued target option given twice, is
refused before work in one line (exit 2), never "the last one wins". Before: `--map-failures`
silently replaced `--fault map=K` while metadata.json recorded K, and a second
`--fallback-stages` won silently."""

from __future__ import annotations

import pytest
from rel_support import one_line_error, run_args, run_quick

CASES = {
    "map-failures after fault": (["--fault", "map=2", "--map-failures", "3"], "one fault given two ways"),
    "fault after map-failures": (["--map-failures", "1", "--fault", "map"], "one fault given two ways"),
    "map-failures 0 and fault map": (["--map-failures", "0", "--fault", "map=1"], "one fault given two ways"),
    "register two ways": (["--fault", "register=1", "--fault", "register@2"], "one fault given two ways"),
    "fallback-stages twice": (["--fallback-stages", "all", "--fallback-stages", "upstream"], "given twice"),
    "failed-registration twice": (["--failed-registration", "undo", "--failed-registration=stale"], "given twice"),
    "max-attempts twice": (["--max-attempts", "2", "--max-attempts", "2"], "given twice"),
}


@pytest.mark.parametrize("extra, expected", list(CASES.values()), ids=list(CASES))
def test_a_setting_given_two_ways_is_refused_before_work(model_cache, tmp_path, extra, expected):
    out = tmp_path / "run"
    proc = run_quick(run_args(*extra, out=out, cache=tmp_path / "cache"), model_cache, timeout=120)
    one_line_error(proc, 2, expected)
    assert not out.exists() and not (tmp_path / "cache").exists()
