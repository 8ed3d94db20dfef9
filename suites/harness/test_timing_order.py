"""The order of the timing pass (issue 32), asserted on the plan, never on a time: the timing-pass
groups of one repeat run as one interleaved step, round by round, the mapped groups first and
side by side, swapped every other round; a cold run keeps them apart (they could not all start
cold); and a worker collects its own start-up garbage before any target's clock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.core.passes import CONCURRENT, SEQUENTIAL
from harness.runner.group import GroupSpec
from harness.runner.timingpass import plan_steps, round_order


def _group(target: str, mode: str, start: str, repeat: int = 0, n: int = 4) -> GroupSpec:
    return GroupSpec(
        target=target,
        mode=mode,
        processes=n,
        sessions_per_process=1,
        repeat=repeat,
        model_folder=Path("m"),
        workdir=Path(f"w-{target}-{mode}-{repeat}-{start}"),
        worker_timeout_s=60.0,
        start=start,
    )


BENCH_GROUPS = (("cpu", "mapped"), ("cpu", "heap"), ("ort-native", "mapped"))


def _bench_plan(repeats: int = 2) -> list[GroupSpec]:
    """The groups `plan_groups` makes for a bench: per repeat the concurrent pass, then the
    timing pass, each in the order cpu mapped, cpu heap, ort-native mapped."""
    plan = []
    for repeat in range(repeats):
        for start in (CONCURRENT, SEQUENTIAL):
            plan += [
                _group(t, m, start, repeat) for t, m in (("cpu", "mapped"), ("cpu", "heap"), ("ort-native", "mapped"))
            ]
    return plan


def test_a_repeats_timing_pass_is_one_interleaved_step():
    steps = plan_steps(_bench_plan())
    assert [len(step) for step in steps] == [1, 1, 1, 3, 1, 1, 1, 3]
    assert all(g.start == SEQUENTIAL for step in steps if len(step) == 3 for g in step)
    assert len({g.repeat for g in steps[3]}) == 1 and steps[3][0].repeat != steps[7][0].repeat


def test_a_cold_run_times_its_groups_one_by_one():
    assert [len(step) for step in plan_steps(_bench_plan(), interleave=False)] == [1] * 12


def test_rounds_put_the_mapped_groups_side_by_side_and_swap_them():
    step = plan_steps(_bench_plan(1))[3]
    names = [[f"{step[k].target} {step[k].mode}" for k in round_order(step, r)] for r in range(4)]
    assert (
        names
        == [
            ["cpu mapped", "ort-native mapped", "cpu heap"],
            ["ort-native mapped", "cpu mapped", "cpu heap"],
        ]
        * 2
    )
    pair = [_group("cpu", "mapped", SEQUENTIAL), _group("cpu", "heap", SEQUENTIAL)]
    assert [round_order(pair, r) for r in range(2)] == [[0, 1], [1, 0]]  # no peer: mapped and heap swap
    assert round_order(pair[:1], 1) == [0]


def test_a_worker_collects_its_start_up_garbage_before_any_clock():
    """After `quiet_collector` the young generation is empty and what survived start-up is
    frozen: a collection inside a timed load sees only what that load allocated."""
    code = (
        "import gc\n"
        "from harness.runner.worker import quiet_collector\n"
        "garbage = [[i] for i in range(5000)]\n"
        "quiet_collector()\n"
        "print(gc.get_freeze_count(), gc.get_count()[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    frozen, young = int(out[0]), int(out[1])
    assert frozen > 5000 and young < 50, out
