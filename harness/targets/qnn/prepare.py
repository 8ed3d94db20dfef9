"""The qnn target's models: the generated QDQ chain or a user's model compiled as it is, or an EPContext model."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.cache import default_cache_dir
from harness.core.errors import CorruptEntry, InputError, QnnUnavailableError
from harness.core.files import copy_file, real_path
from harness.prep.cachekeys import PREP_VERSION, source_key
from harness.prep.epcontext import EpContextModel, epcontext_nodes, inspect_epcontext
from harness.prep.externalise import link_external_data
from harness.prep.folder import PreparedModel, cached_model
from harness.prep.inputs import InputRequest
from harness.prep.models import resolve_feeds
from harness.prep.onnxfile import load_onnx, ort_reason
from harness.prep.pipeline import check_pipeline_request, resolve_models
from harness.prep.reference import load_reference, refuse_unverifiable, save_reference, write_reference

from .child import StatusCallback, run_child
from .compile import compile_epcontext, qnn_log_dir
from .ep import qnn_platform_supported, register_qnn_ep
from .eplog_segments import flush_streams
from .estimate import CompilePlan
from .partitions import partitions_of
from .qdq import make_feeds, make_qdq_model, reference_output
from .quantize import (
    CALIBRATION_SIZE,
    MIN_COSINE,
    QuantizeSpec,
    calibration_feeds,
    check_quantized,
    quantize_qdq,
    refuse_quantized,
)
from .shapes import fold_if_still_dynamic, with_static_shapes


def generated_qdq(size: int, cache_dir: Path) -> PreparedModel:
    """The default qnn source model: a static-shape uint8 QDQ chain with its CPU reference."""

    def build(tmp: Path) -> PreparedModel:
        info = make_qdq_model(tmp / "model.onnx", size)
        feeds = make_feeds(info)
        save_reference(tmp / "reference.npz", feeds, {info["output_name"]: reference_output(tmp / "model.onnx", feeds)})
        source = f"generated:qdq-matmul-chain:{info['layers']}x{info['dim']}x{info['dim']}xuint8"
        return PreparedModel(
            tmp,
            source,
            [],
            {info["input_name"]: info["input_shape"]},
            {info["input_name"]: 1},
            [info["output_name"]],
            info["weights_bytes"],
            output_types={info["output_name"]: 1},
            extra={"quant_step": info["output_scale"]},
        )

    return cached_model(cache_dir / f"qdq-chain-{size}-s0", build)


def _inline_model(
    tmp: Path, path: Path, graph: Any, inputs: list, shapes: dict, weights_bytes: int, onnx_file: str, **kwargs: Any
) -> PreparedModel:
    """A prepared model whose weights stay where the user's model keeps them."""
    output_types = {o.name: o.type.tensor_type.elem_type for o in graph.graph.output}
    return PreparedModel(
        tmp,
        str(path),
        [],
        shapes,
        {i.name: i.onnx_type for i in inputs},
        list(output_types),
        weights_bytes,
        output_types=output_types,
        onnx_file=onnx_file,
        **kwargs,
    )


def prepare_qnn_source(
    path: Path,
    request: Any,
    settings: Any,
    cache_dir: Path,
    quantize: QuantizeSpec | None = None,
    on_status: StatusCallback | None = None,
) -> PreparedModel:
    """A user's model for the qnn target, compiled AS IT IS (or its QDQ model with ``quantize``): the
    folder holds the float model's CPU reference and, where inputs had to be fixed, a shape-fixed copy."""
    from harness.prep.inputs import fixed_shape_copy

    quantize = quantize or QuantizeSpec()
    label = f"--model {path}"
    graph = load_onnx(path, external_data=False)
    if quantize.enabled:
        refuse_quantized(graph, label)  # before any work: quantize_static cannot quantize it again
    key = source_key(
        path,
        graph,
        {
            "request": request.key(),
            "prep": PREP_VERSION,
            "qnn_source": 3,  # 2: internal shapes inferred again; 3: folded where still dynamic, quantize fixes
            "session": settings.to_dict(),
            **quantize.key(),
        },
    )

    def build(tmp: Path) -> PreparedModel:
        import onnx

        inputs, shapes, feeds = resolve_feeds(graph, request, label)
        onnx_file = str(real_path(path))
        if any(i.dims != shapes[i.name] for i in inputs):  # dynamic: the compiler needs a static copy
            onnx_file = Path(path).name  # relative: the folder moves when the cache publishes it
            onnx.save(with_static_shapes(fixed_shape_copy(graph, shapes)), str(tmp / onnx_file))
            link_external_data(path, graph, tmp)
            onnx_file = fold_if_still_dynamic(tmp / onnx_file).name
        extra = {}
        if quantize.enabled:
            if on_status is not None:
                on_status(f"quantizing {Path(path).name} (qdq, {quantize.calibration_size} calibration inputs)")
            calibration = calibration_feeds(inputs, shapes, feeds, set(request.values), quantize.calibration_size)
            onnx_file = _quantized(tmp, path, onnx_file, calibration, label)
            extra = {"min_cosine": MIN_COSINE, "quantized": f"qdq, {quantize.calibration_size} calibration inputs"}
        model = _inline_model(tmp, path, graph, inputs, shapes, 0, onnx_file, extra=extra)
        write_reference(model, Path(path), feeds, settings, level="all", label=label, on_status=on_status)
        if quantize.enabled:
            check_quantized(model.onnx_path, *load_reference(model), label, model.nondeterministic)
        return model

    return cached_model(cache_dir / f"qnnsrc-{path.stem}-{key}", build, outside=(str(real_path(path)),))


def _quantized(tmp: Path, path: Path, onnx_file: str, calibration: list, label: str) -> str:
    """The QDQ model of the source (``onnx_file``: in ``tmp``, or the user's own absolute path)."""
    source = Path(onnx_file) if Path(onnx_file).is_absolute() else tmp / onnx_file
    return quantize_qdq(source, tmp / f"{Path(path).stem}_qdq.onnx", calibration, label).name


def prepare_epcontext(
    path: Path, request: Any, job: dict, cache_dir: Path, on_status: StatusCallback | None = None
) -> tuple[PreparedModel, EpContextModel]:
    """A pre-compiled EPContext model measured where it is; its reference is its own first inference."""
    label = f"--model {path}"
    graph = load_onnx(path, external_data=False)
    info = inspect_epcontext(path, graph, label)
    key = source_key(path, graph, {"request": request.key(), "prep": PREP_VERSION, "job": job}, files=info.bins)
    log_path = qnn_log_dir(cache_dir) / f"ctx-{path.stem}-{key[:16]}-reference.log"

    def build(tmp: Path) -> PreparedModel:
        inputs, shapes, feeds = resolve_feeds(graph, request, label)
        model = _inline_model(
            tmp,
            path,
            graph,
            inputs,
            shapes,
            info.context_bytes,
            str(real_path(path)),
            extra={"reference_kind": "qnn-heap", "context_bins": [str(b) for b in info.bins]},
        )
        save_reference(model.reference_path, feeds, {})
        model.save()  # the child reads the manifest
        result = run_child(dict(job, kind="reference", folder=str(tmp)), log_path, on_status=on_status)
        if not result.get("ok"):
            what = "crashed" if result.get("stage") == "crash" else f"cannot {result.get('stage', 'run')} it"
            raise InputError(
                f"{label}: the QNN EP {what} (file mapping disabled, for the reference): "
                f"{ort_reason(str(result.get('error') or ''))} (EP log: {log_path})"
            )
        if result.get("nondeterministic"):
            model.extra["nondeterministic"] = result["nondeterministic"]
        refuse_unverifiable(*load_reference(model), model.extra.get("nondeterministic"), label)
        with contextlib.suppress(OSError, InputError):
            copy_file(log_path, tmp / "reference.log", "QNN log")
        return model

    return cached_model(cache_dir / f"qnnctx-{path.stem}-{key}", build, outside=(str(real_path(path)),)), info


@contextlib.contextmanager
def native_stdout_to_stderr() -> Iterator[None]:
    """The QNN libraries print banners to fd 1 on load: send them to stderr, not the summary's stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        flush_streams()  # the libraries write through C stdio: flush while fd 1 is redirected
        os.dup2(saved, 1)
        os.close(saved)


@dataclass
class QnnModel:
    """One model a qnn worker loads: the prepared folder (reference) and the EPContext file."""

    model: PreparedModel
    onnx_path: Path  # the EPContext model the sessions load
    bins: list[Path]  # its context binaries
    context_bytes: int
    compiled: bool  # True: compiled by the harness; False: the user's own EPContext model
    shares_context: bool = False
    log: Path | None = None  # the EP's log of the compile (or of the reference run)
    partitions: int = 1  # EPContext nodes (more than one: loaded with `partitions.load_level`)


def prepare_qnn(opts: Any, progress: Any = None) -> list[QnnModel]:
    """Every model of the run, ready for the QNN EP: compiled, or the user's own EPContext model;
    every problem the user can fix is an InputError."""
    compiler = qnn_compiler(opts, progress)
    options = opts.target_options
    quantize = QuantizeSpec(options.get("quantize", "none"), options.get("calibration_size", CALIBRATION_SIZE))
    cache_dir = compiler.cache_dir
    if not opts.models:
        if quantize.enabled:
            raise InputError("--quantize qdq: needs --model (the generated model is already a QDQ model)")
        source = generated_qdq(opts.model_size, cache_dir)
        return [compiler.compiled(source, source.source)]
    return _user_models(opts, compiler, quantize)


def qnn_compiler(opts: Any, progress: Any = None) -> _Compiler:
    """The run's compiler, once this platform and the QNN EP are known to be usable (else InputError)."""
    supported, why = qnn_platform_supported()
    if not supported:
        raise InputError(f"--target qnn: {why}")
    try:
        with native_stdout_to_stderr():
            register_qnn_ep()
    except QnnUnavailableError as err:
        raise InputError(f"--target qnn: {err}") from None
    on_status, say = (progress.step, progress.note) if progress is not None else (None, None)
    return _Compiler(opts, opts.cache_dir or default_cache_dir(), on_status, say)


@dataclass
class _Compiler:
    """Compiles a prepared source model with the run's QNN settings (`compile_epcontext`)."""

    opts: Any
    cache_dir: Path
    on_status: StatusCallback | None
    say: StatusCallback | None = None  # a permanent line (the long-compile notice)

    @property
    def embed_mode(self) -> int:
        return self.opts.target_options.get("embed_mode", 0)

    @property
    def backend(self) -> str:
        return self.opts.target_options.get("backend_type", "htp")

    def compiled(self, source: PreparedModel, label: str) -> QnnModel:
        settings = self.opts.session_settings()
        c = compile_epcontext(
            source.onnx_path,
            source.folder / "qnn",
            embed_mode=self.embed_mode,
            backend_type=self.backend,
            label=label,
            provider_options=settings.provider_options,
            session_config=settings.config,
            check_folder=source.folder,
            log_dir=qnn_log_dir(self.cache_dir),
            on_status=self.on_status,
            plan=_plan_of(self),
        )
        return QnnModel(
            source,
            c.onnx_path,
            c.bin_paths,
            int(c.context_bytes),
            True,
            log=c.onnx_path.parent / "compile.log",
            partitions=partitions_of(c.onnx_path),
        )


def _plan_of(compiler: _Compiler) -> CompilePlan | None:
    """The long-compile notice's plan: every group's N (modes x repeats x process counts)."""
    if compiler.say is None:
        return None
    opts = compiler.opts
    groups = [n for n in opts.processes for _ in opts.modes for _ in range(opts.repeat)]
    return CompilePlan(compiler.cache_dir, groups, compiler.say)


def _user_models(opts: Any, compiler: _Compiler, quantize: QuantizeSpec) -> list[QnnModel]:
    """The user's models, each compiled or, already EPContext, measured where it is."""
    settings = opts.session_settings()
    models = resolve_models(opts.models)
    request = InputRequest.of(opts)
    check_pipeline_request(models.paths, request)
    job = {
        "backend_type": compiler.backend,
        "provider_options": settings.provider_options,
        "session_config": settings.config,
        "intra_op_threads": settings.intra_op_threads,
        "share_ep_contexts": bool(opts.target_options.get("share_ep_contexts")) or models.genai_qnn,
    }
    out = []
    for path in models.paths:
        graph = load_onnx(path, external_data=False)
        part = request.for_model(graph)
        if epcontext_nodes(graph):
            model, info = prepare_epcontext(path, part, job, compiler.cache_dir, compiler.on_status)
            out.append(
                QnnModel(
                    model,
                    info.path,
                    info.bins,
                    info.context_bytes,
                    False,
                    info.shares_context,
                    log=model.folder / "reference.log",
                    partitions=info.nodes,
                )
            )
        else:
            source = prepare_qnn_source(path, part, settings, compiler.cache_dir, quantize, compiler.on_status)
            out.append(compiler.compiled(source, f"--model {path}"))
    return out


def _shared_note(name: str, why: str) -> str:
    """Why the workers load one binary per graph: the backend could not load the shared one."""
    from .simulator import is_simulator

    where = (
        "; onnxruntime-qnn 2.7.0's HTP simulator dies in contextCreateFromBinary on a two-graph binary"
        if is_simulator()
        else ""
    )
    return (
        f"The prefill and decode graphs compiled into one weight-sharing context binary ({name}), but this "
        f"QNN backend could not load it ({why}{where}): they were compiled into one binary each, so every "
        "session loads the weights twice."
    )


def prepare_generate(opts: Any, progress: Any) -> Any:
    """The decoder (generated or the user's) as static prefill and decode graphs compiled into one
    weight-sharing binary, checked to load and run in a child; where the backend cannot load that
    binary (the simulator), one binary per graph, said in a note. The reference model is the
    dynamic decoder: the parent's reference ids come from it."""
    from harness.cache import cached_build
    from harness.prep.decoder import DEFAULT_NEW_TOKENS, prompt_length
    from harness.prep.models import prepare_cpu_models
    from harness.targets.base import Prepared

    from .compile import compile_shared

    compiler = qnn_compiler(opts, progress)
    reference = prepare_cpu_models(opts, progress)[0]
    tokens = prompt_length(opts)
    context = tokens + (opts.new_tokens or DEFAULT_NEW_TOKENS)
    folder = compiler.cache_dir / f"qnn-llm-{reference.folder.name}-p{tokens}-c{context}"
    graphs = cached_build(folder, lambda scratch: _static_pair(reference.onnx_path, scratch, tokens, context), _pair)
    logs, options = qnn_log_dir(compiler.cache_dir), dict(opts.session_settings().provider_options)
    common = {"backend_type": compiler.backend, "provider_options": options, "on_status": compiler.on_status}
    label = f"the decoder {reference.source}"
    compiled = compile_shared(graphs, folder.parent, label=label, log_dir=logs, **common)
    job = {"kind": "generate", "onnx": [str(c.onnx_path) for c in compiled], "share_ep_contexts": True}
    job |= {"backend_type": compiler.backend, "provider_options": options}
    job |= {"prompt": [1] * tokens, "new_tokens": 2}
    loaded = run_child(job, logs / f"{folder.name}-shared-load.log", on_status=compiler.on_status)
    notes, shared = [], compiled[0].bin_paths
    if not loaded.get("ok"):
        notes.append(_shared_note(shared[0].name, str(loaded.get("error") or loaded.get("stage"))))
        compiled = [compile_epcontext(g, folder.parent / "apart", label=label, log_dir=logs, **common) for g in graphs]
    bins = list(dict.fromkeys(b for c in compiled for b in c.bin_paths))
    onnx = [c.onnx_path for c in compiled]
    return Prepared(
        reference,
        sum(b.stat().st_size for b in bins),
        [*onnx, *bins],
        worker_options={"onnx": [str(p) for p in onnx], "share_ep_contexts": bool(loaded.get("ok"))},
        source=f"{reference.source} as QNN prefill ({tokens} tokens) and decode graphs, a {context - 1}-token KV cache",
        notes=notes,
        logs=[c.onnx_path.parent / "compile.log" for c in compiled],
    )


def _static_pair(src: Path, folder: Path, tokens: int, context: int) -> None:
    from .llm import static_graph

    static_graph(src, folder / "prefill.onnx", tokens=tokens, past=context - tokens)
    static_graph(src, folder / "decode.onnx", tokens=1, past=context - 1)


def _pair(folder: Path) -> list[Path]:
    graphs = [folder / "prefill.onnx", folder / "decode.onnx"]
    if not all(g.is_file() for g in graphs):
        raise CorruptEntry("a static graph is missing")
    return graphs
