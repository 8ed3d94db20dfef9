"""The qnn target's models: a generated QDQ uint8 chain or the user's model, compiled once by
the real QNN EP to an EPContext model (``*_ctx.onnx`` + ``*_qnn.bin``) and cached by content;
or the user's own pre-compiled EPContext model, measured where it is.

- A user's model is compiled AS IT IS (weights untouched, Constant nodes and all); only inputs
  with dynamic shapes get a shape-fixed copy of the graph, since the compiler needs static
  shapes. Its folder holds ``reference.npz``: the un-compiled model's output on ORT's CPU EP
  for a fixed input, which every worker compares with the QNN EP's output.
- Compilation runs in a child process (`child`): the QNN compiler can crash, and the EP's own
  log goes to a file named in every error. The compiled model must also load and run once, or
  it is refused: a partial compile the EP cannot load is found once, not in every worker.
- A pre-compiled EPContext model has no CPU original: its reference is its own first inference
  with file mapping disabled, also in a child process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cache import cached_build, default_cache_dir
from harness.core.errors import CorruptEntry, InputError, QnnUnavailableError
from harness.core.files import write_json_atomic
from harness.prep.cachekeys import PREP_VERSION, source_key
from harness.prep.epcontext import EpContextModel, epcontext_nodes, inspect_epcontext
from harness.prep.externalise import link_external_data
from harness.prep.folder import PreparedModel, cached_model
from harness.prep.inputs import model_inputs, shape_hint
from harness.prep.models import resolve_feeds
from harness.prep.onnxfile import external_data_files, load_onnx, ort_reason
from harness.prep.pipeline import check_pipeline_request, resolve_models
from harness.prep.reference import save_reference, write_reference

from .child import NOTHING_COMPILED, StatusCallback, run_child
from .ep import qnn_platform_supported, qnn_versions, register_qnn_ep
from .partitions import UPSTREAM_ERRORS, partitions_of
from .qdq import make_feeds, make_qdq_model, reference_output
from .quantize import CALIBRATION_SIZE, MIN_COSINE, QuantizeSpec, calibration_feeds, quantize_qdq
from .shapes import with_static_shapes
from .sharing import refusal
from .support import first_refused_op


@dataclass
class CompiledModel:
    """An EPContext model produced by `compile_epcontext` (paths are in out_dir)."""

    onnx_path: Path
    bin_paths: list[Path]
    context_bytes: int  # size of the .bin files, or of the context embedded in the onnx
    embed_mode: int
    source_sha256: str = ""
    compile_s: float = 0.0  # wall time of the compilation that produced it
    cached: bool = False  # True when this call reused an earlier compilation
    cpu_ops: list[str] = field(default_factory=list)  # nodes left outside QNN (e.g. boundary Q/DQ)


def _source_sha256(src: Path, model: Any) -> str:
    """Hash of the .onnx file and every external-data file it names (the compile's real input)."""
    h = hashlib.sha256()
    for f in [src, *external_data_files(src, model)]:
        h.update(f.name.encode() + b"\0")
        try:
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 22), b""):
                    h.update(block)
        except OSError as e:
            raise InputError(f"{src}: cannot read {f.name}: {e.strerror}") from None
    return h.hexdigest()


def qnn_log_dir(cache_dir: Path | None = None) -> Path:
    """Where the logs of the QNN child processes are kept (named in every error about them)."""
    return (cache_dir or default_cache_dir()) / "logs"


def _compile(
    src: Path,
    out_onnx: Path,
    embed_mode: int,
    backend_type: str,
    label: str,
    *,
    provider_options: dict | None = None,
    session_config: dict | None = None,
    check_folder: Path | None = None,
    log_path: Path,
    on_status: StatusCallback | None = None,
) -> float:
    """Compile in a child process (see `child`); returns seconds spent. Every failure is one
    InputError naming the user's model (``label``), the EP's reason and the log file."""
    result = run_child(
        {
            "kind": "compile",
            "src": str(src),
            "out": str(out_onnx),
            "embed_mode": embed_mode,
            "backend_type": backend_type,
            "provider_options": provider_options or {},
            "session_config": session_config or {},
            "check_folder": str(check_folder) if check_folder else "",
        },
        log_path,
        on_status=on_status,
    )
    if result.get("ok"):
        return float(result.get("compile_s") or 0.0)
    error = str(result.get("error") or "")
    where = f" (EP log: {log_path})"
    with contextlib.suppress(OSError):
        if (why := refusal(log_path.read_text(encoding="utf-8", errors="replace"), provider_options)) is not None:
            raise InputError(f"{label}: {why}{where}")
    if NOTHING_COMPILED in error:
        refused = None
        with contextlib.suppress(OSError):
            refused = first_refused_op(log_path.read_text(encoding="utf-8", errors="replace"))
        raise InputError(
            f"{label}: no node was assigned to QNN (the {backend_type} backend takes "
            "none of its ops as given; it needs static shapes and typically "
            "a QDQ-quantized model)" + (f"; the first op the EP refuses: {refused}" if refused else "") + where
        )
    if result.get("stage") == "crash":
        raise InputError(f"{label}: the QNN compiler crashed: {error}{where}")
    if result.get("stage") == "load" and any(e in error for e in UPSTREAM_ERRORS):
        parts = partitions_of(out_onnx) if out_onnx.is_file() else 0
        raise InputError(
            f"{label}: compiled into {parts or 'several'} QNN partitions; onnxruntime-qnn "
            f"{qnn_versions()['onnxruntime_qnn']} on this platform cannot load this multi-partition "
            f"EPContext model even with ORT's graph optimizations disabled: {ort_reason(error)}{where}"
        )
    if result.get("stage") in ("load", "run"):
        raise InputError(
            f"{label}: compiled for QNN, but the compiled model does not {result['stage']}: {ort_reason(error)}{where}"
        )
    raise InputError(f"{label}: QNN compilation failed: {ort_reason(error)}{_fix_hint(error, provider_options)}{where}")


#: The simulated HTP cannot finalize a float graph without a SoC to size its memory for.
_MEM_ALLOC = "MEM_ALLOC"


def _fix_hint(error: str, provider_options: dict | None) -> str:
    """What the user can change, for the compile errors whose fix is known."""
    if _MEM_ALLOC in error and "soc_model" not in (provider_options or {}):
        return (
            "; a float model on the simulated HTP needs a SoC to compile for: pass "
            "--provider-option soc_model=60, or quantize it first (--quantize qdq)"
        )
    return ""


def _context_files(onnx_path: Path) -> tuple[list[str], int]:
    """(context .bin names, bytes embedded in the onnx) of a compiled EPContext model."""
    bins: list[str] = []
    embedded = 0
    for node in (n for n in load_onnx(onnx_path, external_data=False).graph.node if n.op_type == "EPContext"):
        attrs = {a.name: a for a in node.attribute}
        blob = attrs["ep_cache_context"].s if "ep_cache_context" in attrs else b""
        if "embed_mode" in attrs and attrs["embed_mode"].i == 1:
            embedded += len(blob)
        elif blob and blob.decode() not in bins:
            bins.append(blob.decode())
    return bins, embedded


def _load_compiled(folder: Path, cached: bool = True) -> CompiledModel:
    """A compiled entry of the cache, checked: files present, .bin sizes as recorded."""
    try:
        m = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        onnx_path, bins = folder / m["onnx"], [folder / b for b in m["bins"]]
        if not onnx_path.is_file() or (
            m["embed_mode"] == 0 and sum(b.stat().st_size for b in bins) != m["context_bytes"]
        ):
            raise CorruptEntry("compiled files missing or of the wrong size")
        return CompiledModel(
            onnx_path,
            bins,
            m["context_bytes"],
            m["embed_mode"],
            m["source_sha256"],
            m["compile_s"],
            cached,
            m["cpu_ops"],
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CorruptEntry(f"unreadable compile manifest ({type(err).__name__})") from None


def compile_epcontext(
    src: Path,
    out_dir: Path,
    *,
    embed_mode: int = 0,
    backend_type: str = "htp",
    label: str | None = None,
    provider_options: dict | None = None,
    session_config: dict | None = None,
    check_folder: Path | None = None,
    log_dir: Path | None = None,
    on_status: StatusCallback | None = None,
) -> CompiledModel:
    """Compile `src` for QNN into an EPContext model under `out_dir`, reusing an earlier result.

    The entry is ``out_dir/<stem>_em<mode>-<backend>-<key>/``: ``<stem>_em<mode>_ctx.onnx``
    (+ the ``..._qnn.bin`` the EP names, for embed_mode 0), ``compile.log`` (the EP's own log)
    and ``manifest.json``. Built and published by the model cache (`harness.cache.cached_build`):
    a reader never sees half a compilation, and a changed source (hash of the .onnx and every
    external-data file) or other provider options get a new entry. The compiler runs in a child
    process (`child`); with ``check_folder`` (a prepared model with a reference input) the result
    must also load and run once. ``label`` names the user's file in errors (default: ``src``).
    """
    if embed_mode not in (0, 1):
        raise ValueError(f"embed_mode must be 0 (context in a .bin) or 1 (in the onnx), got {embed_mode!r}")
    src, out_dir = Path(src), Path(out_dir)
    label = label or str(src)
    model = load_onnx(src, external_data=False, label="model")
    dynamic = [
        (i, i.dims)
        for i in model_inputs(model)
        if i.kind == "tensor" and (i.dims is None or not all(isinstance(d, int) for d in i.dims))
    ]
    if dynamic:
        raise InputError(f"{label}: {shape_hint(dynamic)} (QNN needs static shapes)")
    sha = _source_sha256(src, model)
    extra = json.dumps({"p": provider_options or {}, "c": session_config or {}}, sort_keys=True)
    key = hashlib.sha256(f"{sha}|{extra}".encode()).hexdigest() if provider_options or session_config else sha
    stem = f"{src.stem}_em{embed_mode}"
    log_path = (log_dir or out_dir) / f"{stem}-{backend_type}-{key[:16]}-compile.log"

    def build(scratch: Path) -> None:
        compile_s = _compile(
            src,
            scratch / f"{stem}_ctx.onnx",
            embed_mode,
            backend_type,
            label,
            provider_options=provider_options,
            session_config=session_config,
            check_folder=check_folder,
            log_path=log_path,
            on_status=on_status,
        )
        bins, embedded = _context_files(scratch / f"{stem}_ctx.onnx")
        if not embedded and not bins:
            raise InputError(f"{label}: no node was assigned to QNN (no EPContext node)")
        ops = [
            n.op_type
            for n in load_onnx(scratch / f"{stem}_ctx.onnx", external_data=False).graph.node
            if n.op_type != "EPContext"
        ]
        with contextlib.suppress(OSError):
            shutil.copyfile(log_path, scratch / "compile.log")
        write_json_atomic(
            scratch / "manifest.json",
            {
                "source_sha256": sha,
                "embed_mode": embed_mode,
                "backend_type": backend_type,
                "onnx": f"{stem}_ctx.onnx",
                "bins": bins,
                "context_bytes": embedded + sum((scratch / b).stat().st_size for b in bins),
                "compile_s": compile_s,
                "cpu_ops": ops,
                "versions": qnn_versions(),
                "provider_options": provider_options or {},
            },
        )

    built: list[bool] = []

    def load(folder: Path) -> CompiledModel:
        return _load_compiled(folder, cached=not built)

    def build_once(scratch: Path) -> None:
        build(scratch)
        built.append(True)

    return cached_build(out_dir / f"{stem}-{backend_type}-{key[:16]}", build_once, load)


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
    """A prepared model whose weights stay where the user's model keeps them (nothing
    externalised): what the qnn target measures, its compile input or its EPContext model."""
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
    """A user's (uncompiled) model for the qnn target: compiled AS IT IS, weights untouched,
    unless ``quantize`` asks for its QDQ model (`quantize`). The folder holds the CPU reference
    of the float model and, when input shapes had to be fixed for the compiler, a shape-fixed
    copy of the graph (its external data linked, not copied), and the quantized model."""
    from harness.prep.inputs import fixed_shape_copy

    quantize = quantize or QuantizeSpec()
    label = f"--model {path}"
    graph = load_onnx(path, external_data=False)
    key = source_key(
        path,
        graph,
        {
            "request": request.key(),
            "prep": PREP_VERSION,
            "qnn_source": 2,  # 2: internal shapes inferred again (shapes.with_static_shapes)
            "session": settings.to_dict(),
            **quantize.key(),
        },
    )

    def build(tmp: Path) -> PreparedModel:
        import onnx

        inputs, shapes, feeds = resolve_feeds(graph, request, label)
        onnx_file = str(Path(path).resolve())
        if any(i.dims != shapes[i.name] for i in inputs):  # dynamic: the compiler needs a static copy
            onnx_file = Path(path).name  # relative: the folder moves when the cache publishes it
            onnx.save(with_static_shapes(fixed_shape_copy(graph, shapes)), str(tmp / onnx_file))
            link_external_data(path, graph, tmp)
        extra = {}
        if quantize.enabled:
            if on_status is not None:
                on_status(f"quantizing {Path(path).name} (qdq, {quantize.calibration_size} calibration inputs)")
            calibration = calibration_feeds(inputs, shapes, feeds, set(request.values), quantize.calibration_size)
            qdq = quantize_qdq(
                Path(tmp / onnx_file if not Path(onnx_file).is_absolute() else onnx_file),
                tmp / f"{Path(path).stem}_qdq.onnx",
                calibration,
                label,
            )
            onnx_file = qdq.name
            extra = {"min_cosine": MIN_COSINE, "quantized": f"qdq, {quantize.calibration_size} calibration inputs"}
        model = _inline_model(tmp, path, graph, inputs, shapes, 0, onnx_file, extra=extra)
        write_reference(model, Path(path), feeds, settings, level="all", label=label)  # the float model's
        return model

    return cached_model(cache_dir / f"qnnsrc-{path.stem}-{key}", build)


def prepare_epcontext(
    path: Path, request: Any, job: dict, cache_dir: Path, on_status: StatusCallback | None = None
) -> tuple[PreparedModel, EpContextModel]:
    """A pre-compiled EPContext model, measured where it is. There is no CPU original to
    compare with, so its reference is its own first inference on the QNN EP with file mapping
    disabled (in a child process), and a second one tells whether it is deterministic."""
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
            str(Path(path).resolve()),
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
        with contextlib.suppress(OSError):
            shutil.copyfile(log_path, tmp / "reference.log")
        return model

    return cached_model(cache_dir / f"qnnctx-{path.stem}-{key}", build), info


def _flush_c_stdio() -> None:
    if os.name != "posix":
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def native_stdout_to_stderr() -> Iterator[None]:
    """The QNN libraries print banner lines to fd 1 when they load; stdout carries the
    summary table, so send those lines to stderr (the progress stream) instead."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        _flush_c_stdio()  # the libraries write through C stdio: flush while fd 1 is redirected
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
    """Every model of the run, ready for the QNN EP: compiled (the generated QDQ chain, or the
    user's model as it is) or the user's own EPContext model. Every problem the user can fix
    (platform, missing package, dynamic shapes, nothing for QNN, a compile the EP refuses or
    crashes in) is an InputError. ``progress`` (a `Progress`) shows what the QNN child is doing."""
    on_status = progress.step if progress is not None else None
    supported, why = qnn_platform_supported()
    if not supported:
        raise InputError(f"--target qnn: {why}")
    try:
        with native_stdout_to_stderr():
            register_qnn_ep()
    except QnnUnavailableError as err:
        raise InputError(f"--target qnn: {err}") from None
    cache_dir = opts.cache_dir or default_cache_dir()
    options = opts.target_options
    settings = opts.session_settings()
    embed_mode, backend = options.get("embed_mode", 0), options.get("backend_type", "htp")

    def compiled(source: PreparedModel, label: str) -> QnnModel:
        c = compile_epcontext(
            source.onnx_path,
            source.folder / "qnn",
            embed_mode=embed_mode,
            backend_type=backend,
            label=label,
            provider_options=settings.provider_options,
            session_config=settings.config,
            check_folder=source.folder,
            log_dir=qnn_log_dir(cache_dir),
            on_status=on_status,
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

    quantize = QuantizeSpec(options.get("quantize", "none"), options.get("calibration_size", CALIBRATION_SIZE))
    if not opts.models:
        if quantize.enabled:
            raise InputError("--quantize qdq: needs --model (the generated model is already a QDQ model)")
        source = generated_qdq(opts.model_size, cache_dir)
        return [compiled(source, source.source)]
    models = resolve_models(opts.models)
    request = opts.input_request()
    check_pipeline_request(models.paths, request)
    job = {
        "backend_type": backend,
        "provider_options": settings.provider_options,
        "session_config": settings.config,
        "intra_op_threads": settings.intra_op_threads,
        "share_ep_contexts": bool(options.get("share_ep_contexts")) or models.genai_qnn,
    }
    out = []
    for path in models.paths:
        graph = load_onnx(path, external_data=False)
        part = request.for_model(graph)
        if epcontext_nodes(graph):
            model, info = prepare_epcontext(path, part, job, cache_dir, on_status)
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
            source = prepare_qnn_source(path, part, settings, cache_dir, quantize, on_status)
            out.append(compiled(source, f"--model {path}"))
    return out
