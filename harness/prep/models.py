"""Models the workers load: the generated chain or bring-your-own ONNX, prepared into a model folder.

Every model the cpu targets load is prepared into one folder holding ``model.onnx`` whose
large initializers live in ONE external ``weights.bin``, each tensor at a 64-byte aligned
offset (`harness.prep.folder.ALIGNMENT`), plus
``manifest.json`` saying where each tensor is and ``reference.npz`` with a fixed input and ORT's
own output for it, so every worker can check its first inference.

A user's model goes through: its inputs are resolved (shapes, feeds);
large Constant-node tensors are lifted into initializers, also inside If/Loop/Scan subgraphs;
ORT optimizes the graph once, offline, at the level sessions would use, and the OPTIMIZED
initializers are externalised (a weight ORT rewrites in place under its own name, as the
transpose optimizer does, would otherwise be replaced by the stale original handed over by
name); every element type is externalised as the raw bytes ONNX stores (bf16, float8, packed
int4...). The reference is the ORIGINAL model run by ORT loading its own weights, with the
workers' session settings, twice: an output that differs between the two runs is recorded as
non-deterministic instead of calling every worker wrong.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from harness.cache import default_cache_dir
from harness.core.errors import InputError
from harness.core.vocab import Workload

from .cachekeys import PREP_VERSION, machine_key, source_key
from .externalise import externalise, link_external_data, mappable_bytes
from .folder import EXTERNAL_THRESHOLD, PreparedModel, cached_model
from .generated import generated_matmul_chain
from .inputs import InputRequest
from .onnxfile import load_onnx
from .reference import write_reference
from .sessions import SessionSettings


def resolve_feeds(model: Any, request: InputRequest, label: str) -> tuple[list, dict[str, list[int]], dict]:
    """(inputs, concrete shapes, feeds) of a user model; InputError for what cannot be fed."""
    from harness.prep.inputs import generate_feeds, given_feeds, model_inputs, refuse_unfeedable, resolve_shapes

    inputs = model_inputs(model)
    refuse_unfeedable(inputs, label)
    from harness.prep.outputs import nonfinite_problem

    given = given_feeds([i for i in inputs if i.name in request.values], request)
    why = nonfinite_problem(given, {})
    if why:  # NaN in, NaN out whatever the weights: no check of the workers could fail
        raise InputError(f"{label}: --input {why.removeprefix('input ')}; a worker's output could not be checked")
    shapes = resolve_shapes(inputs, request, given, label, model)
    return inputs, shapes, generate_feeds(inputs, shapes, given)


def refuse_epcontext(model: Any, label: str, target: str) -> None:
    from harness.prep.epcontext import epcontext_nodes

    if epcontext_nodes(model):
        raise InputError(
            f"{label}: a pre-compiled EPContext model (for an EP such as QNN): --target {target} "
            "cannot load it; use --target qnn, or give the source model"
        )


def prepare_user_model(
    path: Path,
    request: InputRequest | None = None,
    *,
    cache_dir: Path | None = None,
    settings: SessionSettings | None = None,
    target: str = "cpu",
    on_status: Any = None,
) -> PreparedModel:
    """A user's model prepared for the cpu targets (see the module docstring). Every problem
    is an InputError with a one-line message naming the user's file."""
    path = Path(path)
    request = request or InputRequest()
    settings = settings or SessionSettings()
    label = f"--model {path}"
    graph_only = load_onnx(path, external_data=False)
    refuse_epcontext(graph_only, label, target)
    from harness.prep.inputs import check_request, model_inputs

    check_request(model_inputs(graph_only), request)
    resolve_feeds(graph_only, request, label)  # refuse bad inputs before any work
    key = source_key(
        path,
        graph_only,
        {"request": request.key(), "session": settings.to_dict(), "machine": machine_key(), "prep": PREP_VERSION},
    )
    folder = (cache_dir or default_cache_dir()) / f"user-{path.stem}-{key}"
    return cached_model(folder, lambda tmp: _build_user_model(path, request, settings, tmp, label, on_status))


def _build_user_model(
    path: Path, request: InputRequest, settings: SessionSettings, tmp: Path, label: str, on_status: Any = None
) -> PreparedModel:
    """Lift, optimize offline, externalise, reference. The weights are never all in this
    process's memory at once: the graph is read without its external data, ORT reads the
    weights itself, and `externalise` copies them file to file."""
    import onnx

    from harness.prep.graphs import lift_constants, unique_initializer_names
    from harness.prep.optimize import OFFLINE_LEVEL, SESSION_LEVEL_AFTER, optimize_offline

    graph = load_onnx(path, external_data=False)
    source_bytes = _mappable_or_refuse(graph, label)
    inputs, shapes, feeds = resolve_feeds(graph, request, label)
    source = path
    lifted = lift_constants(graph, EXTERNAL_THRESHOLD)
    if lifted:  # ORT must see the lifted graph; its external weights stay where they are, linked
        source = tmp / "lifted" / Path(path).name
        source.parent.mkdir()
        link_external_data(path, graph, source.parent)
        onnx.save(graph, str(source))
    del graph
    optimized_path = optimize_offline(
        source, tmp, settings, min_external_bytes=EXTERNAL_THRESHOLD, label=label, on_status=on_status
    )
    optimized = onnx.load(str(optimized_path), load_external_data=False)
    renamed = unique_initializer_names(optimized)
    gathered = gathered_initializers(optimized)
    tensors = externalise(optimized, tmp / "weights.bin", base_dir=tmp)
    onnx.save(optimized, str(tmp / "model.onnx"))
    output_types = {o.name: o.type.tensor_type.elem_type for o in optimized.graph.output}
    del optimized
    shutil.rmtree(tmp / "lifted", ignore_errors=True)
    for leftover in ("optimized.onnx", "optimized.data"):
        (tmp / leftover).unlink(missing_ok=True)
    prepared = PreparedModel(
        tmp,
        str(path),
        tensors,
        shapes,
        {i.name: i.onnx_type for i in inputs},
        list(output_types),
        sum(t.length for t in tensors),
        output_types=output_types,
        session_level=SESSION_LEVEL_AFTER,
        extra={
            "lifted_constants": lifted,
            "renamed_initializers": renamed,
            "optimized_offline": OFFLINE_LEVEL,
            "source_weights_bytes": source_bytes,  # before ORT's optimizer (NCHWc reorders grow them)
            "gathered_bytes": sum(t.length for t in tensors if t.name in gathered),  # embedding tables
        },
    )
    if not tensors:
        raise InputError(
            f"{label}: nothing to map after ORT's optimizations: no initializer of "
            f"{EXTERNAL_THRESHOLD} bytes or more is left"
        )
    write_reference(prepared, path, feeds, settings, level=OFFLINE_LEVEL, label=label, on_status=on_status)
    return prepared


def _mappable_or_refuse(graph: Any, label: str) -> int:
    """The bytes the model's weights take as the file holds them; InputError when none is mappable."""
    found = mappable_bytes(graph)
    if not found:
        raise InputError(
            f"{label}: nothing to map: no initializer and no Constant-node tensor (subgraphs "
            f"included) holds {EXTERNAL_THRESHOLD} bytes or more"
        )
    return found


def prepare_cpu_models(opts: Any, progress: Any = None, *, target: str = "cpu") -> list[PreparedModel]:
    """The model folders of the cpu and ort-native targets: each user model (a pipeline may
    have several) prepared, or the generated fp32 chain."""
    from harness.prep.decoder import decoder_request
    from harness.prep.pipeline import check_pipeline_request, resolve_models

    settings = opts.session_settings()
    generate = opts.workload == Workload.GENERATE
    if not opts.models and generate:
        from harness.prep.llama import generated_decoder

        return [generated_decoder(opts.model_size, cache_dir=opts.cache_dir, settings=settings)]
    if not opts.models:
        return [
            generated_matmul_chain(
                opts.model_size,
                cache_dir=opts.cache_dir,
                settings=settings,
                on_bytes=getattr(progress, "bytes_written", None),
            )
        ]
    paths = resolve_models(opts.models).paths
    request = InputRequest.of(opts)
    if not generate:  # the generate loop's feeds are the decoder's own (`decoder_request`)
        check_pipeline_request(paths, request)
    models = []
    for path in paths:
        if progress is not None and len(paths) > 1:
            progress.note(f"preparing {path.name}...")
        graph = load_onnx(path, external_data=False)
        models.append(
            prepare_user_model(
                path,
                decoder_request(graph, f"--model {path}") if generate else request.for_model(graph),
                cache_dir=opts.cache_dir,
                settings=settings,
                target=target,
                on_status=getattr(progress, "step", None),
            )
        )
    return models


#: Ops that read rows of their first input at the indices the second gives: a table read this way
#: is touched only where the inputs point (an embedding).
GATHER_OPS = ("Gather", "GatherElements", "GatherND", "EmbedLayerNormalization")


def gathered_initializers(model: Any) -> set[str]:
    """Initializers some node reads as an indexed table (`GATHER_OPS`' first input, or the word
    and position embeddings of ORT's fused EmbedLayerNormalization): their pages are read only
    where the inputs point, so a mapped worker keeps few of them resident."""
    from harness.prep.graphs import all_graphs

    names = {t.name for g in all_graphs(model.graph) for t in g.initializer}
    found: set[str] = set()
    for graph in all_graphs(model.graph):
        for node in graph.node:
            if node.op_type in GATHER_OPS:
                tables = node.input[2:5] if node.op_type == "EmbedLayerNormalization" else node.input[:1]
                found.update(n for n in tables if n in names)
    return found
