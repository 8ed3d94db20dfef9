"""The generate workload: a decoder's inputs found by name and shape, and the greedy loop every
worker (and the parent's reference) runs over it: prefill, then decode steps feeding present as past."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.core.errors import InputError

#: A KV tensor's layer and kind in its name: past_key_values.3.key, present.3.value, past_key_3...
_KV = re.compile(r"(?:past|present)\D*?(\d+)\D*?(key|value)|(?:past|present)_(key|value)s?\D*?(\d+)")
#: Inputs the loop feeds besides the KV cache, by name (optimum, onnxruntime-genai's model builder).
FED = ("input_ids", "attention_mask", "position_ids", "seqlens_k", "total_sequence_length")
#: The prompt of ``--prompt-tokens P``: seeded ids, the same in every run.
PROMPT_SEED = 0
DEFAULT_PROMPT_TOKENS, DEFAULT_NEW_TOKENS = 16, 8


def kv_slot(name: str) -> tuple[int, str] | None:
    """(layer, "key"|"value") of a past/present tensor name, None for any other name."""
    found = _KV.search(name)
    if not found:
        return None
    layer, kind = (found[1], found[2]) if found[1] else (found[4], found[3])
    return int(layer), kind


@dataclass
class DecoderIO:
    """The names the loop feeds and reads, and the KV cache's layout (its sequence axis)."""

    inputs: list[str]  # of FED, those the model has
    past: list[str]  # past KV inputs, layer by layer, key before value
    present: list[str]  # the present output of each past input, same order
    logits: str = "logits"
    kv_axis: int = 2  # the sequence axis of a KV tensor

    @classmethod
    def find(cls, inputs: dict[str, list], outputs: list[str], label: str) -> DecoderIO:
        """The decoder's IO from its input shapes and output names; InputError naming what is missing."""
        past = {kv_slot(n): n for n in inputs if n.startswith("past") and kv_slot(n)}
        present = {kv_slot(n): n for n in outputs if n.startswith("present") and kv_slot(n)}
        missing = [f"input {n}" for n in ("input_ids",) if n not in inputs]
        missing += ["past_key_values.N.key/value inputs"] if not past else []
        missing += [f"output {k[1]} of layer {k[0]} (present.N.key/value)" for k in past if k not in present]
        missing += ["output logits"] if "logits" not in outputs else []
        other = [n for n in inputs if n not in FED and n not in past.values()]
        if missing or other:
            said = [f"no {', no '.join(missing)}"] if missing else []
            said += [f"input(s) the loop cannot feed: {', '.join(other)}"] if other else []
            raise InputError(f"{label}: not a decoder the generate workload can run: {'; '.join(said)}")
        order = sorted(past)
        axis = _sequence_axis(inputs[past[order[0]]])
        fixed = [n for n in past.values() if len(inputs[n]) > axis and _is_positive(inputs[n][axis])]
        if fixed:
            raise InputError(
                f"{label}: a KV cache of fixed length ({fixed[0]}{inputs[fixed[0]]}): a static-cache export the "
                "generate loop cannot grow; give the decoder with a dynamic past sequence length"
            )
        return cls(
            [n for n in FED if n in inputs], [past[k] for k in order], [present[k] for k in order], "logits", axis
        )


def _is_positive(dim: Any) -> bool:
    return isinstance(dim, int) and dim > 0


def _sequence_axis(dims: list) -> int:
    """The axis of a past tensor that grows: the symbolic (or 0-long) one after the batch, else 2."""
    grows = [a for a, d in enumerate(dims) if a and (not isinstance(d, int) or d == 0)]
    return grows[0] if grows else 2


def graph_io(model: Any) -> tuple[dict[str, list], list[str]]:
    """(input name -> dims, output names) of an ONNX graph, initializers left out."""
    from harness.prep.inputs import model_inputs

    return {i.name: list(i.dims or []) for i in model_inputs(model)}, [o.name for o in model.graph.output]


def decoder_request(model: Any, label: str) -> Any:
    """The `InputRequest` of one first step over an empty cache (batch 1, one token, past 0): the
    model folder's reference feeds. InputError when the model is not a decoder."""
    from harness.prep.inputs import InputRequest

    inputs, outputs = graph_io(model)
    io = DecoderIO.find(inputs, outputs, label)
    shapes = {}
    for name in io.past:
        dims = inputs[name]
        shapes[name] = [0 if a == io.kv_axis else d if isinstance(d, int) else 1 for a, d in enumerate(dims)]
    values = {"input_ids": "1", "attention_mask": "1", "position_ids": "0", "seqlens_k": "0"}
    values["total_sequence_length"] = "1"
    for name in io.inputs:
        dims = inputs[name]
        shapes[name] = [d if isinstance(d, int) else 1 for d in dims]
    return InputRequest(shapes, {}, {k: v for k, v in values.items() if k in io.inputs})


def prompt_length(opts: Any) -> int:
    return len(opts.prompt_ids) or opts.prompt_tokens or DEFAULT_PROMPT_TOKENS


def prompt(opts: Any, vocab: int) -> list[int]:
    """The prompt: ``--prompt-ids`` as given, else ``--prompt-tokens`` seeded ids below ``vocab``."""
    if opts.prompt_ids:
        return list(opts.prompt_ids)
    import numpy as np

    return [int(i) for i in np.random.default_rng(PROMPT_SEED).integers(1, max(vocab, 2), prompt_length(opts))]


def graph_vocab(graph: Any) -> int | None:
    """The vocabulary of a decoder's graph: its logits' last dimension, None when not static."""
    dims = next((o.type.tensor_type.shape.dim for o in graph.graph.output if o.name == "logits"), [])
    return (dims[len(dims) - 1].dim_value or None) if len(dims) else None


def check_prompt(opts: Any, vocab: int | None, positions: int | None = None) -> None:
    """InputError for a prompt id outside the vocabulary, or a prompt and G beyond the positions."""
    if vocab and max(opts.prompt_ids, default=0) >= vocab:
        raise InputError(f"--prompt-ids: id {max(opts.prompt_ids)} is not below the model's vocabulary of {vocab}")
    if positions and prompt_length(opts) + (opts.new_tokens or DEFAULT_NEW_TOKENS) > positions:
        raise InputError(f"the prompt and --new-tokens need more than the model's {positions} positions")


def vocab_size(model: Any) -> int:
    """The decoder's vocabulary: the prepared model's record of it, else its logits' last dimension."""
    from harness.prep.onnxfile import load_onnx

    found = model.extra.get("vocab_size") or graph_vocab(load_onnx(model.onnx_path, external_data=False))
    if not found:
        raise InputError(
            f"{model.source}: its logits' vocabulary size is not static: give the prompt with --prompt-ids"
        )
    return int(found)


def generation(opts: Any, models: list, on_status: Any = None) -> dict:
    """The generate workload's `WorkerSettings` fields: the prompt, G, and the reference's ids."""
    DecoderIO.find(models[0].inputs, models[0].outputs, models[0].source)  # a target that built no decoder
    ids = prompt(opts, vocab_size(models[0]))
    new_tokens = opts.new_tokens or DEFAULT_NEW_TOKENS
    expected = reference_ids(models, ids, new_tokens, opts.session_settings(), on_status)
    return {"prompt_ids": ids, "new_tokens": new_tokens, "expected_ids": expected}


@dataclass
class Generation:
    """What one greedy loop produced and how long each step took."""

    ids: list[int] = field(default_factory=list)
    ttft_s: float = 0.0  # prefill and the first token's argmax
    step_s: list[float] = field(default_factory=list)  # each decode step after the first token
    kv: dict = field(default_factory=dict)  # the cache at the end (kept alive for the memory sample)

    @property
    def kv_bytes(self) -> int:
        return sum(int(v.nbytes) for v in self.kv.values())


Run = Callable[[dict], dict]


def generate(
    runs: list[Run], io: DecoderIO, kv_types: dict, prompt_ids: list[int], new_tokens: int, after_prefill: Any = None
) -> Generation:
    """Greedy: prefill ``prompt_ids`` (``runs[0]``), then ``new_tokens - 1`` decode steps
    (``runs[-1]``), each feeding the last token and the previous step's present as past;
    ``kv_types`` is each past input's (dtype, empty shape); ``after_prefill()`` is called once
    the first token is out (untimed)."""
    import numpy as np

    out = Generation(kv={name: np.zeros(shape, dtype) for name, (dtype, shape) in kv_types.items()})
    tokens, done = list(prompt_ids), 0
    while len(out.ids) < new_tokens:
        t0 = time.perf_counter()
        feeds = _feeds(io, tokens, done)
        feeds.update(out.kv)
        results = runs[-1 if out.ids else 0](feeds)
        token = int(np.argmax(results[io.logits][0, -1]))
        elapsed = time.perf_counter() - t0
        if out.ids:
            out.step_s.append(elapsed)
        else:
            out.ttft_s = elapsed
            if after_prefill is not None:
                after_prefill()
        out.kv = {past: results[present] for past, present in zip(io.past, io.present, strict=True)}
        done += len(tokens)
        out.ids.append(token)
        tokens = [token]
    return out


def _feeds(io: DecoderIO, tokens: list[int], done: int) -> dict:
    """The non-KV inputs of one step: ``tokens`` after ``done`` cached ones."""
    import numpy as np

    total = done + len(tokens)
    every = {
        "input_ids": np.array([tokens], np.int64),
        "attention_mask": np.ones((1, total), np.int64),
        "position_ids": np.arange(done, total, dtype=np.int64)[None],
        "seqlens_k": np.array([total - 1], np.int32),
        "total_sequence_length": np.array(total, np.int32),
    }
    return {name: every[name] for name in io.inputs}


def kv_types(io: DecoderIO, model: Any) -> dict[str, tuple]:
    """Each past input's numpy dtype and empty (0-long) shape, from the prepared model."""
    from harness.prep.tensors import numpy_dtype

    return {
        n: (numpy_dtype(model.input_types[n]), [0 if a == io.kv_axis else d for a, d in enumerate(model.inputs[n])])
        for n in io.past
    }


def session_runner(target: Any, session: Any, model: Any) -> Run:
    """One step in ``session`` through the target (the same call the infer workload makes)."""

    def run(feeds: dict) -> dict:
        return dict(zip(model.outputs, target.run(session, model, feeds), strict=True))

    return run


def generate_in_models(
    target: Any, sessions: list, models: list, settings: Any, after_prefill: Any = None
) -> Generation:
    """The loop over one session group as ``settings`` (`WorkerSettings`) say: its first model
    prefills, its last decodes (a pipeline of a prefill and a decode graph; one model does both)."""
    io = DecoderIO.find(models[0].inputs, models[0].outputs, models[0].source)
    runs = [session_runner(target, s, m) for s, m in zip(sessions, models, strict=True)]
    return generate(runs, io, kv_types(io, models[0]), settings.prompt_ids, settings.new_tokens, after_prefill)


def reference_ids(models: list, prompt_ids: list[int], new_tokens: int, settings: Any, on_status: Any = None) -> list:
    """The ids ORT's CPU EP generates loading the models' weights itself, in a child process."""
    from .ortjob import run_ort_job

    job = {"kind": "generate", "models": [str(m.folder) for m in models], "prompt": prompt_ids}
    job.update(new_tokens=new_tokens, settings=settings.to_dict(), label=f"model {models[0].source}")
    return run_ort_job(job, job["label"], on_status)["ids"]


def generate_in_process(job: dict) -> dict:
    """The child's side of `reference_ids`."""
    from pathlib import Path
    from types import SimpleNamespace

    import onnxruntime as ort

    from harness.prep.folder import PreparedModel
    from harness.prep.sessions import SessionSettings, cpu_session_options, run_session

    models = [PreparedModel.load(Path(folder), check_files=False) for folder in job["models"]]
    settings = SessionSettings.from_dict(job["settings"])
    sessions = [
        ort.InferenceSession(str(m.onnx_path), cpu_session_options(settings, level=m.session_level)) for m in models
    ]
    plain = SimpleNamespace(run=lambda s, m, f: run_session(s, m.outputs, f, m.input_types, m.output_types))
    given = SimpleNamespace(prompt_ids=job["prompt"], new_tokens=job["new_tokens"])
    return {"ids": generate_in_models(plain, sessions, models, given).ids}


def token_stats(steps: list[float]) -> dict[str, float | None]:
    """decode_tokens_per_s and the per-token latency percentiles of the decode steps."""
    if not steps:
        return dict.fromkeys(
            ("decode_tokens_per_s", "token_latency_p50_s", "token_latency_p90_s", "token_latency_p99_s")
        )
    import numpy as np

    p50, p90, p99 = (float(v) for v in np.percentile(steps, [50, 90, 99]))
    return {
        "decode_tokens_per_s": len(steps) / sum(steps),
        "token_latency_p50_s": p50,
        "token_latency_p90_s": p90,
        "token_latency_p99_s": p99,
    }
