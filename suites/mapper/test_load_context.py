"""load_context: the QNN EP's pipeline for one context. A mapped attempt is map -> register
each region -> create; a failure of the register stage or the creation deregisters that
attempt's regions and makes exactly one direct read that calls create again (a failed mapping
step fails the load, as upstream's single-context path: the lenient ``fallback_stages=STAGES``
falls back there too) (the failed attempt's mapping is released once
that is over: test_fallback_mapping.py watches it in the kernel); when that fails too, the
error keeps every stage's error. What a load leaves behind (teardown, determinism, per-file
disable, sharing) is test_load_context_state.py."""

from __future__ import annotations

import sys

import numpy as np
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
)

#: Fixtures of the support module, requested by name in the tests below.
FIXTURES = (weights_file, direct_reads)


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
    lenient = {"fallback_stages": STAGES} if stage == "map" else {}  # upstream: a failed mapping step is fatal
    ctx = load_context(path, REGIONS, create, disable_file_mapped_weights="0", faults=plan, **lenient)
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
    errors kept; without it the first failure fails the load (upstream), or falls back with
    the lenient stages."""
    path, _ = weights_file
    plan = FaultPlan(map_failures=2)
    with _mapped(path, faults=plan, retry=RetryPolicy(max_attempts=3)) as ctx:
        assert (ctx.path_taken, ctx.map_attempts, ctx.attempts) == ("mapped", 3, 1)
        assert [e.message.split(":")[0] for e in ctx.errors] == ["attempt 1", "attempt 2"]
    with pytest.raises(ContextLoadError) as info:
        _mapped(path, faults=plan)
    assert info.value.failed_stage == "map" and len(info.value.errors) == 1
    with _mapped(path, faults=plan, fallback_stages=STAGES) as ctx:
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
    with pytest.raises(ContextLoadError) as info:  # the map-then-read case needs the lenient stages
        load_context(path, REGIONS, create, disable_file_mapped_weights="0", faults=plan, fallback_stages=STAGES)
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
        m.load_context(path, [(0, 10)], lambda w, v: None, disable_file_mapped_weights="0", fallback_stages=m.STAGES)
    except m.ContextLoadError as err:
        print(err)
    print("clean", m.stats().is_clean())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux only")
def test_real_address_space_exhaustion_keeps_both_errors(tmp_path):
    """Real failures, no injection: under an address-space limit with room for neither a
    64 MiB mapping nor a 64 MiB copy, mmap fails (ENOMEM) and then (lenient stages: upstream
    would stop at the failed mapping) the direct read's allocation fails (MemoryError); the error
    names both, in order. In a child, so the limit touches nothing else."""
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
