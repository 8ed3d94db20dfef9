"""load_context: the QNN EP's pipeline for one context. A mapped attempt is map -> register
each region -> create; a failure at any stage deregisters that attempt's regions and makes
exactly one direct read that calls create again (the failed attempt's mapping is released once
that is over: test_fallback_mapping.py watches it in the kernel); when that fails too, the
error keeps every stage's error. Deterministic per load; per-file (per-context) disable;
teardown deregisters, sweeps and releases everything."""

from __future__ import annotations

import re
import sys
import threading

import numpy as np
import pytest
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    CountingMapper,
    assert_clean,
    data_address,
    matmul_model,
    run_with_little_address_space,
    settled_stats,
    stats_guard,
    write_file,
)

import mapper_impl
from mapper_impl import (
    STAGES,
    UPSTREAM_FALLBACK_STAGES,
    ContextLoadError,
    FaultPlan,
    FileMissingError,
    LoadedContext,
    RetryPolicy,
    StageError,
    load_context,
    shared_users,
    stats,
    sweep_registrations,
)
from mapper_impl import _context as context_mod

SIZE = 64 * 1024 + 77
REGIONS = [(0, 1000), (4097, 3000), (SIZE - 500, 500)]


@pytest.fixture
def weights_file(tmp_path):
    path = tmp_path / "ctx_qnn.bin"
    return path, write_file(path, SIZE, seed=31)


class Recorder:
    """A ``create`` that records how it was called (path taken, bytes and addresses of the
    views it got) and returns a small value that does not pin the views."""

    def __init__(self, fail_on: set[int] = frozenset(), error: type[BaseException] = RuntimeError) -> None:
        self.calls: list[dict] = []
        self.fail_on = fail_on
        self.error = error

    def __call__(self, weights, views):
        self.calls.append(
            {
                "path_taken": weights.path_taken,
                "mapped": weights.mapped,
                "bytes": [bytes(v) for v in views],
                "addresses": [data_address(v) for v in views],
                "base": weights.base_address,
            }
        )
        if len(self.calls) in self.fail_on:
            raise self.error(f"create call {len(self.calls)} failed")
        return ("value", len(self.calls))


def _mapped(path, **options) -> LoadedContext:
    """``load_context`` of REGIONS with mapping on and a fresh `Recorder`: most tests here vary
    only the faults and the policy."""
    return load_context(path, REGIONS, Recorder(), disable_file_mapped_weights="0", **options)


@pytest.fixture
def direct_reads(monkeypatch):
    """Count direct (heap) reads made by load_context (a spy: the real read still runs)."""
    calls = []
    real = context_mod.heap_weights

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(context_mod, "heap_weights", counting)
    return calls


def expected_bytes(data: bytes) -> list[bytes]:
    return [data[o : o + s] for o, s in REGIONS]


# -- the paths ---------------------------------------------------------------------------


def test_mapped_path_registers_every_region_in_the_one_view(weights_file, direct_reads):
    """No fault: one attempt, create called once with base + offset views of the shared
    mapping, one DMA registration per region; close() deregisters all and unmaps."""
    path, data = weights_file
    create = Recorder()
    ctx = load_context(path, REGIONS, create, disable_file_mapped_weights="0")
    assert isinstance(ctx, LoadedContext)
    assert (ctx.path_taken, ctx.fallback_stage, ctx.errors, ctx.attempts, ctx.map_attempts) == ("mapped", "", [], 1, 1)
    assert ctx.value == ("value", 1)
    [call] = create.calls
    assert call["path_taken"] == "mapped" and call["mapped"]
    assert call["bytes"] == expected_bytes(data)
    assert call["addresses"] == [call["base"] + o for o, _ in REGIONS]
    assert [bytes(v) for v in ctx.views] == expected_bytes(data)
    snapshot = stats()
    assert (snapshot.live_mappings, snapshot.heap_buffers) == (1, 0)
    assert (snapshot.dma_registrations, snapshot.dma_registered_bytes) == (3, sum(s for _, s in REGIONS))
    assert ctx.registered == 3 and direct_reads == []
    ctx.close()
    assert ctx.closed and ctx.value is None and ctx.views == ()
    assert ctx.weights.closed
    ctx.close()  # idempotent
    assert_clean()


@pytest.mark.parametrize("flag", ["1", True])
def test_disabled_goes_straight_to_the_direct_read(weights_file, direct_reads, flag):
    """ "1": no mapping attempted, no registration, one direct read, create called once over
    slices of the private copy."""
    path, data = weights_file
    mapper, create = CountingMapper(), Recorder()
    with load_context(path, REGIONS, create, disable_file_mapped_weights=flag, mapper=mapper) as ctx:
        assert (ctx.path_taken, ctx.fallback_stage, ctx.attempts, ctx.map_attempts) == ("heap", "", 1, 0)
        assert mapper.calls == 0 and len(direct_reads) == 1
        [call] = create.calls
        assert (call["path_taken"], call["mapped"], call["base"]) == ("heap", False, None)
        assert call["bytes"] == expected_bytes(data)
        snapshot = stats()
        assert (snapshot.live_mappings, snapshot.heap_buffers, snapshot.dma_registrations) == (0, 1, 0)
    assert_clean()


@pytest.mark.parametrize("stage", STAGES)
def test_a_fault_at_each_stage_falls_back_once(weights_file, direct_reads, stage):
    """A fault at map, register or create: path_taken "fallback", fallback_stage = the stage,
    exactly one direct read, create called twice for a create fault (once otherwise: the
    earlier stages fail before it), the failed attempt's registrations deregistered and its
    mapping released, the right bytes, and the injected error recorded in full."""
    path, data = weights_file
    create = Recorder()
    plan = FaultPlan(**{f"{stage}_failures": 1})
    ctx = load_context(path, REGIONS, create, disable_file_mapped_weights="0", faults=plan)
    assert (ctx.path_taken, ctx.fallback_stage, ctx.attempts) == ("fallback", stage, 2)
    assert len(direct_reads) == 1
    assert [c["path_taken"] for c in create.calls] == (["mapped", "fallback"] if stage == "create" else ["fallback"])
    assert create.calls[-1]["bytes"] == expected_bytes(data) == [bytes(v) for v in ctx.views]
    assert ctx.value == ("value", len(create.calls))
    first = ctx.errors[0]
    assert (first.attempt, first.stage) == ("mapped", stage)
    assert "injected by FaultPlan" in first.message
    words = {
        "map": "cannot map",
        "register": "Failed to register DMA data mapping to RPCMEM",
        "create": "contextCreateFromBinaryWithCallback failed",
    }[stage]
    assert words in first.message
    snapshot = stats()
    assert (snapshot.live_mappings, snapshot.dma_registrations, snapshot.heap_buffers) == (0, 0, 1)
    assert shared_users(str(path)) == 0
    ctx.close()
    assert_clean()


def test_a_refused_region_deregisters_the_regions_before_it(weights_file):
    """A region past the end of the file is refused at the register stage after two regions
    were registered: both are deregistered, the direct read refuses it too, and the error
    names both refusals in order."""
    path, _ = weights_file
    regions = [(0, 10), (100, 10), (SIZE - 5, 10)]
    create = Recorder()
    with pytest.raises(ContextLoadError) as info:
        load_context(path, regions, create, disable_file_mapped_weights="0")
    err = info.value
    assert [(e.attempt, e.stage) for e in err.errors] == [("mapped", "register"), ("direct", "regions")]
    assert all("outside of mapped file" in e.message for e in err.errors)
    assert err.failed_stage == "register" and create.calls == []
    assert_clean()


def test_opt_in_retry_of_the_map_stage(weights_file):
    """retry=RetryPolicy(3): two map failures are retried and the load ends mapped, with both
    errors kept; without it the first failure falls back."""
    path, _ = weights_file
    plan = FaultPlan(map_failures=2)
    with _mapped(path, faults=plan, retry=RetryPolicy(max_attempts=3)) as ctx:
        assert (ctx.path_taken, ctx.map_attempts, ctx.attempts) == ("mapped", 3, 1)
        assert [e.message.split(":")[0] for e in ctx.errors] == ["attempt 1", "attempt 2"]
    with _mapped(path, faults=plan) as ctx:
        assert (ctx.path_taken, ctx.fallback_stage, ctx.map_attempts) == ("fallback", "map", 1)
    assert_clean()


# -- when the direct read fails too --------------------------------------------------------


@pytest.mark.parametrize(
    ("plan", "create_fails", "expected"),
    [
        (FaultPlan(create_failures=1, heap_read_failures=1), set(), [("mapped", "create"), ("direct", "read")]),
        (FaultPlan(map_failures=1, heap_read_failures=1), set(), [("mapped", "map"), ("direct", "read")]),
        (FaultPlan(register_failures=1, heap_read_failures=1), set(), [("mapped", "register"), ("direct", "read")]),
        (FaultPlan(), {1, 2}, [("mapped", "create"), ("direct", "create")]),
    ],
    ids=["create-then-read", "map-then-read", "register-then-read", "caller-create-twice"],
)
def test_failed_fallback_keeps_every_stage_error(weights_file, plan, create_fails, expected):
    """When the direct read or its create fails too, ContextLoadError's message and errors
    keep every stage's error in order, the cause is the last one, and nothing leaks."""
    path, _ = weights_file
    create = Recorder(fail_on=create_fails)
    with pytest.raises(ContextLoadError) as info:
        load_context(path, REGIONS, create, disable_file_mapped_weights="0", faults=plan)
    err = info.value
    assert [(e.attempt, e.stage) for e in err.errors] == expected
    for each in err.errors:
        assert str(each) in str(err)
    assert str(err).startswith(f"cannot load {path}: mapped ")
    assert err.failed_stage == expected[0][1]
    assert err.__cause__ is not None
    del info, err  # its traceback holds create's frame, whose arguments are the heap regions
    assert_clean()


def test_memory_error_in_the_direct_create_keeps_the_mapped_error(weights_file):
    """A MemoryError (type kept in the text: its message may be empty) in the second create
    does not drop the first attempt's error (issue 11)."""
    path, _ = weights_file
    create = Recorder(fail_on={2}, error=MemoryError)
    with pytest.raises(ContextLoadError) as info:
        load_context(path, REGIONS, create, disable_file_mapped_weights="0", faults=FaultPlan(create_failures=1))
    text = str(info.value)
    assert "mapped create: InjectedCreateError: contextCreateFromBinaryWithCallback failed" in text
    assert "direct create: MemoryError: create call 2 failed" in text
    assert isinstance(info.value.__cause__, MemoryError)
    del info  # its traceback holds create's frame, whose arguments are the heap regions
    assert_clean()


MEMORY_ERROR_CHILD = """
    try:
        m.load_context(path, [(0, 10)], lambda w, v: None, disable_file_mapped_weights="0")
    except m.ContextLoadError as err:
        print(err)
    print("clean", m.stats().is_clean())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux only")
def test_real_address_space_exhaustion_keeps_both_errors(tmp_path):
    """Real failures, no injection: under an address-space limit with room for neither a
    64 MiB mapping nor a 64 MiB copy, mmap fails (ENOMEM) and then the direct read's
    allocation fails (MemoryError); the error names both, in order. In a child, so the limit
    touches nothing else."""
    path, (message, clean) = run_with_little_address_space(MEMORY_ERROR_CHILD, tmp_path)
    mapped, direct = message.split("; ")
    assert mapped.startswith(f"cannot load {path}: mapped map: attempt 1: mmap of {path} failed")
    assert "Cannot allocate memory" in mapped
    assert direct == f"direct read: HeapReadError: cannot read {path}: no memory for a 67108864-byte copy"
    assert clean == "clean True"


def test_no_fallback_raises_after_cleaning_up(weights_file, direct_reads):
    """fallback_to_heap=False: a failed stage raises ContextLoadError with its error, after
    deregistering and releasing; the direct read is never tried."""
    path, _ = weights_file
    for stage in STAGES:
        with pytest.raises(ContextLoadError) as info:
            _mapped(path, faults=FaultPlan(**{f"{stage}_failures": 1}), fallback_to_heap=False)
        assert info.value.failed_stage == stage
        assert [(e.attempt, e.stage) for e in info.value.errors] == [("mapped", stage)]
        assert_clean()
    assert direct_reads == []


def test_upstream_strictness_map_failure_is_fatal(weights_file, direct_reads):
    """fallback_stages=UPSTREAM_FALLBACK_STAGES is upstream's Windows rule: a failure of the
    mapping step is fatal; register and create failures still retry with a direct read."""
    path, _ = weights_file
    assert UPSTREAM_FALLBACK_STAGES == {"register", "create"}
    with pytest.raises(ContextLoadError) as info:
        _mapped(path, faults=FaultPlan(map_failures=1), fallback_stages=UPSTREAM_FALLBACK_STAGES)
    assert info.value.failed_stage == "map" and direct_reads == []
    for stage in ("register", "create"):
        with _mapped(
            path, faults=FaultPlan(**{f"{stage}_failures": 1}), fallback_stages=UPSTREAM_FALLBACK_STAGES
        ) as ctx:
            assert (ctx.path_taken, ctx.fallback_stage) == ("fallback", stage)
    assert len(direct_reads) == 2
    assert_clean()


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


# -- a real ORT session as create -------------------------------------------------------------

ort = pytest.importorskip("onnxruntime")


def ort_create(model: bytes, k: int, n: int):
    """The harness's create: an ORT CPU session over an OrtValue pointing into the region,
    prepacking off (it would copy the weight)."""

    def create(weights, views):
        array = np.frombuffer(views[0], dtype=np.float32).reshape(k, n)
        value = ort.OrtValue.ortvalue_from_numpy(array)
        options = ort.SessionOptions()
        options.add_session_config_entry("session.disable_prepacking", "1")
        options.add_initializer("W", value)
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        return session, value

    return create


@pytest.mark.parametrize(
    "plan",
    [None, FaultPlan(create_failures=1), FaultPlan(register_failures=1)],
    ids=["mapped", "create-fault", "register-fault"],
)
def test_real_ort_session_over_the_regions(tmp_path, plan):
    """create builds a real ORT CPU session whose weight is an OrtValue over the region: in
    place (the OrtValue's pointer is base + offset) on the mapped path, over the private copy
    after a fallback; the output is right either way; teardown leaves nothing."""
    k, n, offset = 64, 32, 4096
    weight = np.random.default_rng(3).standard_normal((k, n)).astype(np.float32)
    path = tmp_path / "matmul_qnn.bin"
    path.write_bytes(b"\x00" * offset + weight.tobytes() + b"\x00" * 100)
    x = np.random.default_rng(4).standard_normal((1, k)).astype(np.float32)
    with load_context(
        path,
        [(offset, weight.nbytes)],
        ort_create(matmul_model(k, n), k, n),
        disable_file_mapped_weights="0",
        faults=plan,
    ) as ctx:
        session, value = ctx.value
        np.testing.assert_allclose(session.run(None, {"X": x})[0], x @ weight, rtol=1e-5)
        if plan is None:
            assert ctx.path_taken == "mapped"
            assert value.data_ptr() == ctx.weights.base_address + offset
        else:
            assert ctx.path_taken == "fallback"
            assert value.data_ptr() == data_address(ctx.weights.buffer) + offset
        del session, value
    assert_clean()


# -- arguments ----------------------------------------------------------------------------------

BAD_ARGUMENTS = [
    pytest.param({"disable_file_mapped_weights": "yes"}, ValueError, "disable_file_mapped_weights", id="flag"),
    pytest.param({"create": 42}, TypeError, "create must be callable", id="create"),
    pytest.param({"regions": [(0, 1, 2)]}, TypeError, r"regions\[0\] must be an \(offset, size\) pair", id="triple"),
    pytest.param({"regions": [5]}, TypeError, r"regions\[0\]", id="not-a-pair"),
    pytest.param({"regions": [(0.5, 10)]}, TypeError, "region offset must be an integer", id="float"),
    pytest.param({"faults": {"map_failures": 1}}, TypeError, "FaultPlan", id="faults"),
    pytest.param({"fallback_stages": ["map", "nope"]}, ValueError, "unknown fallback stage", id="stage"),
    pytest.param({"fallback_stages": "map"}, TypeError, "not a str", id="stage-str"),
    pytest.param({"retry": 3}, TypeError, "RetryPolicy", id="retry"),
    pytest.param({"dma_backend": "rpcmem"}, ValueError, "dma_backend must be one of", id="backend"),
]


@pytest.mark.parametrize(("override", "error", "words"), BAD_ARGUMENTS)
def test_bad_arguments_are_refused_before_any_work(weights_file, override, error, words):
    """Every argument error is raised before anything is mapped, registered or read."""
    path, _ = weights_file
    mapper = CountingMapper()
    kwargs = {"regions": REGIONS, "create": Recorder(), "disable_file_mapped_weights": "0", "mapper": mapper}
    kwargs.update(override)
    with pytest.raises(error, match=words):
        load_context(path, kwargs.pop("regions"), kwargs.pop("create"), **kwargs)
    assert mapper.calls == 0
    assert stats().is_clean()


def test_disable_flag_has_no_default(weights_file):
    """The option must be passed explicitly (upstream's own default is being debated)."""
    path, _ = weights_file
    with pytest.raises(TypeError, match="disable_file_mapped_weights"):
        load_context(path, REGIONS, Recorder())  # type: ignore[call-arg]


@pytest.mark.parametrize("flag", ["0", "1"])
def test_unusable_file_is_an_input_error_not_a_fallback(tmp_path, direct_reads, flag):
    """A missing file raises FileMissingError itself, on either path, never a fallback."""
    with pytest.raises(FileMissingError):
        load_context(tmp_path / "missing.bin", REGIONS, Recorder(), disable_file_mapped_weights=flag)
    assert len(direct_reads) == (1 if flag == "1" else 0)
    assert_clean()


def test_stage_error_and_context_repr(weights_file):
    """StageError prints as "<attempt> <stage>: <message>"; the context's repr names its path
    and stage."""
    assert str(StageError("mapped", "create", "RuntimeError: boom")) == "mapped create: RuntimeError: boom"
    path, _ = weights_file
    ctx = _mapped(path, faults=FaultPlan(create_failures=1))
    assert "path_taken=fallback fallback_stage=create" in repr(ctx)
    assert ctx.error_text.startswith("mapped create: InjectedCreateError: ")
    ctx.close()
    assert "closed" in repr(ctx)
    assert mapper_impl.STAGES == ("map", "register", "create")


@pytest.mark.parametrize("disable", ["0", "1"])
def test_injected_create_faults_hit_only_the_creation_with_callbacks(weights_file, disable):
    """create faults model contextCreateFromBinaryWithCallback: the direct read's creation from a
    buffer (the fallback, or option "1") never meets them, however many are planned."""
    path, _ = weights_file
    create = Recorder()
    with load_context(
        path, REGIONS, create, disable_file_mapped_weights=disable, faults=FaultPlan(create_failures=5)
    ) as ctx:
        expected = ("heap", "") if disable == "1" else ("fallback", "create")
        assert (ctx.path_taken, ctx.fallback_stage) == expected
    assert_clean()
