"""Several models measured together: every session group of a worker loads all of them.

LLMs on a Snapdragon NPU run as a pipeline of EPContext models (embeddings, prompt processing,
token generation, LM head) that share context binaries; the field report of a 7B model that
failed to load unless ``disable_file_mapped_weights=1`` was such a pipeline. The models come
from a repeated ``--model``, or a folder: the files its onnxruntime-genai ``genai_config.json``
names (every ``filename`` under ``model``, in the order written), else every ``*.onnx`` in it.

Each model gets its own feeds and reference; outputs are not chained from one model into the
next (the harness measures loading and running the weights, not the generation loop).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import InputError
from harness.core.files import contained_file, real_path
from harness.core.inputfiles import read_json_bounded

GENAI_CONFIG = "genai_config.json"
#: The most models one run loads (a pipeline's folder or genai_config.json names a handful): a
#: folder of thousands of .onnx files is not a pipeline, and each would be opened to look at it.
MAX_PIPELINE_MODELS = 64


@dataclass
class ModelSet:
    paths: list[Path]
    origin: str  # "files" | "folder" | "genai_config"
    #: onnxruntime-genai always runs QNN pipelines with ep.share_ep_contexts=1.
    genai_qnn: bool = False


def _filenames(node: Any) -> list[str]:
    """Every "filename" value in a genai_config subtree, in document order."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "filename" and isinstance(value, str):
                found.append(value)
            else:
                found += _filenames(value)
    elif isinstance(node, list):
        for item in node:
            found += _filenames(item)
    return found


def _mentions_qnn(node: Any) -> bool:
    if isinstance(node, dict):
        return any(str(k).lower() == "qnn" or _mentions_qnn(v) for k, v in node.items())
    if isinstance(node, list):
        return any(_mentions_qnn(v) for v in node)
    return False


def _from_genai_config(folder: Path) -> tuple[list[Path], bool]:
    label = f"--model {folder}"
    config = read_json_bounded(contained_file(folder, GENAI_CONFIG, label, repr(GENAI_CONFIG)), label)
    if not isinstance(config, dict):
        raise InputError(f"{label}: {GENAI_CONFIG} is not a JSON object")
    names = [n for n in dict.fromkeys(_filenames(config.get("model", config))) if n.lower().endswith(".onnx")]
    if not names:
        raise InputError(f'--model {folder}: {GENAI_CONFIG} names no .onnx file under "model"')
    paths = [contained_file(folder, n, label, f"{GENAI_CONFIG} entry {n!r}") for n in names]
    return paths, _mentions_qnn(config.get("model", config))


def resolve_models(given: list[Path]) -> ModelSet:
    """The model files a run loads, in order; InputError for an empty or ambiguous folder."""
    paths: list[Path] = []
    origin, genai_qnn = "files", False
    for item in given:
        item = Path(item)
        if not item.exists():
            raise InputError(f"--model {item}: no such file")
        if not item.is_dir():
            paths.append(item)
            continue
        if (item / GENAI_CONFIG).is_file():
            found, qnn = _from_genai_config(item)
            origin, genai_qnn = "genai_config", genai_qnn or qnn
        else:
            names = []
            for p in item.glob("*.onnx"):  # counted as found: a folder of a million is refused early
                names.append(p)
                if len(names) > MAX_PIPELINE_MODELS:
                    raise InputError(f"--model {item}: more than {MAX_PIPELINE_MODELS} .onnx files: not a pipeline")
            found = sorted(
                contained_file(item, p.name, f"--model {item}", f"model {p.name!r}") for p in names if p.is_file()
            )
            origin = "folder"
            if not found:
                raise InputError(f"--model {item}: a folder without .onnx files (and without {GENAI_CONFIG})")
            _refuse_mixed(item, found)
        paths += found
        if len(paths) > MAX_PIPELINE_MODELS:
            raise InputError(f"--model {item}: more than {MAX_PIPELINE_MODELS} models: not a pipeline")
    seen: set[Path] = set()
    for path in paths:
        if real_path(path) in seen:
            raise InputError(f"--model {path}: given twice")
        seen.add(real_path(path))
    return ModelSet(paths, origin if len(given) == 1 else "files", genai_qnn)


def _refuse_mixed(folder: Path, files: list[Path]) -> None:
    """A folder holding a source model and its compiled EPContext twin is ambiguous."""
    from harness.prep.onnxfile import load_onnx

    from .epcontext import epcontext_nodes

    compiled = [f.name for f in files if epcontext_nodes(load_onnx(f, external_data=False))]
    if compiled and len(compiled) != len(files):
        plain = [f.name for f in files if f.name not in compiled]
        raise InputError(
            f"--model {folder}: holds compiled EPContext models ({', '.join(compiled)}) and plain "
            f"models ({', '.join(plain)}): name the ones to load with repeated --model"
        )


def check_pipeline_request(paths: list[Path], request: Any) -> None:
    """--shape/--input/--free-dim names must exist in at least one model of the set."""
    from harness.prep.onnxfile import load_onnx

    from .inputs import check_request, model_inputs

    graphs = [load_onnx(p, external_data=False) for p in paths]
    check_request([i for g in graphs for i in model_inputs(g)], request)
    if len(paths) > 1:
        _refuse_unresolved(paths, graphs, request)


def _refuse_unresolved(paths: list[Path], graphs: list[Any], request: Any) -> None:
    """Every model's unresolved input shapes in ONE error: a three-model pipeline used to name
    them one model at a time, a run each."""
    from .inputs import given_feeds, model_inputs, resolve_shapes

    problems = []
    for path, graph in zip(paths, graphs, strict=True):
        part = request.for_model(graph)
        inputs = model_inputs(graph)
        try:
            given = given_feeds([i for i in inputs if i.name in part.values], part)
            resolve_shapes(inputs, part, given, f"{path.name}", graph)
        except InputError as err:
            problems.append(str(err))
    if problems:
        raise InputError(f"the pipeline's inputs are not all resolved: {' | '.join(problems)}")
