"""The timing pass (issue 32): a group's N workers again, one at a time, whose times the timing
gates judge, beside the concurrent pass whose memory they do not touch.

What must hold, asserted on structure and ratios, never on a time: each worker of the timing
pass starts only after the one before it has written its result (exited); its row says which
pass it is, has no memory sample and says why; it carries the CPU other processes used while
it ran; the headline's memory comes from the concurrent pass and its timing gates from the
timing pass; the contention rule of the timing pass is what else the machine ran, not the
lagging load average; and the floor (map the file, touch nothing) is below every mapped load.
"""

from __future__ import annotations

import json
import statistics

import pytest

from harness.core.composition import contention
from harness.core.passes import CONCURRENT, SEQUENTIAL, memory_view, timing_view
from harness.core.schema import ResultRow
from harness.core.summary import headline, summarize
from harness.core.timing import timing_repeats

pytestmark = pytest.mark.memory

N = 2


@pytest.fixture(scope="module")
def timed_run(harness_runner, request, tmp_path_factory):
    """cpu mapped and heap with the ort-native peer, N=2, with the timing pass (one run shared)."""
    outcome = harness_runner.run(
        "run",
        *("--model-size", "16MiB", "--processes", str(N), "--peer", "ort-native", "--sequential-timing"),
        *("--quiet", "--no-report"),
        owner=request.node.nodeid,
        scratch=tmp_path_factory.mktemp("timing-pass"),
    )
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    return outcome


def test_every_group_has_both_passes_labelled(timed_run):
    rows = timed_run.results()
    groups = {(r.target, r.mode, r.start) for r in rows}
    assert groups == {
        (t, m, s)
        for t, m in (("cpu", "mapped"), ("cpu", "heap"), ("ort-native", "mapped"))
        for s in (CONCURRENT, SEQUENTIAL)
    }
    for key in groups:
        assert sorted(r.worker for r in rows if (r.target, r.mode, r.start) == key) == list(range(N)), key
    assert {s.start for s in timed_run.summary()} == {CONCURRENT, SEQUENTIAL}
    assert all(s.complete for s in timed_run.summary()), [s.note for s in timed_run.summary()]


def test_timing_pass_workers_start_one_after_another_interleaved(timed_run):
    """Across the three groups, each worker's spec is written (it is spawned) only after the
    worker before it wrote its result, which it does after its release, as it exits: no two
    workers of the pass ever ran together. Round i starts worker i of each group, the mapped
    groups first and side by side, swapped every other round, the heap group last."""
    folders = sorted(p for p in (timed_run.out / "workers").iterdir() if p.name.endswith("-seq"))
    assert len(folders) == 3, folders
    workers = sorted(
        ((folder / f"w{i}.spec.json").stat().st_mtime_ns, folder.name.removesuffix(f"-n{N}-r0-seq"), i)
        for folder in folders
        for i in range(N)
    )
    assert [(name, i) for _, name, i in workers] == [
        ("cpu-mapped", 0),
        ("ort-native-mapped", 0),
        ("cpu-heap", 0),
        ("ort-native-mapped", 1),
        ("cpu-mapped", 1),
        ("cpu-heap", 1),
    ]
    for (_, name, i), (spawned, following, j) in zip(workers[:-1], workers[1:], strict=True):
        done = (timed_run.out / "workers" / f"{name}-n{N}-r0-seq" / f"w{i}.result.json").stat().st_mtime_ns
        assert spawned >= done, (name, i, following, j)
    assert not any((folder / "control.spec.json").exists() for folder in folders)  # nothing to split
    assert json.loads((timed_run.out / "metadata.json").read_text())["run"]["timing_pass"] == "interleaved"


def test_timing_ratios_are_paired_by_round(timed_run):
    """Each repeat's timing ratio is the median over the rounds of the two workers' ratio (the
    workers of one round ran seconds apart); the spread says so."""
    from harness.core.rundata import load_run
    from harness.core.timing import timing_rounds, timing_spread

    run = load_run(timed_run.out)
    seq = {(r.target, r.mode, r.worker): r.init_s for r in run.results if r.start == SEQUENTIAL}
    rounds = [seq[("cpu", "mapped", i)] / seq[("ort-native", "mapped", i)] for i in range(N)]
    assert timing_repeats(run.summary, timing_rounds(run))["peer_init_ratio"] == [
        pytest.approx(statistics.median(rounds))
    ]
    heap = [seq[("cpu", "mapped", i)] / seq[("cpu", "heap", i)] for i in range(N)]
    assert timing_repeats(run.summary, timing_rounds(run))["init_ratio"] == [pytest.approx(statistics.median(heap))]
    spread = timing_spread(run.summary, timing_rounds(run))
    assert spread["peer_init_ratio"]["paired"] and spread["init_ratio"]["paired"]
    assert not timing_spread(run.summary)["init_ratio"]["paired"]  # an older run: group medians


def test_timing_pass_samples_no_memory_and_says_so(timed_run):
    rows = timed_run.results()
    seq, conc = timing_view(rows), memory_view(rows)
    assert all(r.rss_bytes is None and r.pss_bytes is None and r.peak_private_bytes is None for r in seq)
    assert all(r.memory_note.startswith("not sampled: timing pass") for r in seq)
    assert all(r.memory_ok and r.rss_bytes for r in conc)  # the concurrent pass keeps its memory sample
    assert all(r.foreign_cpus is not None and r.foreign_cpus >= 0 for r in seq)
    assert all(r.foreign_cpus is None for r in conc)
    assert all(r.init_s and r.output_ok for r in seq)


def test_headline_memory_from_the_concurrent_pass_timing_from_the_timing_pass(timed_run):
    summary = timed_run.summary()
    values = headline(summary)
    concurrent = headline(memory_view(summary))  # the same run without its timing pass
    assert values["mapped_pss_ratio"] == concurrent["mapped_pss_ratio"]
    seq = [s for s in summary if s.start == SEQUENTIAL and s.target == "cpu"]
    mapped = statistics.median(s.init_s_median for s in seq if s.mode == "mapped")
    heap = statistics.median(s.init_s_median for s in seq if s.mode == "heap")
    assert values["init_ratio"] == pytest.approx(mapped / heap)
    assert len(timing_repeats(summary)["peer_init_ratio"]) == 1
    document = timed_run.headline()
    assert document["contention"]["start"] == SEQUENTIAL
    assert [e["processes"] for e in document["timing_pass"]["per_n"]] == [N]


def test_the_floor_is_below_every_mapped_load(timed_run):
    """Mapping the file and touching nothing is part of every mapped load: the workers' own
    floors sit below their mapped inits (medians: one preempted worker cannot flip it)."""
    rows = [r for r in timed_run.results() if r.mode == "mapped"]
    assert all(r.floor_s is not None for r in rows)
    assert statistics.median(r.floor_s for r in rows) < statistics.median(r.init_s for r in rows)


def _row(start: str, **kw) -> ResultRow:
    return ResultRow(
        **{"target": "cpu", "mode": "mapped", "start": start, "cpu_count": 2, "cpu_s": 1.0, "busy_s": 1.1, **kw}
    )


def test_timing_pass_contention_is_the_machines_other_work_not_the_load_average():
    """The load average lags a minute behind the harness's own concurrent groups; the timing
    pass judges what other processes used while its worker ran."""
    quiet_after_a_busy_minute = [_row(SEQUENTIAL, load_avg=3.5, foreign_cpus=0.1)]
    assert contention(quiet_after_a_busy_minute)["contended"] is False
    assert contention([_row(SEQUENTIAL, load_avg=0.5, foreign_cpus=1.4)])["contended"] is True
    assert contention([_row(CONCURRENT, load_avg=3.5)])["contended"] is True
    assert contention([_row(SEQUENTIAL, load_avg=3.5)])["contended"] is True  # no foreign figure: the load rule
    starved = [_row(SEQUENTIAL, load_avg=0.1, foreign_cpus=0.0, cpu_s=0.3, busy_s=1.0)]
    assert contention(starved)["contended"] is True


def test_contended_concurrent_groups_leave_timing_gates_judged_on_the_timing_pass(timed_run):
    """4 workers on 2 cores: the concurrent pass is contended by the harness's own rule; a
    timing pass that was not makes contended_groups 0 (the synthetic flags below stand for that
    machine, the run's rows for everything else)."""
    rows = timed_run.results()
    for r in rows:
        r.load_avg, r.cpu_count = 9.0, 2  # a minute of 4 workers on 2 cores
        r.foreign_cpus = 0.0 if r.start == SEQUENTIAL else None
        r.cpu_s, r.busy_s = (1.0, 1.0)
    summary = summarize(rows)
    assert all(s.contended for s in summary if s.start == CONCURRENT)
    assert not any(s.contended for s in summary if s.start == SEQUENTIAL)
    assert headline(summary)["contended_groups"] == 0
    assert headline(memory_view(summary))["contended_groups"] > 0
