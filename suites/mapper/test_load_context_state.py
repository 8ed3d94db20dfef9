"""What a load_context leaves behind: teardown deregisters, sweeps and releases everything
(upstream leaks a failed deregistration, our opt-in sweep retries it); the same fault plan
gives the same outcome every time, in any thread; disable is per file and per context; the
process scope shares one mapping among M contexts."""

from __future__ import annotations

import re
import threading

import pytest
from load_context_support import (
    REGIONS,
    SIZE,
    Recorder,
    _mapped,
    direct_reads,
    expected_bytes,
    weights_file,
)
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    assert_clean,
    data_address,
    settled_stats,
    stats_guard,
    write_file,
)

from mapper_impl import (
    ContextLoadError,
    FaultPlan,
    load_context,
    shared_users,
    stats,
    sweep_registrations,
)

#: Fixtures of the support module, requested by name in the tests below.
FIXTURES = (weights_file, direct_reads)


# -- deregistration and teardown -------------------------------------------------------------


def test_deregister_fault_is_a_leak_upstream(weights_file):
    """Upstream's default: teardown's failed deregistration returns MEM_ALLOC, is recorded and
    forgotten (no sweep): the context counts it as leaked, the process's stats too, and
    nothing else is held after close()."""
    path, _ = weights_file
    before = stats().dma_leaked_registrations
    ctx = _mapped(path, faults=FaultPlan(deregister_failures=1))
    ctx.close()
    assert [(e.attempt, e.stage) for e in ctx.errors] == [("teardown", "deregister")]
    assert "MEM_ALLOC" in ctx.errors[0].message
    assert (ctx.pending_deregistrations, ctx.leaked_registrations) == (0, 1)
    assert stats().dma_leaked_registrations == before + 1
    assert_clean()


def test_deregister_fault_is_swept_at_teardown(weights_file):
    """Opt-in sweep: teardown's first deregistration fails, is kept, and the same teardown's
    sweep deregisters it: stats clean after close(), the failure recorded, nothing leaked."""
    path, _ = weights_file
    ctx = _mapped(path, faults=FaultPlan(deregister_failures=1), sweep_deregistrations=True)
    assert ctx.path_taken == "mapped" and stats().dma_registrations == 3
    ctx.close()
    assert [(e.attempt, e.stage) for e in ctx.errors] == [("teardown", "deregister")]
    assert "Failed to deregister buffer from RPCMEM: 0x" in ctx.errors[0].message
    assert ctx.pending_deregistrations == 0
    assert_clean()


def test_failed_attempt_deregistration_is_kept_and_pins_the_mapping(weights_file):
    """A create fault with a failing deregistration: the failed attempt's registration is kept
    pending (its memory stays mapped under the 'DMA engine': one deferred unmap) while the
    fallback context lives, and its teardown sweep deregisters it: stats clean."""
    path, _ = weights_file
    plan = FaultPlan(create_failures=1, deregister_failures=1)
    ctx = _mapped(path, faults=plan, sweep_deregistrations=True)
    assert (ctx.path_taken, ctx.fallback_stage) == ("fallback", "create")
    assert ctx.pending_deregistrations == 1
    snapshot = settled_stats()
    assert (snapshot.dma_registrations, snapshot.dma_pending_deregistrations) == (1, 1)
    assert (snapshot.live_mappings, snapshot.deferred_unmaps) == (1, 1)
    assert [(e.attempt, e.stage) for e in ctx.errors] == [("mapped", "create"), ("mapped", "deregister")]
    ctx.close()
    assert ctx.pending_deregistrations == 0
    assert_clean()


def test_stubborn_deregistrations_are_retried_by_later_sweeps(weights_file):
    """deregister_failures=7 over 3 regions: teardown fails 3 then sweeps 3 (6 failures: 3
    pending); the next close sweeps (7th fails, 2 succeed: 1 pending); the next one succeeds.
    Each sweep is counted and deterministic; the stats say what is left."""
    path, _ = weights_file
    ctx = _mapped(path, faults=FaultPlan(deregister_failures=7), sweep_deregistrations=True)
    pending = []
    for _ in range(3):
        ctx.close()
        pending.append((ctx.pending_deregistrations, settled_stats().dma_pending_deregistrations))
    assert pending == [(3, 3), (1, 1), (0, 0)]
    assert sum(e.stage == "deregister" for e in ctx.errors) == 7
    assert_clean()


def test_a_context_dropped_without_close_is_torn_down(weights_file):
    """Dropping a LoadedContext without close() runs its teardown (as upstream's destructor):
    registrations deregistered, mapping released; leftovers are swept by sweep_registrations."""
    path, _ = weights_file
    ctx = _mapped(path, faults=FaultPlan(deregister_failures=6), sweep_deregistrations=True)
    assert stats().dma_registrations == 3
    leaked = stats().leaked_loads
    del ctx
    snapshot = settled_stats()
    assert (snapshot.dma_registrations, snapshot.dma_pending_deregistrations) == (3, 3)
    assert snapshot.leaked_loads == leaked + 1, "a dropped context is counted as leaked"
    assert sweep_registrations() == 0
    assert_clean()


def test_interrupt_in_create_cleans_up_and_propagates(weights_file, direct_reads):
    """A KeyboardInterrupt inside create is not a stage failure: no fallback, but the attempt
    is cleaned up (registrations, mapping) before it propagates."""
    path, _ = weights_file
    with pytest.raises(KeyboardInterrupt):
        load_context(path, REGIONS, Recorder(fail_on={1}, error=KeyboardInterrupt), disable_file_mapped_weights="0")
    assert direct_reads == []
    assert_clean()


# -- determinism, per-file disable, sharing ---------------------------------------------------

PLANS = [
    FaultPlan(),
    FaultPlan(map_failures=1),
    FaultPlan(register_failures=2),
    FaultPlan(create_failures=1),
    FaultPlan(create_failures=1, deregister_failures=2),
    FaultPlan(create_failures=2),
    FaultPlan(platform_unavailable=True),
    FaultPlan(map_failures=1, heap_read_failures=1),
]


def outcome(path, plan) -> tuple:
    """Everything a run decides, with addresses (which differ per mapping) blanked."""
    create = Recorder()
    try:
        with load_context(path, REGIONS, create, disable_file_mapped_weights="0", faults=plan) as ctx:
            result = (ctx.path_taken, ctx.fallback_stage, ctx.attempts, ctx.value)
        errors = ctx.errors
    except ContextLoadError as err:
        result, errors = ("error", err.failed_stage), list(err.errors)
    text = [re.sub(r"0x[0-9a-f]+", "0x?", str(e)) for e in errors]
    return result, text, [c["path_taken"] for c in create.calls]


@pytest.mark.parametrize("plan", PLANS, ids=repr)
def test_recovery_is_deterministic(weights_file, plan):
    """The same plan gives the same outcome (path, stage, errors, create calls) every time."""
    path, _ = weights_file
    outcomes = [outcome(path, plan) for _ in range(4)]
    assert all(o == outcomes[0] for o in outcomes), outcomes
    assert_clean()


def test_recovery_is_deterministic_across_threads(weights_file):
    """Eight threads loading one shared file with different plans at once: every load gets
    exactly the outcome its plan gets alone (cursors are per load), nothing leaks."""
    path, _ = weights_file
    alone = {i: outcome(path, plan) for i, plan in enumerate(PLANS)}
    results: dict[int, list] = {i: [] for i in range(len(PLANS))}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for _ in range(10):
                results[i].append(outcome(path, PLANS[i]))
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(PLANS))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not errors, errors
    for i, seen in results.items():
        assert seen == [alone[i]] * 10, PLANS[i]
    assert_clean()


def test_disable_is_per_file_and_per_context(weights_file, tmp_path):
    """One file's "1" does not touch another file's "0"; a failed mapped attempt disables
    only that context: the next context of the same file maps again, and a context of another
    file loaded meanwhile is mapped and registered. No process-wide disabled state."""
    path, data = weights_file
    other = tmp_path / "other_qnn.bin"
    write_file(other, SIZE, seed=32)
    with (
        load_context(path, REGIONS, Recorder(), disable_file_mapped_weights="1") as a,
        load_context(other, REGIONS, Recorder(), disable_file_mapped_weights="0") as b,
    ):
        assert (a.path_taken, b.path_taken) == ("heap", "mapped")
    with _mapped(path, faults=FaultPlan(create_failures=1)) as failed:
        assert failed.path_taken == "fallback"
        with (
            load_context(other, REGIONS, Recorder(), disable_file_mapped_weights="0") as b,
            load_context(path, REGIONS, Recorder(), disable_file_mapped_weights="0") as again,
        ):
            assert (b.path_taken, again.path_taken) == ("mapped", "mapped")
            assert again.registered == 3 and again.weights.feature_enabled
            assert [bytes(v) for v in again.views] == expected_bytes(data)
    assert_clean()


def test_m_contexts_share_one_mapping_in_process_scope(weights_file):
    """``scope="process"`` (our extension): M load_context calls, one mapping, M x regions
    registrations, views at the same addresses; closing them one by one unmaps at the last."""
    path, _ = weights_file
    contexts = [_mapped(path, scope="process") for _ in range(6)]
    assert shared_users(str(path)) == 6
    snapshot = stats()
    assert (snapshot.live_mappings, snapshot.mapped_bytes, snapshot.dma_registrations) == (1, SIZE, 18)
    assert len({tuple(map(data_address, c.views)) for c in contexts}) == 1
    for i, ctx in enumerate(contexts):
        ctx.close()
        assert stats().dma_registrations == 3 * (5 - i)
        assert stats().live_mappings == (1 if i < 5 else 0)
    assert_clean()


@pytest.mark.parametrize(("disables", "second"), [("model", "mapped"), ("backend-manager", "fallback")])
def test_a_shared_backend_manager_shows_the_per_model_disable(weights_file, disables, second):
    """Issue 43 item 9 (microsoft/onnxruntime #27871): with one backend manager per session, a
    failed creation's disable cannot be told from the old disable-everything (each session fails
    its own attempt). Sessions sharing one backend manager (ep.share_ep_contexts) count the fault
    plan together: the first creation fails; the second context maps again (per model, upstream)
    or, before #27871, is refused ABORTED and falls back. The file is mapped once for both."""
    from mapper_impl import MappingScope

    path, data = weights_file
    manager = MappingScope(disables=disables, sessions=True)
    plan = FaultPlan(create_failures=1)
    with _mapped(path, faults=plan, scope=manager) as first, _mapped(path, faults=plan, scope=manager) as again:
        assert (first.path_taken, first.fallback_stage) == ("fallback", "create")
        assert again.path_taken == second, again.errors
        if second == "mapped":
            assert [bytes(v) for v in again.views] == expected_bytes(data) and not again.errors
        else:
            assert again.fallback_stage == "register" and "has been disabled" in str(again.errors[0])
    separate = [_mapped(path, faults=plan) for _ in range(2)]  # one backend manager each: both fail
    assert [c.path_taken for c in separate] == ["fallback", "fallback"]
    for ctx in separate:
        ctx.close()
    one = MappingScope(sessions=True)  # the list path's and shared contexts' sharing: one view per manager
    with _mapped(path, scope=one), _mapped(path, scope=one):
        assert stats().live_mappings == 1
    with _mapped(path), _mapped(path):  # the single path: one per session
        assert stats().live_mappings == 2
    assert_clean()
