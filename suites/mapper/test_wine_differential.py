"""The fake kernel32 checked against a real one, Wine's: every scenario of `wine_scenarios` runs
through the Python mapper over the fake (executor A, `_wine_exec.py`), and the C probe
(`_wine_probe.c`, compiled with mingw at test time) replays exactly the same kernel32 calls,
with the same flags, in the same order, under Wine (executor B). Outcomes (return, last
error, bytes read, sizes, file identity, granularity) are compared call by call; the only
differences allowed are `KNOWN_WINE_DEVIATIONS`, each with its reason and Microsoft's
documentation, and each must still occur.

The expectations of executor A run everywhere; the comparison skips, with the reason, where
Wine or mingw is not installed (`.ci/run` installs both)."""

from __future__ import annotations

import sys

import _wine_fixtures
import pytest
from _wine_exec import group_by_scenario, normalised, prepare, run_scenario, trace_text, unlock, wine_path
from wine_scenarios import KNOWN_WINE_DEVIATIONS, SCENARIOS, Deviation

mingw, wine = _wine_fixtures.mingw, _wine_fixtures.wine  # the session fixtures, for pytest
pytestmark = [
    pytest.mark.xdist_group("wine"),
    # The Linux stand-in for a real kernel32: on Windows, test_windows_real.py runs the mapper
    # over the real one (and the scenario files' POSIX permissions and links mean nothing there).
    pytest.mark.skipif(sys.platform == "win32", reason="Windows runs the mapper over its own kernel32"),
]
BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}


@pytest.fixture(scope="module")
def differential(wine, tmp_path_factory):
    """{scenario: (executor A's outcomes, executor B's outcomes)}: A over the fake, then the
    same files made afresh and A's calls replayed by the probe under Wine, all in one start."""
    run, _ = wine
    folder = tmp_path_factory.mktemp("differential")
    runs = [run_scenario(folder, scenario) for scenario in SCENARIOS]
    for scenario in SCENARIOS:
        prepare(folder, scenario)
    trace = folder / "trace.txt"
    trace.write_text(trace_text(runs), encoding="utf-8")
    replayed = group_by_scenario(run("replay", wine_path(str(trace))))
    for scenario in SCENARIOS:
        if scenario.readonly:
            unlock(folder / scenario.name)
    return {r.scenario.name: (normalised(r.outcomes), normalised(replayed.get(r.scenario.name, []))) for r in runs}


def _deviation(name: str, fake: dict, real: dict) -> Deviation | None:
    for known in KNOWN_WINE_DEVIATIONS:
        if (known.scenario, known.call) == (name, fake["call"]) and known.windows == (fake["ok"], fake["err"]):
            if known.wine == (real["ok"], real["err"]):
                return known
    return None


def differences(name: str, fake: list[dict], real: list[dict]) -> list[str]:
    """Each call whose outcome differs, except a known deviation's (ok, err) and what follows
    from it in that call (bytes read, ids)."""
    found = [f"{len(fake)} calls over the fake, {len(real)} replayed under Wine"] if len(fake) != len(real) else []
    for a, b in zip(fake, real, strict=False):
        if a != b and _deviation(name, a, b) is None:
            found.append(f"call {a['i']} {a['call']}: fake {a} != Wine {b}")
    return found


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_fake_executor_meets_the_documented_outcomes(scenario, tmp_path):
    """Executor A alone (no Wine needed): each step ends as the table says Windows does."""
    run = run_scenario(tmp_path, scenario)
    if scenario.readonly:
        unlock(tmp_path / scenario.name)
    assert tuple(run.results) == scenario.expect, run.outcomes


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_wine_replay_matches_the_fake(differential, scenario):
    """The same calls under Wine's kernel32 give the same outcome, call by call."""
    fake, real = differential[scenario.name]
    assert real, f"the probe printed nothing for {scenario.name}"
    assert differences(scenario.name, fake, real) == []


def test_every_known_deviation_still_occurs(differential):
    """A listed deviation that Wine no longer shows is stale: the list must say what is true."""
    for known in KNOWN_WINE_DEVIATIONS:
        fake, real = differential[known.scenario]
        hits = [a for a, b in zip(fake, real, strict=False) if _deviation(known.scenario, a, b) is known]
        assert hits, f"{known.scenario}/{known.call}: Wine now matches Windows; drop it from the list"
        assert known.source.startswith("https://learn.microsoft.com/"), known
