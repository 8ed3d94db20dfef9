"""Compiling a model for the qnn target once, by the real QNN EP in a child process (it can
crash), to a cached EPContext model that must also load and run once before any worker does."""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cache import cached_build, default_cache_dir
from harness.core.errors import CorruptEntry, InputError
from harness.core.files import copy_file, write_json_atomic
from harness.core.logtext import decode_log
from harness.prep.inputs import model_inputs, shape_hint
from harness.prep.onnxfile import external_data_files, load_onnx, ort_reason

from .child import NOTHING_COMPILED, StatusCallback, run_child
from .ep import qnn_versions
from .estimate import CompilePlan, GraphCost, graph_cost, load_rates, notice, record_timings
from .partitions import UPSTREAM_ERRORS, partitions_of
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
) -> dict:
    """The child's result (``compile_s``, CPU times); a failure is one InputError (`_failure`)."""
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
        return result
    raise _failure(result, label, out_onnx, backend_type, provider_options, log_path)


def _failure(
    result: dict, label: str, out_onnx: Path, backend_type: str, provider_options: dict | None, log_path: Path
) -> InputError:
    """The one-line InputError of a failed compile: the EP's reason, a known fix, its log."""
    error = str(result.get("error") or "")
    where = f" (EP log: {log_path})"
    log = ""
    with contextlib.suppress(OSError):
        log = decode_log(log_path.read_bytes())  # Windows: ORT's lines are UTF-16LE there
    if (why := refusal(log, provider_options)) is not None:
        return InputError(f"{label}: {why}{where}")
    if NOTHING_COMPILED in error:
        refused = first_refused_op(log) if log else None
        return InputError(
            f"{label}: no node was assigned to QNN (the {backend_type} backend takes "
            "none of its ops as given; it needs static shapes and typically "
            "a QDQ-quantized model)" + (f"; the first op the EP refuses: {refused}" if refused else "") + where
        )
    if result.get("stage") == "crash":
        return InputError(f"{label}: the QNN compiler crashed: {error}{where}")
    parts = partitions_of(out_onnx) if result.get("stage") == "load" and out_onnx.is_file() else 0
    if parts > 1 and any(e in error for e in UPSTREAM_ERRORS):  # one partition: the plain load failure below
        return InputError(
            f"{label}: compiled into {parts} QNN partitions; onnxruntime-qnn "
            f"{qnn_versions()['onnxruntime_qnn']} on this platform cannot load this multi-partition "
            f"EPContext model even with ORT's graph optimizations disabled: {ort_reason(error)}{where}"
        )
    if result.get("stage") == "output":
        ints = [str(n) for n in result.get("integer_inputs") or []][:4]
        hint = (
            f"; integer input(s) {', '.join(ints)} were fed 0/1 unless given: real values (ids, bytes) go "
            "with --input NAME=FILE.npy"
            if ints
            else ""
        )
        return InputError(
            f"{label}: compiled for QNN, but the compiled model's output is wrong (its first inference, file "
            f"mapping disabled, against the CPU reference), so no worker was started: {error}{hint}{where}"
        )
    if result.get("stage") in ("load", "run"):
        return InputError(
            f"{label}: compiled for QNN, but the compiled model does not {result['stage']}: {ort_reason(error)}{where}"
        )
    return InputError(
        f"{label}: QNN compilation failed: {ort_reason(error)}{_fix_hint(error, provider_options)}{where}"
    )


#: The simulated HTP cannot finalize a float graph without a SoC to size its memory for.
_MEM_ALLOC = "MEM_ALLOC"


def _fix_hint(error: str, provider_options: dict | None) -> str:
    """What the user can change, for the compile errors whose fix is known."""
    if _MEM_ALLOC in error and (provider_options or {}).get("soc_model", "0") == "0":
        return (
            "; the simulated HTP finalizes many float graphs only for a given SoC: pass "
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


def _load_compiled(folder: Path, cached: bool = True, manifest: str = "manifest.json") -> CompiledModel:
    """A compiled entry of the cache, checked: files present, .bin sizes as recorded."""
    from harness.core.files import contained
    from harness.core.inputfiles import JSON_MAX_BYTES, parse_json_bounded, read_text_bounded

    try:
        m = parse_json_bounded(read_text_bounded(folder / manifest, "", JSON_MAX_BYTES), manifest, 16)
        # every file a worker loads is inside the entry (the record covers it)
        onnx_path = contained(folder, str(m["onnx"]), "manifest.json", "onnx")
        bins = [contained(folder, str(b), "manifest.json", "bin") for b in m["bins"][:4096]]
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
    except InputError:
        raise CorruptEntry("compile manifest names a file outside the entry, or is not readable JSON") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
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
    plan: CompilePlan | None = None,
) -> CompiledModel:
    """`src` compiled into a cache entry ``out_dir/<stem>_em<mode>-<backend>-<key>/`` (keyed by
    the source's files and the options), reused when it exists; with ``check_folder`` it must
    also load and run right once; with ``plan`` a long compile is announced (`estimate`)."""
    if embed_mode not in (0, 1):
        raise ValueError(f"embed_mode must be 0 (context in a .bin) or 1 (in the onnx), got {embed_mode!r}")
    src, out_dir = Path(src), Path(out_dir)
    label = label or str(src)
    model = load_onnx(src, external_data=False, label="model")
    _refuse_dynamic_inputs(model, label)
    sha, key = _entry_key(src, model, provider_options, session_config)
    stem = f"{src.stem}_em{embed_mode}"
    log_path = (log_dir or out_dir) / f"{stem}-{backend_type}-{key[:16]}-compile.log"
    built: list[bool] = []

    def build(scratch: Path) -> None:
        cost = _announce(src, plan, label) if plan is not None else None
        result = _compile(
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
        if cost is not None and plan is not None:  # what this machine took, for its next estimate
            record_timings(plan.cache_dir, cost, result)
        with contextlib.suppress(OSError, InputError):
            copy_file(log_path, scratch / "compile.log", "QNN log")
        recorded = {"source_sha256": sha, "embed_mode": embed_mode, "backend_type": backend_type}
        _write_manifest(scratch, f"{stem}_ctx.onnx", label, result, recorded, provider_options or {})
        built.append(True)

    def load(folder: Path) -> CompiledModel:
        return _load_compiled(folder, cached=not built)

    return cached_build(out_dir / f"{stem}-{backend_type}-{key[:16]}", build, load)


def _entry_key(src: Path, model: Any, provider_options: dict | None, session_config: dict | None) -> tuple[str, str]:
    """(hash of the source files, the cache entry's key: that hash with the compile's options)."""
    sha = _source_sha256(src, model)
    extra = json.dumps({"p": provider_options or {}, "c": session_config or {}}, sort_keys=True)
    return sha, hashlib.sha256(f"{sha}|{extra}".encode()).hexdigest() if provider_options or session_config else sha


def _announce(src: Path, plan: CompilePlan, label: str) -> GraphCost | None:
    """Announce a long compile (the graph's cost at this machine's rates); the cost, or None."""
    try:
        cost = graph_cost(src)
    except Exception:  # onnx's shape inference can refuse a graph the compiler still takes
        return None
    text = notice(cost, plan, load_rates(plan.cache_dir), label)
    if text:
        plan.say(text)
    return cost


def _refuse_dynamic_inputs(model: Any, label: str) -> None:
    """InputError naming the inputs without a static shape: the QNN compiler needs them all."""
    dynamic = [
        (i, i.dims)
        for i in model_inputs(model)
        if i.kind == "tensor" and (i.dims is None or not all(isinstance(d, int) for d in i.dims))
    ]
    if dynamic:
        raise InputError(f"{label}: {shape_hint(dynamic, model)} (QNN needs static shapes)")


def _write_manifest(
    scratch: Path, onnx_name: str, label: str, result: dict, recorded: dict, options: dict, name: str = "manifest.json"
) -> None:
    """The compiled entry's manifest.json (what `_load_compiled` checks), from the EPContext
    model the compile wrote; InputError when QNN took no node at all."""
    bins, embedded = _context_files(scratch / onnx_name)
    if not embedded and not bins:
        raise InputError(f"{label}: no node was assigned to QNN (no EPContext node)")
    ops = [
        n.op_type for n in load_onnx(scratch / onnx_name, external_data=False).graph.node if n.op_type != "EPContext"
    ]
    write_json_atomic(
        scratch / name,
        {
            **recorded,
            "onnx": onnx_name,
            "bins": bins,
            "context_bytes": embedded + sum((scratch / b).stat().st_size for b in bins),
            "compile_s": float(result.get("compile_s") or 0.0),
            "cpu_ops": ops,
            "versions": qnn_versions(),
            "provider_options": options,
        },
    )


def compile_shared(
    srcs: list[Path], out_dir: Path, *, backend_type: str, provider_options: dict, label: str, log_dir: Path, on_status
) -> list[CompiledModel]:
    """Compile ``srcs`` (a prefill and a decode graph) in one process into ONE weight-sharing
    context binary (`child`), cached like a single compile; one CompiledModel per graph, in order."""
    keys = [_entry_key(s, load_onnx(s, external_data=False, label="model"), provider_options, None)[1] for s in srcs]
    key = hashlib.sha256("|".join(keys).encode()).hexdigest()[:16]
    log_path = log_dir / f"shared-{backend_type}-{key}-compile.log"
    names = [f"{src.stem}_ctx.onnx" for src in srcs]

    def build(scratch: Path) -> None:
        job = {"kind": "compile", "srcs": [str(s) for s in srcs], "outs": [str(scratch / n) for n in names]}
        job |= {"backend_type": backend_type, "provider_options": provider_options}
        result = run_child(job, log_path, on_status=on_status)
        if not result.get("ok"):
            raise _failure(result, label, scratch / names[0], backend_type, provider_options, log_path)
        with contextlib.suppress(OSError, InputError):
            copy_file(log_path, scratch / "compile.log", "QNN log")
        for i, name in enumerate(names):
            recorded = {"source_sha256": key, "embed_mode": 0, "backend_type": backend_type}
            _write_manifest(scratch, name, label, result, recorded, provider_options, name=f"manifest-{i}.json")
        write_json_atomic(scratch / "manifest.json", {"graphs": len(names)})

    def load(folder: Path) -> list[CompiledModel]:
        return [_load_compiled(folder, manifest=f"manifest-{i}.json") for i in range(len(names))]

    return cached_build(out_dir / f"shared-{backend_type}-{key}", build, load)
