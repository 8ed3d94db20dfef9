"""mapper_impl against the readable upstream source (onnxruntime-qnn, file-mapping branch at
commit cc7ec9e) and the 2.7.0 DLL strings, one test group per point of issue 21:

1. scope: one mapping per session (backend manager) by default, one per process as an opt-in;
   views, descriptors and address space per process show the difference;
2. a failed deregistration returns MEM_ALLOC and is forgotten (a counted leak); the sweep is
   opt-in; the release callback deregisters whether or not the feature is still enabled;
3. late release callbacks of the failed attempt (upstream PR #839): during or after the retry,
   or at teardown, racing it;
4. the direct read's copy is transient: two copies at the peak, one afterwards;
5. the shared-resource (list) path falls back on any failure, the mapping step's included;
6. ``register_at``: the K-th registration fails after K-1 succeeded: left behind, stale, the
   later requests still made (upstream), or undone (the opt-in of PR #337's proposal); recovery
   is deterministic.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from mapper_support import (  # noqa: F401 (stats_guard: autouse fixture)
    assert_clean,
    open_handle_count,
    run_child,
    settled_stats,
    stats_guard,
    write_file,
)

from mapper_impl import (
    UPSTREAM_FALLBACK_STAGES,
    ContextLoadError,
    DmaBackend,
    FaultPlan,
    MappingScope,
    load_context,
    load_context_list,
    stats,
)

SIZE = 256 * 1024 + 13
REGIONS = [(0, 4096), (8192, 1000), (65536, 4096), (SIZE - 100, 100)]
LINUX = sys.platform.startswith("linux")


@pytest.fixture
def weights_file(tmp_path):
    path = tmp_path / "ctx_qnn.bin"
    return path, write_file(path, SIZE, seed=21)


def values(weights, views) -> list[bytes]:
    """A ``create`` that copies what it got (pins nothing)."""
    return [bytes(v) for v in views]


def expected(data: bytes) -> list[bytes]:
    return [data[o : o + s] for o, s in REGIONS]


def views_of(path) -> tuple[int, int]:
    """(mappings of ``path`` in /proc/self/maps, their bytes of address space): the kernel's
    own count, independent of mapper_impl's stats."""
    target = os.path.realpath(path)
    count = size = 0
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].strip() == target:
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                count, size = count + 1, size + hi - lo
    return count, size


class CountingBackend(DmaBackend):
    """Records every register / deregister call (the real calls' order is the evidence)."""

    name = "counting"

    def __init__(self, fail_deregister: bool = False) -> None:
        self.calls: list[tuple[str, int]] = []
        self.fail_deregister = fail_deregister

    def register(self, address: int, size: int) -> None:
        self.calls.append(("register", address))

    def deregister(self, address: int, size: int) -> None:
        self.calls.append(("deregister", address))
        if self.fail_deregister:
            raise OSError(16, "Device or resource busy")


# -- 1. scope --------------------------------------------------------------------------------


@pytest.mark.skipif(not LINUX, reason="/proc/self/maps is the independent count of views")
@pytest.mark.parametrize("scope, views", [("session", 3), ("process", 1)])
def test_scope_sets_views_descriptors_and_address_space_per_process(weights_file, scope, views):
    """M=3 loads of one file in one process: "session" (upstream: one file mapper per backend
    manager) maps it 3 times, "process" once. The kernel's maps agree with the stats, address
    space is views x file size, and descriptors grow per view. Pages are shared by the page
    cache either way (same physical file pages): all loads read the same bytes."""
    path, data = weights_file
    fds = open_handle_count()
    contexts = [load_context(path, REGIONS, values, disable_file_mapped_weights="0", scope=scope) for _ in range(3)]
    try:
        count, address_space = views_of(path)
        page = os.sysconf("SC_PAGE_SIZE")
        assert count == views and stats().live_mappings == views
        assert address_space == views * (-(-SIZE // page) * page)
        per_view = (open_handle_count() - fds) / views
        assert per_view == int(per_view) and per_view <= 2  # the mapper's fd (+ mmap's dup)
        assert all(c.value == expected(data) for c in contexts)
    finally:
        for ctx in contexts:
            ctx.close()
    assert views_of(path) == (0, 0) and open_handle_count() == fds
    assert_clean()


def test_sessions_sharing_ep_contexts_share_one_mapping(weights_file):
    """Sessions that share EP contexts share a backend manager: one `MappingScope` passed to
    each load gives one view for all of them, released at the last close."""
    path, _ = weights_file
    shared = MappingScope()
    contexts = [load_context(path, REGIONS, values, disable_file_mapped_weights="0", scope=shared) for _ in range(4)]
    assert stats().live_mappings == 1 and stats().dma_registrations == 4 * len(REGIONS)
    for ctx in contexts[:-1]:
        ctx.close()
    assert stats().live_mappings == 1
    contexts[-1].close()
    assert_clean()


def test_scope_names_are_checked(weights_file):
    path, _ = weights_file
    with pytest.raises(ValueError, match="session, process"):
        load_context(path, REGIONS, values, disable_file_mapped_weights="0", scope="thread")
    with pytest.raises(ValueError, match="read_copy"):
        load_context(path, REGIONS, values, disable_file_mapped_weights="0", read_copy="never")


# -- 2. deregistration -----------------------------------------------------------------------


def test_release_callback_deregisters_although_the_feature_is_disabled(weights_file):
    """A create failure disables mapping for the context first (the next request would be
    ABORTED), then the release callbacks run: every registration is still deregistered, in
    the backend's own calls."""
    path, _ = weights_file
    backend = CountingBackend()
    plan = FaultPlan(create_failures=1)
    with load_context(path, REGIONS, values, disable_file_mapped_weights="0", faults=plan, dma_backend=backend) as ctx:
        assert (ctx.path_taken, ctx.fallback_stage) == ("fallback", "create")
    kinds = [kind for kind, _ in backend.calls]
    assert kinds == ["register"] * len(REGIONS) + ["deregister"] * len(REGIONS)
    assert_clean()


@pytest.mark.parametrize("sweep", [False, True], ids=["upstream", "opt-in-sweep"])
def test_failed_deregistration_upstream_vs_sweep(weights_file, sweep):
    """Upstream: a failed deregistration is tried once (MEM_ALLOC) and leaked. The opt-in sweep
    retries it at teardown, holding the region until then."""
    path, _ = weights_file
    backend = CountingBackend(fail_deregister=True)
    leaked = stats().dma_leaked_registrations
    ctx = load_context(
        path, REGIONS[:1], values, disable_file_mapped_weights="0", dma_backend=backend, sweep_deregistrations=sweep
    )
    ctx.close()
    assert ctx.errors and all("MEM_ALLOC" in e.message for e in ctx.errors)
    tries = sum(kind == "deregister" for kind, _ in backend.calls)
    if sweep:
        assert (tries, ctx.pending_deregistrations, ctx.leaked_registrations) == (2, 1, 0)
        backend.fail_deregister = False
        ctx.close()  # a later teardown sweeps it
        assert ctx.pending_deregistrations == 0
    else:
        assert (tries, ctx.pending_deregistrations, ctx.leaked_registrations) == (1, 0, 1)
        assert stats().dma_leaked_registrations == leaked + 1
    assert_clean()


# -- 3. late release callbacks ---------------------------------------------------------------


class Probe:
    """A ``create`` that records, at each call, what the failed attempt still holds."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int]] = []

    def __call__(self, weights, views):
        s = stats()
        self.seen.append((weights.path_taken, s.dma_registrations, s.live_mappings))
        return values(weights, views)


@pytest.mark.parametrize("when", ["during", "after"])
def test_late_release_callbacks_are_survived(weights_file, when):
    """The failed attempt's release callbacks arrive during the direct read (before the context
    is created from it) or after it. A correct implementation survives both: until they
    arrive the registrations stay live and keep the mapping mapped (the DMA engine may still
    read it); each late release deregisters its own registration (by token) and nothing of
    the fallback context; the fallback's values are right; the mapping itself stays until the
    fallback context exists (upstream's file mapper keeps it); afterwards nothing is held."""
    path, data = weights_file
    backend, probe = CountingBackend(), Probe()
    plan = FaultPlan(create_failures=1, late_release=when)
    ctx = load_context(path, REGIONS, probe, disable_file_mapped_weights="0", faults=plan, dma_backend=backend)
    n = len(REGIONS)
    mapped_call, direct_call = probe.seen
    assert mapped_call == ("mapped", n, 1)
    if when == "after":
        assert direct_call == ("fallback", n, 1), "still registered and mapped while the fallback is created"
    else:
        assert direct_call == ("fallback", 0, 1), "released after the read, before the creation; still mapped"
    assert (ctx.path_taken, ctx.fallback_stage, ctx.value) == ("fallback", "create", expected(data))
    registered = [a for kind, a in backend.calls if kind == "register"]
    deregistered = [a for kind, a in backend.calls if kind == "deregister"]
    assert sorted(deregistered) == sorted(registered) and len(registered) == n
    snapshot = settled_stats()
    assert (snapshot.dma_registrations, snapshot.live_mappings, snapshot.deferred_unmaps) == (0, 0, 0)
    ctx.close()
    assert len(backend.calls) == 2 * n  # the fallback's teardown released nothing twice
    assert_clean()


class SlowBackend(CountingBackend):
    """Deregistrations take a moment: the teardown and the late callbacks overlap."""

    def deregister(self, address: int, size: int) -> None:
        import time

        time.sleep(0.002)
        super().deregister(address, size)


def test_late_release_at_teardown_is_survived(weights_file):
    """``late_release="teardown"`` (PR #839: callbacks dispatched while the session is being
    destroyed): the failed attempt's registrations stay live, pinning its mapping, for the
    fallback context's life; at close() its release callbacks arrive on another thread while
    the teardown releases the same registrations. Each is deregistered exactly once (the
    other finds it gone), the callbacks are counted, nothing leaks, and again on repeat."""
    path, data = weights_file
    n = len(REGIONS)
    for _ in range(10):  # the two threads interleave differently each time
        backend = SlowBackend()
        plan = FaultPlan(create_failures=1, late_release="teardown")
        ctx = load_context(path, REGIONS, values, disable_file_mapped_weights="0", faults=plan, dma_backend=backend)
        assert (ctx.path_taken, ctx.fallback_stage, ctx.value) == ("fallback", "create", expected(data))
        held = stats()
        assert (held.dma_registrations, held.live_mappings) == (n, 1), "live and mapped until teardown"
        assert ctx.late_release_callbacks == 0
        ctx.close()
        deregistered = [a for kind, a in backend.calls if kind == "deregister"]
        assert sorted(deregistered) == sorted(a for kind, a in backend.calls if kind == "register")
        assert len(set(deregistered)) == n, "no registration deregistered twice"
        assert ctx.late_release_callbacks == n and not ctx.errors[1:]
        assert_clean()


def test_late_release_at_teardown_with_a_failing_deregistration(weights_file):
    """A deregistration failing while the callbacks and the teardown race: reported once (by
    whichever made the call), leaked, the teardown finishes."""
    path, _ = weights_file
    leaked = stats().dma_leaked_registrations
    plan = FaultPlan(create_failures=1, deregister_failures=1, late_release="teardown")
    ctx = load_context(path, REGIONS, values, disable_file_mapped_weights="0", faults=plan)
    ctx.close()
    failures = [e for e in ctx.errors if e.stage == "deregister"]
    assert len(failures) == 1 and failures[0].attempt in ("late-release", "teardown")
    assert ctx.leaked_registrations == 1 and stats().dma_leaked_registrations == leaked + 1
    assert_clean()


def test_late_release_at_teardown_when_the_retry_fails(weights_file):
    """No fallback context to tear down: the callbacks arrive before the error is raised."""
    path, _ = weights_file
    plan = FaultPlan(create_failures=1, heap_read_failures=1, late_release="teardown")
    with pytest.raises(ContextLoadError):
        load_context(path, REGIONS, values, disable_file_mapped_weights="0", faults=plan)
    assert_clean()


def test_late_release_with_a_failing_deregistration_is_reported(weights_file):
    """A late release that fails is recorded as the late-release stage's error and leaked."""
    path, _ = weights_file
    plan = FaultPlan(create_failures=1, deregister_failures=1, late_release="after")
    with load_context(path, REGIONS, values, disable_file_mapped_weights="0", faults=plan) as ctx:
        assert [(e.attempt, e.stage) for e in ctx.errors] == [("mapped", "create"), ("late-release", "deregister")]
        assert ctx.leaked_registrations == 1
    assert_clean()


def test_late_release_when_the_retry_fails_too(weights_file):
    """The direct read fails as well: the late callbacks still arrive before the error is
    raised, and the error keeps every stage."""
    path, _ = weights_file
    plan = FaultPlan(create_failures=1, heap_read_failures=1, late_release="during")
    with pytest.raises(ContextLoadError) as info:
        load_context(path, REGIONS, values, disable_file_mapped_weights="0", faults=plan)
    assert [(e.attempt, e.stage) for e in info.value.errors] == [("mapped", "create"), ("direct", "read")]
    assert_clean()


# -- 4. the direct read's copy is transient --------------------------------------------------


class RuntimeCopy:
    """The runtime's own copy of the weights (what QNN keeps), made while the read copy lives."""

    def __init__(self) -> None:
        self.during: tuple[int, int] | None = None

    def __call__(self, weights, views):
        copy = bytearray(weights.buffer)
        s = stats()
        self.during = (s.heap_buffers, s.heap_bytes)
        return copy


@pytest.mark.parametrize("read_copy, after", [("transient", (0, 0)), ("kept", (1, SIZE))])
def test_read_copy_lifetime(weights_file, read_copy, after):
    """transient (upstream): while the context is created the read copy and the runtime's copy
    both exist (two copies); once it exists only the runtime's copy is left. kept: the read
    copy stays with the context (one more copy for the session's life)."""
    path, data = weights_file
    create = RuntimeCopy()
    ctx = load_context(path, REGIONS, create, disable_file_mapped_weights="1", read_copy=read_copy)
    assert create.during == (1, SIZE)
    assert (settled_stats().heap_buffers, settled_stats().heap_bytes) == after
    assert bytes(ctx.value) == data
    ctx.close()
    assert_clean()


PEAK_CHILD = """
import json, sys
from mapper_impl import load_context
path, read_copy = sys.argv[1], sys.argv[2]
def status(key):
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith(key + ":"))
def create(weights, views):
    copy = bytearray(weights.buffer)  # the runtime's own copy
    copy[::4096] = bytes(len(copy[::4096]))  # touch every page of it
    return copy
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM): ru_maxrss would keep the forking parent's
base = status("VmRSS")
ctx = load_context(path, [(0, 16)], create, disable_file_mapped_weights="1", read_copy=read_copy)
print(json.dumps({"base": base, "steady": status("VmRSS"), "peak": status("VmHWM")}))
"""


@pytest.mark.memory
@pytest.mark.skipif(not LINUX, reason="VmHWM and its reset (/proc/self/clear_refs): Linux")
def test_transient_read_copy_peaks_at_two_copies_and_keeps_one(tmp_path):
    """Real memory, in a fresh process (VmHWM, the kernel's own peak RSS): with 64 MiB of
    weights, transient peaks at ~2 copies above the start and keeps ~1; kept keeps ~2.
    Ratios with wide margins (other allocations are a few MiB)."""
    size = 64 * 1024 * 1024
    path = tmp_path / "big_qnn.bin"
    write_file(path, size, seed=5)
    figures = {}
    for read_copy in ("transient", "kept"):
        proc = run_child(PEAK_CHILD, str(path), read_copy, timeout=120)
        assert proc.returncode == 0, proc.stderr
        figures[read_copy] = json.loads(proc.stdout)
    for read_copy, steady_copies in (("transient", 1), ("kept", 2)):
        f = figures[read_copy]
        peak = (f["peak"] - f["base"]) / size
        steady = (f["steady"] - f["base"]) / size
        assert 1.7 <= peak <= 2.4, (read_copy, f)
        assert steady_copies - 0.3 <= steady <= steady_copies + 0.4, (read_copy, f)


# -- 5. the list path ------------------------------------------------------------------------


@pytest.fixture
def three_files(tmp_path):
    files = []
    for i in range(3):
        path = tmp_path / f"ctx{i}_qnn.bin"
        files.append((path, write_file(path, SIZE, seed=40 + i)))
    return files


def test_list_path_maps_every_context_with_one_scope(three_files):
    items = [(p, REGIONS) for p, _ in three_files]
    with load_context_list(items, values, disable_file_mapped_weights="0") as lst:
        assert lst.path_taken == "mapped" and not lst.retry_message
        assert lst.values == [expected(d) for _, d in three_files]
        assert stats().live_mappings == 3 and stats().dma_registrations == 3 * len(REGIONS)
    assert_clean()


@pytest.mark.parametrize(
    "plan, stage",
    [
        (FaultPlan(map_failures=1), "map"),
        (FaultPlan(register_at=2), "register"),
        (FaultPlan(create_failures=1), "create"),
    ],
    ids=["map", "register@2", "create"],
)
def test_list_path_falls_back_on_any_failure_the_mapping_included(three_files, plan, stage):
    """Any failure with the feature on retries the WHOLE list once with it off, the mapping
    step's failure included (on the single-context path that one is fatal upstream)."""
    path0 = three_files[0][0]
    with pytest.raises(ContextLoadError):
        load_context(
            path0, REGIONS, values, disable_file_mapped_weights="0", faults=FaultPlan(map_failures=1),
            fallback_stages=UPSTREAM_FALLBACK_STAGES,
        )  # fmt: skip
    items = [(p, REGIONS) for p, _ in three_files]
    with load_context_list(items, values, disable_file_mapped_weights="0", faults=plan) as lst:
        assert (lst.path_taken, lst.fallback_stage) == ("fallback", stage)
        assert lst.retry_message.startswith("Failed to create context with file mapping enabled. Error: ")
        assert lst.retry_message.endswith(". Retrying with feature disabled.")
        assert [c.path_taken for c in lst.contexts] == ["fallback"] * 3
        assert lst.values == [expected(d) for _, d in three_files]
        snapshot = settled_stats()
        assert (snapshot.live_mappings, snapshot.dma_registrations, snapshot.heap_buffers) == (0, 0, 3)
    assert_clean()


def test_list_path_retry_failing_too_keeps_every_error(three_files):
    items = [(p, REGIONS) for p, _ in three_files]
    plan = FaultPlan(create_failures=1, heap_read_failures=1)
    with pytest.raises(ContextLoadError) as info:
        load_context_list(items, values, disable_file_mapped_weights="0", faults=plan)
    stages = [(e.attempt, e.stage) for e in info.value.errors]
    assert stages == [("mapped", "create"), ("direct", "read")]
    assert_clean()


# -- 6. registration failing part way ----------------------------------------------------


def _stale_delta(before):
    return stats().dma_stale_registrations - before


@pytest.mark.parametrize("k", [1, 2, len(REGIONS)])
def test_register_at_k_leaves_the_failed_registration_stale_and_falls_back(weights_file, k):
    """The K-th registration fails after the backend registered it (cc7ec9e 886-893: register_buf,
    then to_fd is -1 and nothing is undone or disabled; onnxruntime-qnn #337's stale FastRPC
    registration): it stays registered, counted as stale; the later requests are still made
    (nothing disabled them); QNN's release callbacks deregister the others; then the direct
    read. The stale one is never deregistered, not even at teardown."""
    path, data = weights_file
    backend = CountingBackend()
    before = stats().dma_stale_registrations
    plan = FaultPlan(register_at=k)
    with load_context(path, REGIONS, values, disable_file_mapped_weights="0", faults=plan, dma_backend=backend) as ctx:
        assert (ctx.path_taken, ctx.fallback_stage, ctx.value) == ("fallback", "register", expected(data))
        assert ctx.stale_registrations == 1 and _stale_delta(before) == 1
        (error,) = ctx.errors
        assert "Failed to register DMA data mapping to RPCMEM" in error.message
        assert "left behind, stale" in error.message
    registered = [a for kind, a in backend.calls if kind == "register"]
    deregistered = [a for kind, a in backend.calls if kind == "deregister"]
    assert len(registered) == len(REGIONS), "every request is made, the failed one's later ones too"
    stale = registered[k - 1]
    assert sorted(deregistered) == sorted(a for a in registered if a != stale)
    assert stats().leaks()["dma_stale_registrations"] >= 1  # a worker reports it as a leak
    assert_clean()


@pytest.mark.parametrize("k", [1, 2, len(REGIONS)])
def test_opt_in_undo_of_a_failed_registration(weights_file, k):
    """``failed_registration="undo"`` (onnxruntime-qnn PR #337's proposal, closed unmerged: not
    upstream behaviour): the failed registration is undone, mapping is disabled for the context
    and the later requests are refused unmade (ABORTED): nothing stale, every registration
    deregistered once."""
    path, data = weights_file
    backend = CountingBackend()
    before = stats().dma_stale_registrations
    plan = FaultPlan(register_at=k)
    with load_context(
        path,
        REGIONS,
        values,
        disable_file_mapped_weights="0",
        faults=plan,
        dma_backend=backend,
        failed_registration="undo",
    ) as ctx:
        assert (ctx.path_taken, ctx.fallback_stage, ctx.value) == ("fallback", "register", expected(data))
        assert ctx.stale_registrations == 0 and _stale_delta(before) == 0
        assert "registration undone" in ctx.errors[0].message
        assert ("later request(s) refused, ABORTED" in ctx.error_text) == (k < len(REGIONS))
    assert [kind for kind, _ in backend.calls] == ["register"] * k + ["deregister"] * k
    assert_clean()


@pytest.mark.parametrize("failed", ["stale", "undo"])
def test_every_registration_failing_upstream_vs_undo(weights_file, failed):
    """The device of #337, where every import of the file fails: upstream makes every request
    and leaves each failed registration stale; the undo opt-in stops at the first."""
    path, _ = weights_file
    backend = CountingBackend()
    plan = FaultPlan(register_failures=len(REGIONS))
    with load_context(
        path, REGIONS, values, disable_file_mapped_weights="0", faults=plan, dma_backend=backend,
        failed_registration=failed,
    ) as ctx:  # fmt: skip
        stale = len(REGIONS) if failed == "stale" else 0
        assert (ctx.path_taken, ctx.stale_registrations) == ("fallback", stale)
        made = len(REGIONS) if failed == "stale" else 1
        assert sum(kind == "register" for kind, _ in backend.calls) == made
        assert sum(e.stage == "register" and "RPCMEM" in e.message for e in ctx.errors) == made
    assert_clean()


def test_a_failed_registration_value_is_checked(weights_file):
    path, _ = weights_file
    with pytest.raises(ValueError, match="stale, undo"):
        load_context(path, REGIONS, values, disable_file_mapped_weights="0", failed_registration="keep")


def test_register_at_k_recovery_is_deterministic(weights_file):
    """Five repeats of register@3: the same path, stage, errors (addresses blanked), stale count
    and backend call sequence each time."""
    import re

    path, _ = weights_file
    outcomes = []
    for _ in range(5):
        backend = CountingBackend()
        plan = FaultPlan(register_at=3)
        with load_context(
            path, REGIONS, values, disable_file_mapped_weights="0", faults=plan, dma_backend=backend
        ) as c:
            errors = [re.sub(r"0x[0-9a-f]+", "0x?", str(e)) for e in c.errors]
            calls = tuple(k for k, _ in backend.calls)
            outcomes.append((c.path_taken, c.fallback_stage, c.stale_registrations, tuple(errors), calls))
    assert len(set(outcomes)) == 1, outcomes
    assert outcomes[0][2] == 1
    assert_clean()
