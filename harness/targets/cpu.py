"""The cpu target (the default): weights loaded by `mapper_impl` and handed to ORT's CPU EP in
place.

Mapped mode maps the weights file once per session (`disable_file_mapped_weights=0`), as the
EP's one file mapper per backend manager does (``--mapping-scope process``: once per process,
our extension); the sessions get OrtValues that point into the mapping
(`SessionOptions.add_initializer`), so the figures measure the mapping, not a copy ORT makes.
Heap mode (`=1`) follows the EP's direct read: the file is read into a local copy, the runtime
makes its own copy from it (QNN keeps one) and the read copy is freed once the session exists,
so a heap session peaks at two copies and keeps one. Weight prepacking is off: it would copy
every weight.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from harness.contract import phases
from harness.core.argtypes import int_at_least, positive_int
from harness.core.vocab import Mode, PathTaken, disable_flag
from harness.prep.folder import PreparedModel
from harness.prep.sessions import SessionSettings, cpu_session_options
from harness.prep.tensors import ortvalues_over

from .base import CORRECTNESS_GATE, LiveSessions, Prepared, Target, TargetOption
from .cpu_faults import (
    FAILED_REGISTRATION,
    FALLBACK_STAGES,
    FAULT_HELP,
    fault_plan,
    faulted,
    not_upstream,
    parse_fault,
    pipeline_options,
    silent_copy,
)

if TYPE_CHECKING:
    from harness.contract.options import RunOptions

__all__ = ["TARGET", "CpuTarget", "fault_plan"]

# Default gates, each with the physics that sets its threshold. A worker's own overhead O
# (Python + numpy + onnxruntime + one session) measured ~26 MiB of USS and ~34 MiB of PSS on
# Linux x86_64 (2026-11); the weights W are shared in mapped mode and copied per session in heap
# mode. Measured there with W=256 MiB, N=4: USS ratio 0.09, PSS ratio 0.33, init ratio
# 0.02-0.07. The saving gates only apply once W clearly exceeds O (W >= 128 MiB) and, for
# memory, once two processes share the file: below that the ratios are honest but small.
# system_delta_ratio gets no gate: the machine's available memory moves with everything else
# running (it even went negative between repeats), so it is reported, not judged.
DEFAULT_GATES: tuple[tuple[str, str], ...] = (
    CORRECTNESS_GATE,
    (
        "fallback_workers==0",
        "The cpu target maps a local file on a healthy disk: a fall-back to the heap means the "
        "mapping path broke (not judged for runs that inject mapping failures).",
    ),
    (
        "mapped_uss_ratio<=0.5 if processes>=2 and weights_bytes>=128MiB",
        "Once two processes share the mapping its pages leave every worker's USS, so the ratio "
        "is about O/(O+W): ~0.17 at W=128 MiB, O=26 MiB. Above 0.5 the weights are not shared.",
    ),
    (
        "mapped_pss_ratio<=0.8 if processes>=2 and weights_bytes>=128MiB",
        "PSS charges a shared page 1/N to each of N sharers: the ratio is (W/N+O)/(W+O), about "
        "0.6 at N=2, W=128 MiB, O=34 MiB; 0.8 leaves room for noise and still catches no "
        "sharing (~1.0).",
    ),
    (
        "init_ratio<=0.5 if weights_bytes>=128MiB",
        "Mapping costs the same whatever the weights size while the heap path reads every byte "
        "(256 MiB took ~0.5 s per worker vs ~15 ms mapped); session creation is common to both "
        "and workers contend for the disk, hence 0.5 rather than ~0.",
    ),
)

#: Windows has no PSS; private bytes (commit charge) leave out read-only file views entirely.
WINDOWS_PRIVATE_GATE = (
    "mapped_private_ratio<=0.6 if processes>=2 and weights_bytes>=128MiB",
    "Windows private bytes exclude shared read-only file views, so mapped workers keep only their "
    "overhead O: the ratio is about O/(O+W), 0.3-0.45 for O = 60-100 MiB at W = 128 MiB. A sample "
    "of the wrong process (the venv launcher) or copied weights give ~1.0.",
)

#: Worst last: a worker whose sessions took several paths records the worst.
_PATH_RANK = {PathTaken.MAPPED: 0, PathTaken.HEAP: 1, PathTaken.FALLBACK: 2}


def prepared_cpu_models(models: list[PreparedModel], opts: RunOptions | None = None) -> Prepared:
    """What the cpu and ort-native targets hand the runner: every model's weights file."""
    from harness.prep.generated import size_note

    source = " + ".join(m.source for m in models)
    notes = []
    built = models[0].weights_bytes
    if opts is not None and not opts.models and (note := size_note(opts.model_size, built, models[0].source)):
        notes.append(note)
    for m in models:
        unstable = m.extra.get("nondeterministic") or {}
        if unstable:
            notes.append(
                f"{m.source}: output(s) {', '.join(unstable)} differ between two runs of ORT's own reference "
                "(non-deterministic model): workers' values for them are checked by shape only."
            )
        grown = optimizer_growth(m)
        if grown:
            notes.append(grown)
        if m.extra.get("lifted_constants"):
            notes.append(
                f"{m.source}: {m.extra['lifted_constants']} Constant-node tensor(s) of 1 KiB or more were "
                "lifted into initializers so they can be mapped."
            )
    if len(models) > 1:
        notes.append(
            "The pipeline's models are prepared one by one, each into a weights file of its own: tensors they "
            "share in the source are held once per model, mapped or copied."
        )
    if models[0].extra.get("optimized_offline"):
        notes.append(
            "User models are optimized once by ORT (level all) before their weights are externalised; "
            "sessions load the optimized graph with graph optimizations disabled, so no optimizer can "
            "rewrite a weight handed over by name."
        )
    return Prepared(
        models[0],
        sum(m.weights_bytes for m in models),
        [m.weights_path for m in models],
        source=source,
        models=models,
        notes=notes,
        file_bytes=sum(m.weights_path.stat().st_size for m in models),
        gathered_bytes=sum(m.extra.get("gathered_bytes") or 0 for m in models),
    )


def optimizer_growth(model: PreparedModel) -> str:
    """The note for weights ORT's offline optimizer made larger than the model file's (an
    NCHWc reorder turned 6.2 MiB of initializers into 9.2 MiB), "" when they did not grow."""
    from harness.core.units import fmt_bytes

    before = model.extra.get("source_weights_bytes")
    if not before or model.weights_bytes <= before * 1.05:
        return ""
    return (
        f"{model.source}: ORT's optimizer made the weights larger: {fmt_bytes(before)} of the model's tensors "
        f"became {fmt_bytes(model.weights_bytes)} (layouts such as NCHWc blocks, constants folded into wider "
        "types); the mapped file holds them as the sessions use them, and every heap session copies all of them."
    )


class CpuTarget(Target):
    name = "cpu"
    summary = "mapper_impl + ORT CPU EP, weights handed over in place (default)"
    has_control = True
    options = (
        TargetOption("fault", "--fault", {}, FAULT_HELP, parse=parse_fault, metavar="STAGE[=K]", repeat=True),
        TargetOption(
            "fallback_stages",
            "--fallback-stages",
            "upstream",
            "which failed stages fall back to one direct read: upstream (register, create: a failed "
            "mapping step fails the session, as the EP's single-context path) or all (map too: lenient, "
            "not upstream behaviour, and labelled so)",
            parse=str,
            choices=tuple(FALLBACK_STAGES),
        ),
        TargetOption(
            "failed_registration",
            "--failed-registration",
            "stale",
            "what becomes of a registration whose fd could not be had: stale (upstream: left registered, "
            "never undone, reported; the later requests are still made) or undo (onnxruntime-qnn PR #337's "
            "unmerged proposal: undone, mapping disabled for the context; not upstream behaviour)",
            parse=str,
            choices=FAILED_REGISTRATION,
        ),
        TargetOption(
            "mapping_scope",
            "--mapping-scope",
            "session",
            "who shares one mapping: session (upstream: one file mapper per backend manager, i.e. per "
            "session) or process (one mapping per file per process: our extension)",
            parse=str,
            choices=("session", "process"),
        ),
        TargetOption(
            "sweep_deregistrations",
            "--sweep-deregistrations",
            False,
            "keep failed deregistrations and retry them at teardown (our extension; upstream returns "
            "MEM_ALLOC and forgets them: a leaked registration, which the worker reports)",
        ),
        TargetOption(
            "map_failures", "--map-failures", 0, "shorthand for --fault map=K", parse=int_at_least(0), metavar="K"
        ),
        TargetOption(
            "max_attempts",
            "--max-attempts",
            1,
            "mapping attempts before the direct read (upstream never "
            "retries the mapping: 1; more is an opt-in extension)",
            parse=positive_int,
            metavar="N",
        ),
    )

    def prepare(self, opts, progress) -> Prepared:
        from harness.prep.models import prepare_cpu_models  # the parent's: workers never prepare

        return prepared_cpu_models(prepare_cpu_models(opts, progress, target=self.name), opts)

    def mapped_may_copy(self, opts) -> bool:
        plan = fault_plan(opts.target_options)
        failing = plan is not None and any(
            (plan.map_failures, plan.register_failures, plan.create_failures, plan.register_at)
        )
        return failing or silent_copy(opts.target_options)

    def notes(self, opts) -> list[str]:
        extensions = [f"Not upstream behaviour: {text}." for text in not_upstream(opts.target_options)]
        return [*super().notes(opts), *extensions]

    def default_gates(self, opts) -> list[tuple[str, str]]:
        if faulted(opts.target_options):
            return [CORRECTNESS_GATE]  # fall-backs are expected: correctness only
        if sys.platform == "win32":  # no PSS on Windows: a PSS gate would always be "not measured"
            return [
                WINDOWS_PRIVATE_GATE if expr.startswith("mapped_pss_ratio") else (expr, why)
                for expr, why in DEFAULT_GATES
            ]
        return list(DEFAULT_GATES)

    def create_sessions(self, spec, models: list[PreparedModel], record) -> LiveSessions:
        """One `mapper_impl.load_context` per session, as the EP loads one context: map (shared
        by every session of the process) -> register each weight region -> create the ORT
        session over OrtValues pointing into the regions; a failed stage falls back to exactly
        one direct read. init = load (map, register, fallback) + create (sessions). A pipeline
        (several models) gets one session per model in each of the M session groups."""
        import numpy  # noqa: F401 - imported before the clock starts: an import is not a load
        import onnxruntime  # noqa: F401

        from harness.prep.tensors import warm_numpy_binding
        from mapper_impl import ContextLoadError, load_context

        warm_numpy_binding()  # the binding's one-time numpy set-up is part of importing it

        for model in models:
            model.check_weights_file()  # truncated since the parent prepared it: a clear error, not a bad read
        settings = spec.session_settings()
        pipeline = _pipeline_options(spec)
        live = LiveSessions()
        record.load_s = record.create_s = 0.0
        record.map_attempts = 0
        record.private_copy_bytes = 0
        record.stale_registrations = 0
        copying = silent_copy(spec.options) and spec.mode == Mode.MAPPED
        stages = []
        for _ in range(spec.sessions):
            group = []
            for model in models:
                creating = _SessionFactory(model, settings, silent_copy=copying)
                path, regions = (
                    str(model.weights_path),
                    [(t.offset, t.length) for t in model.tensors],
                )  # the caller's input
                phases.mark("load")  # the observer's phase change, before the clock
                t0 = time.perf_counter()
                try:
                    ctx = load_context(
                        path,
                        regions,
                        creating,
                        disable_file_mapped_weights=disable_flag(spec.mode),
                        read_copy="transient",  # the direct read's copy is freed once the session exists
                        **pipeline,
                    )
                except ContextLoadError as err:  # the session fails (upstream): its row keeps every error
                    _record_failure(record, err)
                    raise
                _account(record, ctx, creating.seconds, time.perf_counter() - t0)
                session, keepalive = ctx.value
                group.append(session)
                live.keepalive.extend(keepalive)
                live.closers.append(_closer(ctx, record))
                stages.append(ctx.fallback_stage)
            live.add_group(group)
        record.fallback_stage = next((s for s in stages if s), "")
        record.weights_bytes = sum(m.weights_bytes for m in models)
        return live


def _pipeline_options(spec) -> dict:
    """`load_context` arguments from the worker's options: the injected faults (the mapping
    pipeline's: heap mode, option "1", never runs it), which failed stages fall back and what
    becomes of a failed registration (upstream's unless opted out), the opt-in mapping retry,
    the mapping scope and the opt-in deregistration sweep."""
    from mapper_impl import RetryPolicy

    attempts = spec.options.get("max_attempts", 1)
    return {
        "faults": fault_plan(spec.options) if spec.mode == Mode.MAPPED else None,
        "retry": RetryPolicy(attempts) if attempts > 1 else None,
        "scope": spec.options.get("mapping_scope", "session"),
        "sweep_deregistrations": bool(spec.options.get("sweep_deregistrations")),
        **pipeline_options(spec.options),
    }


def _account(record, ctx, create_s: float, total_s: float) -> None:
    """One load's figures into the worker's record: times, attempts, errors, path, copies."""
    record.stale_registrations += ctx.stale_registrations
    record.create_s += create_s
    record.load_s += total_s - create_s
    # the most attempts one load needed: summed over models and sessions, a pipeline without a
    # single retry would read as "mapped after a retry"
    record.map_attempts = max(record.map_attempts, ctx.map_attempts)
    record.map_errors.extend(str(e) for e in ctx.errors)
    if ctx.path_taken != PathTaken.MAPPED:  # the runtime's own copy (the read copy is gone)
        record.private_copy_bytes += ctx.weights.size
    if _PATH_RANK[ctx.path_taken] >= _PATH_RANK.get(record.path_taken, -1):
        record.path_taken = ctx.path_taken


def _record_failure(record, err) -> None:
    """A load that failed (a mapping step's failure, or the direct read's too): the mapping
    attempts it made and every stage's error, for the row."""
    record.map_errors.extend(str(e) for e in err.errors)
    attempts = sum(1 for e in err.errors if (e.attempt, e.stage) == ("mapped", "map"))
    record.map_attempts = max(record.map_attempts or 0, attempts or 1)


def _closer(ctx, record):
    """The teardown of one load, then its late release callbacks counted into the worker's
    record (those planned for teardown arrive during it: the final record has them all)."""

    def close() -> None:
        ctx.close()
        record.late_releases = (record.late_releases or 0) + ctx.late_release_callbacks

    return close


class _SessionFactory:
    """The ``create`` stage: an ORT CPU session whose initializers are OrtValues over the region
    views (in place: no copy, no page read), of whatever element type (bfloat16, float8, packed
    int4...), timed (a create fault may call it twice: an injected failure first reads every
    page of the regions, mapper_impl's model of QNN failing late, after this returns, so in the
    load time; the failed attempt's mapping stays mapped until the fallback session exists).
    On a direct read (heap, fallback) the runtime
    first makes its own copy of the read buffer, as QNN keeps its own copy of the context
    binary, and the OrtValues point into that: the read copy is freed after creation. With
    ``silent_copy`` a mapped session does the same (onnxruntime-qnn #677: SSR recovery went back
    to a direct read without a log line).

    The session options are made before the clock, as the peer target makes its own (a second
    call, after a failed create, makes fresh ones: a handed-over initializer is added once)."""

    def __init__(self, model: PreparedModel, settings: SessionSettings, *, silent_copy: bool = False) -> None:
        self.model = model
        self.settings = settings
        self.seconds = 0.0
        self._options = cpu_session_options(settings, level=model.session_level)
        import onnxruntime as ort  # bound before the clock, as the peer's call is

        self._session, self._onnx = ort.InferenceSession, str(model.onnx_path)
        #: `--fault silent-copy`: a mapped session copies the weights anyway and says nothing
        #: (not in private_copy_bytes, no error): only the memory figures can tell
        self.silent_copy = silent_copy

    def __call__(self, weights, views: list) -> tuple:
        phases.mark("create")
        try:
            t0 = time.perf_counter()
            so, self._options = self._options, None
            if so is None:
                so = cpu_session_options(self.settings, level=self.model.session_level)
            keepalive: list = []
            if weights.path_taken != PathTaken.MAPPED or self.silent_copy:
                runtime_copy = bytearray(weights.buffer)  # the runtime's own copy
                keepalive.append(runtime_copy)
                whole = memoryview(runtime_copy).toreadonly()
                views = [whole[t.offset : t.offset + t.length] for t in self.model.tensors]
            else:
                whole = weights.buffer
            keepalive.extend(ortvalues_over(self.model.tensors, views, whole, so.add_initializer))
            session = self._session(self._onnx, so, providers=["CPUExecutionProvider"])
            self.seconds += time.perf_counter() - t0
            return session, keepalive
        except BaseException:
            phases.mark("load")  # the direct read after a failed create
            raise


TARGET = CpuTarget()
