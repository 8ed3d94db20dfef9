"""Pre-flight checks: every refusal that needs no model, made before a run spends minutes building one."""

from __future__ import annotations

import math

from harness.contract.options import PAGE_CACHE_MODES, RunOptions
from harness.core.argtypes import MIN_GENERATED_BYTES
from harness.core.errors import InputError
from harness.core.vocab import Mode, PageCache, Workload
from harness.runner.outdir import check_out
from harness.runner.resources import check_address_space, check_fd_limit
from harness.targets import get_target

WORKER_OVERHEAD_BYTES = 200 * 1024**2  #: Memory a worker needs beyond the weights (60-120 MiB measured).
RUNTIME_FLOOR_BYTES = 30 * 1024**2  #: One worker's memory without weights (29.6-29.8 MiB measured: docs/running.md).
MEMORY_BUDGET_SHARE = 0.85  #: Share of the available memory a run may plan to use before it is refused.
#: Weight copies of a heap session at its start-up peak: the read copy and the runtime's.
PEAK_COPIES_PER_HEAP_SESSION = 2


def copies_per_worker(opts: RunOptions) -> int:
    """Weight copies one worker may hold at its start-up peak (a fallback keeps its mapping beside them)."""
    falls_back = Mode.MAPPED in opts.modes and get_target(opts.target).mapped_may_copy(opts)
    if falls_back or Mode.HEAP in opts.modes:
        return opts.sessions_per_process * PEAK_COPIES_PER_HEAP_SESSION + (1 if falls_back else 0)
    return 1


def estimated_peak_bytes(opts: RunOptions, weights_bytes: int) -> int:
    """Memory the largest group needs at its start-up peak, with each worker's and the control's overhead."""
    from harness.runner.control import has_control

    target = get_target(opts.target)
    n = max(opts.processes)
    sessions = n * opts.sessions_per_process
    heap_like = Mode.HEAP in opts.modes or target.mapped_may_copy(opts)
    weights = sessions * PEAK_COPIES_PER_HEAP_SESSION * weights_bytes if heap_like else weights_bytes
    workers = n + (1 if has_control(target) else 0)
    return weights + workers * WORKER_OVERHEAD_BYTES


def expected_weights_bytes(opts: RunOptions) -> int:
    """Weights size known before any model is built or read."""
    if opts.models:
        total = 0
        for path in opts.models:
            try:
                files = [p for p in path.iterdir() if p.is_file()] if path.is_dir() else [path]
                total += sum(f.stat().st_size for f in files)
            except OSError:
                continue  # preparation reports the missing file
        return total
    return opts.model_size


def check_memory_budget(opts: RunOptions, weights_bytes: int, available: int) -> None:
    """Refuse before starting a run that would push the machine into swap or the OOM killer."""
    need = estimated_peak_bytes(opts, weights_bytes)
    if opts.memory_limit:  # the container stops a group at its limit: the machine never sees more
        need = min(need, opts.memory_limit)
    if need > available * MEMORY_BUDGET_SHARE:
        from harness.core.units import fmt_bytes

        raise InputError(
            f"--processes {max(opts.processes)} x {opts.sessions_per_process} session(s) needs about "
            f"{fmt_bytes(need)} at its start-up peak, more than {MEMORY_BUDGET_SHARE:.0%} of the "
            f"{fmt_bytes(available)} that is available; lower --processes, --sessions-per-process or --model-size"
        )


MAX_SHAPE_ELEMENTS = 2**48  #: Largest input tensor a --shape may ask for, in elements (numpy's own ceiling is 2**63).


def check_shapes_allocatable(shapes: dict[str, list[int]], available: int) -> None:
    """A --shape whose input (a byte per element at least) cannot fit the available memory is
    refused now, not after the model was externalised."""
    for name, dims in shapes.items():
        elements = math.prod(dims)
        if elements > MAX_SHAPE_ELEMENTS or elements > available * MEMORY_BUDGET_SHARE:
            from harness.core.units import fmt_bytes

            raise InputError(
                f"--shape {name}={'x'.join(map(str, dims))}: an input of {min(elements, 10**300):.4g} elements needs "
                f"at least {fmt_bytes(min(elements, 10**300))} (1 byte each) but {fmt_bytes(available)} is available"
            )


def check_gates_fit_modes(opts: RunOptions) -> None:
    """A gate comparing mapped with heap cannot be judged on a one-mode run: refused before work."""
    if len(set(opts.modes)) != 1:
        return
    from harness.core.gates import needs_both_modes, parse_gate

    for expr in opts.gates:
        if needs_both_modes(parse_gate(expr)):
            raise InputError(
                f"gate {expr!r} compares mapped with heap, but --modes is {opts.modes[0]} only: "
                "run both modes or drop the gate"
            )


def check_options(opts: RunOptions) -> None:
    """Everything that can be refused before work starts (target-independent rules first)."""
    if opts.model is None and opts.model_size < MIN_GENERATED_BYTES:
        raise InputError(
            f"--model-size {opts.model_size}: the generated model needs at least 64 KiB of weights "
            "(sizes are bytes unless given a unit, e.g. 64MiB)"
        )
    if opts.models:  # a missing file is said first, before any stage starts
        from harness.prep.pipeline import resolve_models

        resolve_models(opts.models)
    if (opts.shapes or opts.free_dims or opts.input_values) and opts.model is None:
        flag = "--shape" if opts.shapes else "--free-dim" if opts.free_dims else "--input"
        raise InputError(f"{flag} fixes inputs of --model; the generated model has one static input")
    if opts.provider_options and not any(get_target(n).provider_ep for n in (opts.target, opts.peer) if n):
        from harness.targets import all_targets

        takers = [t for t in all_targets() if t.provider_ep]
        names = " or ".join(f"--target {t.name}" for t in takers)
        eps = ", ".join(f"{t.provider_ep}'s" for t in takers)
        raise InputError(f"--provider-option applies to {names} ({eps} provider options)")
    from harness.prep.sessions import check_provider_options

    check_provider_options(opts.provider_options)
    if opts.page_cache not in PAGE_CACHE_MODES:
        raise InputError(f"--page-cache {opts.page_cache}: expected one of {', '.join(PAGE_CACHE_MODES)}")
    if opts.page_cache == PageCache.COLD:
        from harness.runner.pagecache import check_cold_supported

        check_cold_supported()
    check_gates_fit_modes(opts)
    check_workload(opts)
    if opts.peer is not None:
        if opts.peer == opts.target:
            raise InputError(f"--peer {opts.peer}: the peer must be another target than --target")
        if Mode.MAPPED not in opts.modes:
            raise InputError("--peer is compared with the mapped mode: keep mapped in --modes")
    for name in filter(None, (opts.target, opts.peer)):
        get_target(name).check(opts)


def check_workload(opts: RunOptions) -> None:
    """The generate workload's options, and a decoder to run them on (its graph only)."""
    given = {"--prompt-tokens": opts.prompt_tokens, "--prompt-ids": opts.prompt_ids, "--new-tokens": opts.new_tokens}
    if opts.workload != Workload.GENERATE:
        if any(given.values()):
            raise InputError(f"{next(k for k, v in given.items() if v)} applies to --workload generate only")
        return
    if opts.prompt_ids and opts.prompt_tokens:
        raise InputError("--prompt-ids and --prompt-tokens both set the prompt: give one of them")
    loop = {"--shape": opts.shapes, "--free-dim": opts.free_dims, "--input": opts.input_values, "--runs": opts.runs}
    loop.update({"--warmup": opts.warmup, "--concurrency": opts.concurrency > 1})
    for flag, value in loop.items():
        if value:
            raise InputError(
                f"{flag} does not apply to --workload generate: its loop feeds the decoder and times tokens"
            )
    from harness.prep.decoder import DecoderIO, check_prompt, graph_io, graph_vocab

    if not opts.models:
        from harness.prep.llama import CONTEXT, VOCAB

        check_prompt(opts, VOCAB, CONTEXT)
        return
    from harness.prep.onnxfile import load_onnx
    from harness.prep.pipeline import resolve_models

    paths = resolve_models(opts.models).paths
    if len(paths) > 2:
        raise InputError(
            f"--workload generate runs a decoder, or its prefill and decode graphs; --model names {len(paths)}"
        )
    graphs = [load_onnx(path, external_data=False) for path in paths]
    ios = [DecoderIO.find(*graph_io(g), f"--model {p}") for p, g in zip(paths, graphs, strict=True)]
    if ios[0] != ios[-1]:
        raise InputError(f"--model {paths[-1]}: the decode graph's inputs and KV cache differ from {paths[0].name}'s")
    check_prompt(opts, graph_vocab(graphs[0]))


def check_memory_limit(opts: RunOptions, available: int) -> list[str]:
    """--memory-limit between a worker's runtime floor and the available memory, in a container
    this OS and user can make; returns the stale containers removed now."""
    if opts.memory_limit is None:
        return []
    from harness.core.units import fmt_bytes
    from harness.runner.container import check

    limit = fmt_bytes(opts.memory_limit)
    if opts.memory_limit > available:
        raise InputError(
            f"--memory-limit {limit}: more than the {fmt_bytes(available)} this machine has available "
            "(the machine would run out before the limit is reached)"
        )
    if opts.memory_limit < RUNTIME_FLOOR_BYTES:
        raise InputError(
            f"--memory-limit {limit}: below one worker's runtime floor ({fmt_bytes(RUNTIME_FLOOR_BYTES)}: "
            "the interpreter, numpy and onnxruntime with no weights), so no worker could start"
        )
    return check(opts.memory_limit)


def check_before_work(opts: RunOptions) -> list[str]:
    """Every refusal that needs no model; returns the killed runs' containers it removed."""
    from harness.cache import default_cache_dir
    from harness.runner.memory import system_available_bytes

    check_options(opts)
    available = system_available_bytes()
    check_shapes_allocatable(opts.shapes, available)
    check_memory_budget(opts, expected_weights_bytes(opts), available)
    check_fd_limit(max(opts.processes))
    check_address_space(expected_weights_bytes(opts), copies_per_worker(opts))
    check_out(opts.out, opts.cache_dir or default_cache_dir(), replace=opts.replace)
    return check_memory_limit(opts, available)
