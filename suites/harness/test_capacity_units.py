"""The parts of `run --memory-limit` and `capacity` that decide without a kernel: the search
(doubling, then bisection), which rows the limit ended (`container.mark_limited`), where a
cgroup goes (`_cgroup.find`, over mountinfo and cgroup files: cgroup v2 with the memory
controller cannot be mounted on this v1 machine, so its files are written here; everything the
kernel does is in test_memory_limit.py), and a capacity.json read back as untrusted input."""

from __future__ import annotations

import signal

import pytest

from harness.core import capacity as cap
from harness.core.schema import ResultRow
from harness.runner import _cgroup
from harness.runner.container import LimitOutcome, mark_limited

MIB = 1024**2


def _probe_log(limit: int):
    """A probe function that holds for n <= limit, and the n it was asked, in order."""
    asked: list[int] = []

    def probe(n: int) -> bool:
        asked.append(n)
        return n <= limit

    return probe, asked


@pytest.mark.parametrize(
    ("fits", "top", "answer", "asked"),
    [
        (3, 12, 3, [1, 2, 4, 3]),
        (2, 12, 2, [1, 2, 4, 3]),
        (0, 12, 0, [1]),
        (12, 12, 12, [1, 2, 4, 8, 12]),  # the cap held: no probe above it
        (9, 12, 9, [1, 2, 4, 8, 12, 10, 9]),
        (1, 1, 1, [1]),
        (5, 16, 5, [1, 2, 4, 8, 6, 5]),
    ],
)
def test_search_doubles_then_bisects(fits, top, answer, asked):
    probe, seen = _probe_log(fits)
    assert cap.search(probe, top) == answer
    assert seen == asked


def _row(worker: int, exit_code: int, error: str = "", pid: int = 0) -> ResultRow:
    return ResultRow(worker=worker, exit_code=exit_code, error=error, pid=pid or 1000 + worker, output_ok=not error)


def test_a_kill_the_kernel_counted_is_out_of_memory():
    rows = [_row(0, 0), _row(1, -signal.SIGKILL, "worker 1 killed by SIGKILL (no output)")]
    mark_limited(rows, LimitOutcome(768 * MIB, 1, None, 700 * MIB, "cgroup v1"), set())
    assert rows[1].oom_killed is True and rows[1].error.startswith("out of memory at the limit (768.0 MiB): ")
    assert rows[0].oom_killed is False and not rows[0].error
    assert all(r.memory_limit_bytes == 768 * MIB and r.container_peak_bytes == 700 * MIB for r in rows)


def test_no_kill_counted_means_not_the_limit():
    """A SIGKILL with the kernel's OOM count at 0 (someone else's kill, by hand) is not the
    limit's: said as it is (issue 42: it read "which were the limit's cannot be told")."""
    rows = [_row(0, -signal.SIGKILL, "worker 0 killed by SIGKILL (no output)")]
    mark_limited(rows, LimitOutcome(768 * MIB, 0, None, None, "cgroup v1"), set())
    assert rows[0].oom_killed is False and rows[0].error == "worker 0 killed by SIGKILL (no output)"


def test_fewer_kills_counted_than_sigkills_cannot_be_told_apart():
    rows = [_row(i, -signal.SIGKILL, f"worker {i} killed by SIGKILL (no output)") for i in (0, 1)]
    mark_limited(rows, LimitOutcome(768 * MIB, 1, None, None, "cgroup v1"), set())
    assert all(r.oom_killed is None and "OOM kill count is 1, for 2 workers" in r.error for r in rows)


def test_the_harness_own_kill_is_never_the_limit():
    rows = [_row(0, -signal.SIGKILL, "worker 0 timed out after 5 s and was killed")]
    mark_limited(rows, LimitOutcome(768 * MIB, 1, None, None, "cgroup v1"), {0})
    assert rows[0].oom_killed is False and "out of memory" not in rows[0].error


def test_a_job_names_the_process_that_hit_its_limit():
    """Windows: a commit failure is an error of the worker's own (no signal); the job's
    completion port names the process, and only that one is the limit's."""
    rows = [_row(0, 1, "MemoryError", pid=4242), _row(1, 1, "a wrong output", pid=4343)]
    mark_limited(rows, LimitOutcome(1 << 30, 1, {4242}, None, "job object"), set())
    assert rows[0].oom_killed is True and rows[0].error.startswith("out of memory at the limit (1.0 GiB)")
    assert rows[1].oom_killed is False and rows[1].error == "a wrong output"


V1_MOUNTINFO = """\
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def test_v1_cgroups_go_below_the_harness_own(tmp_path):
    found = _cgroup.find(V1_MOUNTINFO, "4:memory:/process_api/abc\n0::/\n")
    assert found == _cgroup.Hierarchy(1, _cgroup.Path("/sys/fs/cgroup/memory/process_api/abc"))


def test_v2_cgroups_go_beside_it_where_memory_is_delegated(tmp_path):
    """cgroup v2 lets no cgroup with processes have children with controllers: ours go in the
    nearest ancestor whose subtree_control has memory (a fake tree: no v2 memory here)."""
    root = tmp_path / "cg"
    (root / "user.slice" / "session-1.scope").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "cgroup.subtree_control").write_text("memory pids\n")
    (root / "user.slice" / "cgroup.subtree_control").write_text("memory\n")
    (root / "user.slice" / "session-1.scope" / "cgroup.subtree_control").write_text("\n")
    mountinfo = f"41 31 0:38 / {root} rw,relatime - cgroup2 cgroup2 rw\n"
    found = _cgroup.find(mountinfo, "0::/user.slice/session-1.scope\n")
    assert found == _cgroup.Hierarchy(2, root / "user.slice")
    (root / "user.slice" / "cgroup.subtree_control").write_text("pids\n")
    assert _cgroup.find(mountinfo, "0::/user.slice/session-1.scope\n") == _cgroup.Hierarchy(2, root)


def test_no_memory_controller_says_what_is_missing():
    with pytest.raises(_cgroup.Unavailable, match="no cgroup memory controller is mounted"):
        _cgroup.find("41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "0::/\n")


def test_a_live_owner_cgroup_is_never_stale(tmp_path):
    mine = tmp_path / f"{_cgroup.owner_tag()}g1"
    dead = tmp_path / f"{_cgroup.PREFIX}{_cgroup.pid_namespace()}-999999999-12345-g1"  # no such pid
    foreign = tmp_path / f"{_cgroup.PREFIX}not-ours"
    for path in (mine, dead, foreign):
        path.mkdir()
    assert _cgroup.remove_stale(tmp_path) == [dead.name]
    assert mine.is_dir() and foreign.is_dir() and not dead.exists()


def _document() -> dict:
    heap = cap.ModeCapacity("heap", 2, 2, probes=[cap.Probe(1, "fit", 1, 0, 0, 4.1), cap.Probe(4, "oom", 3, 1, 0, 6.6)])
    mapped = cap.ModeCapacity("mapped", 12, 44, capped=True, probes=[cap.Probe(12, "fit", 12, 0, 0, 20.0)])
    return cap.document(1536 * MIB, 12, [heap, mapped], {"target": "cpu"})


def test_capacity_json_round_trip_and_sentence():
    measured = cap.from_document(_document())
    assert measured is not None and measured.limit_bytes == 1536 * MIB
    assert measured.modes["heap"].max_processes == 2 and measured.modes["mapped"].capped
    assert measured.sentence() == (
        "under 1.5 GiB: heap 2 sessions (projected 2), mapped 12 sessions or more (the cap; projected 44)"
    )


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d.update(format_version=99),
        lambda d: d.update(memory_limit_bytes=-1),
        lambda d: d.update(memory_limit_bytes=True),
        lambda d: d.update(modes="heap"),
        lambda d: d.update(modes={}),
    ],
)
def test_a_damaged_capacity_json_is_not_believed(damage):
    document = _document()
    damage(document)
    assert cap.from_document(document) is None


def test_damaged_probes_and_counts_are_dropped():
    document = _document()
    document["modes"]["heap"]["probes"].append({"processes": "1; rm -rf", "outcome": "fit"})
    document["modes"]["heap"]["max_processes"] = -3
    measured = cap.from_document(document)
    assert measured is not None and measured.modes["heap"].max_processes is None
    assert [p.processes for p in measured.modes["heap"].probes] == [1, 4]


def test_measured_cost_scales_to_another_headroom():
    """heap held 2 and not 3 in 1.5 GiB: a worker costs 512-768 MiB, so 15 GiB holds 20-30."""
    measured = cap.from_document(_document())
    answer = measured.modes["heap"]
    assert cap.cost_range(answer, 1536 * MIB) == (512 * MIB, 768 * MIB)
    assert cap.workers_at(answer, 1536 * MIB, 15 * 1024 * MIB) == (20, 30)
    capped = measured.modes["mapped"]  # at the cap: a ceiling on its cost, no floor
    assert cap.workers_at(capped, 1536 * MIB, 15 * 1024 * MIB)[1] is None
