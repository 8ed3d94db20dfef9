"""`python -m harness capacity` for real: the search under a cgroup memory limit, its output
beside the projection, capacity.json and the report (memory marker: one xdist group). The quick
test uses 64 MiB weights; the issue's 256 MiB figures (capacity under 1.5 GiB with a cap of 12,
and `run --memory-limit 768MiB` at N=3) are the slow test."""

from __future__ import annotations

import csv
import json
import re

import pytest
from test_memory_limit import _hierarchy

MIB = 1024**2

pytestmark = pytest.mark.memory


def _capacity(run_harness, tmp_path, size: str, limit: str, cap: int):
    out = tmp_path / "capacity"
    args = ["capacity", "--model-size", size, "--memory-limit", limit, "--max-processes", str(cap)]
    outcome = run_harness(*args, "--out", str(out), "--json", str(tmp_path / "capacity.json"))
    return outcome, out, json.loads((tmp_path / "capacity.json").read_text())


def _check_document(document: dict, limit: int, cap: int) -> tuple[dict, dict]:
    assert document["memory_limit_bytes"] == limit and document["max_processes_cap"] == cap
    heap, mapped = document["modes"]["heap"], document["modes"]["mapped"]
    for mode in (heap, mapped):
        assert {"max_processes", "projected_processes", "probes"} <= mode.keys()
        assert mode["probes"][0]["processes"] == 1 and all(p["seconds"] > 0 for p in mode["probes"])
        survived = {p["processes"] for p in mode["probes"] if p["outcome"] == "fit"}
        assert max(survived, default=0) == mode["max_processes"]  # the answer is a probe that survived
        assert all(p["outcome"] == "oom" for p in mode["probes"] if p["processes"] == mode["max_processes"] + 1)
    return heap, mapped


def _heap_within_its_physics(heap: dict, limit: int, weights: int) -> None:
    """The heap capacity between its two physical bounds, both from the run's own figures. Below:
    the projection, every worker at its start-up peak at once (two copies of the weights while
    the read copy lives), which the limit always holds (within one: the peak is one sample per
    worker). Above: after start-up each heap worker still holds a whole copy of the weights, so
    fewer than limit / weights fit. Where in between depends on how far the workers' start-up
    peaks overlap, which the kernel's scheduling decides: a probe between them lives or is
    ended at the limit by chance (CI, 2026-12-03: under 1.5 GiB with 256 MiB weights, N=3 and
    N=4 both reached the limit, the kernel reclaimed the weights' page cache and all lived:
    capacity 4 against a projection of 2; two runs here the same day: 3)."""
    assert heap["projected_processes"] is not None
    assert heap["projected_processes"] - 1 <= heap["max_processes"] < limit / weights, heap


def test_capacity_finds_heap_below_mapped_beside_the_projection(run_harness, tmp_path):
    """64 MiB weights under 224 MiB: one heap worker peaks at ~155 MiB (the read copy and the
    runtime's), so the projection is 1 and the limit holds at most 2; mapped workers share the
    weights' pages and reach the cap."""
    _hierarchy()
    outcome, out, document = _capacity(run_harness, tmp_path, "64MiB", "224MiB", 3)
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    heap, mapped = _check_document(document, 224 * MIB, 3)
    assert heap["max_processes"] >= 1
    _heap_within_its_physics(heap, 224 * MIB, 64 * MIB)
    assert mapped["max_processes"] == 3 and mapped["capped"] is True
    assert f"capacity under 224.0 MiB: heap {heap['max_processes']} session" in outcome.stdout
    assert f"(projected {heap['projected_processes']})" in outcome.stdout
    assert re.search(r"capacity: heap N=1: all 1 ok, container peak [\d.]+ MiB, [\d.]+ s", outcome.stderr)
    report = (out / "report.html").read_text()
    assert "Capacity under the memory limit: N against survived" in report and "start-up overlap" in report
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["kind"] == "capacity" and meta["status"] == "complete"


@pytest.mark.slow
def test_the_issue_figures_at_256_mib(run_harness, tmp_path):
    """Issue 31's done-when: 256 MiB weights at N=3 under 768 MiB: the heap workers are ended
    by the limit, the mapped ones pass, exit 1; capacity under 1.5 GiB with a cap of 12: heap
    at 1 to 4, within one of its projection, mapped at least three times heap or the cap. The
    heap bound is its physics (`_heap_within_its_physics`): "within one of its projection" holds
    on most runs, not all (a 4 against 2 in CI: the start-up peaks did not coincide)."""
    _hierarchy()
    run = tmp_path / "run"
    outcome = run_harness(
        "run", "--model-size", "256MiB", "--processes", "3", "--memory-limit", "768MiB", "--out", str(run)
    )
    assert outcome.returncode == 1, outcome.stdout + outcome.stderr
    with open(run / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert any(r["oom_killed"] == "True" for r in rows if r["mode"] == "heap")
    assert all(r["output_ok"] == "True" for r in rows if r["mode"] == "mapped")
    outcome, _, document = _capacity(run_harness, tmp_path, "256MiB", "1536MiB", 12)
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    heap, mapped = _check_document(document, 1536 * MIB, 12)
    assert heap["max_processes"] >= 1
    _heap_within_its_physics(heap, 1536 * MIB, 256 * MIB)
    assert mapped["max_processes"] >= min(12, 3 * heap["max_processes"])
