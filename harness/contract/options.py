"""The options of one run (`RunOptions`): what the command line, the bench and the pytest
plugin hand to `harness.runner.sweep.execute`, and what the targets read.

Each run option is declared ONCE, as a field of `RunOptions`: its type and default, and in the
field's metadata (`flag`) its command-line flag, argparse type, metavar and help. Every parser
that takes run options derives them from these declarations with `add_run_options` (modelled
on pytest-benchmark's ``add_*_options(addoption, prefix)``): ``run`` takes all of them,
``bench``, ``cache`` and ``doctor`` a few with their own defaults and help (`Variant`), and the
pytest plugin a few under the ``fmw-`` prefix (``--fmw-processes``), parsed with the same
types. The copy of parsed arguments into the options (`RunOptions.from_arguments`) is derived
from them too, so a new option is one field, not several places to keep in step.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.contract.modelargs import parse_free_dims, parse_input_values, parse_key_values, parse_shapes
from harness.contract.spec import SessionSettings
from harness.core import argtypes
from harness.core.schema import MODES
from harness.core.vocab import PAGE_CACHE_CHOICES, Workload

#: What ``--page-cache`` accepts: warm (read the weights once before the first group) or cold
#: (evict their pages before each group).
PAGE_CACHE_MODES = PAGE_CACHE_CHOICES


@dataclass(frozen=True)
class Flag:
    """How one run option appears on the command line (the keywords of ``add_argument``)."""

    flag: str
    help: str
    type: Callable[[str], Any] | None = None
    text_default: str | None = None  # argparse's default, as the user would type it; None: the field's
    metavar: str | None = None
    action: str | None = None  # "append" (repeatable), "store_false" (a --no-X switch)...
    choices: tuple | None = None
    group: str = ""  # options of one group are mutually exclusive (e.g. --model / --model-size)
    choose_target: bool = False  # choices are the registered targets; "{targets}" in help: their summaries
    #: Parsed value -> field value (``convert(value, namespace)``); None: taken as parsed.
    convert: Callable[[Any, argparse.Namespace], Any] | None = None


@dataclass(frozen=True)
class Variant:
    """How another command takes a declared run option: its own default (as the user would type
    it), help and metavar (None: the declaration's); ``single``: one value where ``run``
    repeats the option (the plugin's ``--fmw-model``). The flag, type and choices stay the
    declaration's. ``{default}`` in a help is replaced by the default."""

    default: str | None = None
    help: str | None = None
    metavar: str | None = None
    single: bool = False


def flag(default: Any = None, *, factory: Callable[[], Any] | None = None, **spec: Any) -> Any:
    """A `RunOptions` field declared with its command-line `Flag`."""
    meta = {"flag": Flag(**spec)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _given(parse: Callable[..., Any], *flag_name: str) -> Callable[[Any, argparse.Namespace], Any]:
    """A converter of the values given for a flag (`harness.contract.modelargs`)."""
    return lambda values, ns: parse(values, *flag_name)


def _gates(exprs: list[str], ns: argparse.Namespace) -> list[str]:
    """--gate and --gates-file, parsed now: a typo costs a second, not a whole sweep."""
    from harness.core.gates import parse_gates, read_gates_file

    gates_file = getattr(ns, "gates_file", None)
    exprs = list(exprs) + (read_gates_file(gates_file) if gates_file is not None else [])
    parse_gates(exprs)
    return exprs


@dataclass
class RunOptions:
    target: str = flag("cpu", flag="--target", choose_target=True, help="what loads the weights; {targets}")
    target_options: dict[str, Any] = field(default_factory=dict)  # the target's own options, generic
    peer: str | None = flag(  # a second target measured in mapped mode beside it (e.g. ort-native)
        None,
        flag="--peer",
        choose_target=True,
        help="also measure this target in mapped mode beside --target, e.g. ort-native (default: none)",
    )
    model: Path | None = None  # the first of ``models`` (kept in step by __post_init__)
    models: list[Path] = flag(  # --model, repeatable: files or folders (a pipeline)
        factory=list,
        flag="--model",
        type=Path,
        action="append",
        metavar="PATH",
        group="source",
        convert=lambda value, ns: list(value or []),
        help="any ONNX model (cpu targets: weights externalised to one aligned file; qnn: compiled, "
        "or measured as it is when it is a compiled EPContext model); repeat it, or give a "
        "folder (its genai_config.json, else every *.onnx), to load a pipeline in every "
        "session group (default: a generated model of --model-size)",
    )
    model_size: int = flag(
        256 * 1024**2,
        flag="--model-size",
        type=argtypes.generated_size,
        text_default="256MiB",
        metavar="SIZE",
        group="source",
        help="weights of the generated model ({size_help})",
    )
    shapes: dict[str, list[int]] = flag(
        factory=dict,
        flag="--shape",
        action="append",
        metavar="NAME=1x3x224x224",
        convert=_given(parse_shapes),
        help="fix a dynamic input shape of --model (repeatable)",
    )
    free_dims: dict[str, int] = flag(
        factory=dict,
        flag="--free-dim",
        action="append",
        metavar="NAME=VALUE",
        convert=_given(parse_free_dims),
        help="set a named symbolic dimension in every input, as onnxruntime_perf_test -f (repeatable)",
    )
    input_values: dict[str, str] = flag(
        factory=dict,
        flag="--input",
        action="append",
        metavar="NAME=FILE.npy|NAME=VALUE",
        convert=_given(parse_input_values),
        help="feed this input real values: a .npy array, or one value filled to its shape, e.g. sr=16000 (repeatable)",
    )
    session_config: dict[str, str] = flag(
        factory=dict,
        flag="--session-config",
        action="append",
        metavar="KEY=VALUE",
        convert=_given(parse_key_values, "--session-config"),
        help="ORT session config entry for every session, both modes, and the reference (repeatable)",
    )
    provider_options: dict[str, str] = flag(
        factory=dict,
        flag="--provider-option",
        action="append",
        metavar="KEY=VALUE",
        convert=_given(parse_key_values, "--provider-option"),
        help="QNN EP provider option, e.g. soc_model=60 (repeatable; not disable_file_mapped_weights)",
    )
    intra_op_threads: int | None = flag(
        None,
        flag="--intra-op-threads",
        type=argtypes.positive_int,
        metavar="N",
        help="intra-op threads of every session and the reference (default: ORT's choice)",
    )
    workload: str = flag(
        Workload.INFER,
        flag="--workload",
        choices=Workload.values(),
        help="what each session does: infer (one inference of the model's inputs) or generate (a decoder's "
        "greedy loop: prefill a prompt, then decode --new-tokens feeding its KV cache back; time to first "
        "token, tokens/s, KV-cache bytes)",
    )
    prompt_tokens: int | None = flag(
        None,
        flag="--prompt-tokens",
        type=argtypes.positive_int,
        metavar="P",
        help="generate: a prompt of P seeded token ids (default 16; count)",
    )
    prompt_ids: list[int] = flag(
        factory=list,
        flag="--prompt-ids",
        type=argtypes.token_ids,
        metavar="3,1,4,...",
        convert=lambda value, ns: list(value or []),
        help="generate: the prompt's exact token ids, e.g. to compare with another runtime",
    )
    new_tokens: int | None = flag(
        None,
        flag="--new-tokens",
        type=argtypes.positive_int,
        metavar="G",
        help="generate: tokens generated greedily after the prompt, the first by the prefill (default 8; count)",
    )
    runs: int = flag(
        0,
        flag="--runs",
        type=argtypes.int_at_least(0),
        metavar="R",
        help="timed inferences after the first (and after the --warmup ones): latency mean, stdev, "
        "min, p50, p90, p95, p99, max, inferences/s (count)",
    )
    warmup: int = flag(
        0,
        flag="--warmup",
        type=argtypes.int_at_least(0),
        metavar="K",
        help="untimed inferences after the first and before the --runs timed ones (count)",
    )
    concurrency: int = flag(
        1,
        flag="--concurrency",
        type=argtypes.positive_int,
        metavar="C",
        help="inference threads sharing each worker's session for the timed runs, as onnxruntime_perf_test -c "
        "(the --runs R are split over them; count)",
    )
    page_cache: str = flag(
        "warm",
        flag="--page-cache",
        choices=PAGE_CACHE_MODES,
        help="warm: read the weights once before the first group; cold: evict their pages "
        "before each group and verify it (Linux)",
    )
    memory_limit: int | None = flag(  # every group in a memory container of this size
        None,
        flag="--memory-limit",
        type=argtypes.size,
        metavar="SIZE",
        help="run every group (its workers and its control) in a memory container of this size: a Linux cgroup "
        "(root), a Windows job memory limit; a worker the limit ends is recorded as 'out of memory at the "
        "limit'; on Linux the weights' pages are evicted before each group, so they are charged to it "
        "(default: no limit)",
    )
    processes: list[int] = flag(
        factory=lambda: [4],
        flag="--processes",
        type=argtypes.processes,
        text_default="4",
        metavar="LIST",
        help="worker processes N (count), e.g. 4, or 1,2,4,8 for a sweep",
    )
    sessions_per_process: int = flag(
        1,
        flag="--sessions-per-process",
        type=argtypes.positive_int,
        metavar="M",
        help="ORT sessions in each worker process (count)",
    )
    modes: list[str] = flag(
        factory=lambda: list(MODES),
        flag="--modes",
        type=argtypes.modes,
        text_default="mapped,heap",
        metavar="LIST",
        help="modes to measure: mapped (disable_file_mapped_weights=0), heap (=1)",
    )
    sequential_timing: bool = flag(
        False,
        flag="--sequential-timing",
        action="store_true",
        help="after each group, a timing pass: its N workers again, started one after another, each alone "
        "(released before the next starts; no memory sample), whose times the timing gates judge: a machine "
        "with fewer cores than workers still gives a judged init time (bench: always)",
    )
    repeat: int = flag(
        1,
        flag="--repeat",
        type=argtypes.positive_int,
        metavar="R",
        help="repeats of every group (count); the headline is the median over them",
    )
    worker_timeout_s: float = flag(
        300.0,
        flag="--worker-timeout",
        type=argtypes.timeout,
        text_default="300",
        metavar="SECONDS",
        help="kill a worker not ready after this many seconds",
    )
    out: Path | None = flag(
        None, flag="--out", type=Path, metavar="DIR", help="output folder (default: a new results/{kind}-<time>/)"
    )
    replace: bool = flag(
        False,
        flag="--replace",
        action="store_true",
        help="--out DIR may hold an earlier run: its files are removed first, and stderr says which (without "
        "this, such an --out is refused before any work)",
    )
    out_prefix: str = "run"  # the default folder is results/<prefix>-<date>-<time>[-K]
    cache_dir: Path | None = flag(
        None,
        flag="--cache-dir",
        type=Path,
        metavar="DIR",
        help="model cache (default: $HARNESS_CACHE_DIR or ~/.cache/qnn-fmw-harness)",
    )
    gates: list[str] = flag(  # user gate expressions (validated before any work)
        factory=list,
        flag="--gate",
        action="append",
        metavar="EXPR",
        convert=_gates,
        help="pass/fail criterion, e.g. mapped_pss_ratio<=0.35 (repeatable; metrics below); a failing gate exits 1",
    )
    default_gates: bool = flag(
        True, flag="--no-default-gates", action="store_false", help="do not add the target's default gates"
    )
    labels: dict[str, str] = flag(  # KEY=VALUE tags (device kind...) for history
        factory=dict,
        flag="--label",
        type=argtypes.label,
        action="append",
        metavar="KEY=VALUE",
        convert=lambda pairs, ns: argtypes.labels(pairs),
        help="tag the run (repeatable), e.g. device=x-elite: kept in metadata.json and the history",
    )
    fault_actions: dict[int, str] = flag(  # reliability suites: make worker I crash/hang/raise
        factory=dict,
        flag="--inject-worker-fault",
        type=argtypes.worker_fault,
        action="append",
        convert=lambda pairs, ns: dict(pairs),
        help=argparse.SUPPRESS,
    )
    command: str = ""
    project_to: tuple[int, int] | None = flag(  # (sessions, weights bytes) the report projects to
        None,
        flag="--project-to",
        type=argtypes.projection,
        metavar="SESSIONSxSIZE",
        help="deployment the report projects to, e.g. 8x4GiB (default: the measured weights at twice the "
        "largest N x M measured, at least 8 sessions)",
    )

    def __post_init__(self) -> None:
        if self.cache_dir is not None:  # the compiler's child and the workers run in other folders
            self.cache_dir = Path(self.cache_dir).absolute()
        if self.models:
            self.model = self.models[0]
        elif self.model is not None:
            self.models = [self.model]

    @classmethod
    def from_arguments(cls, ns: argparse.Namespace, **given: Any) -> RunOptions:
        """The options of parsed command-line arguments (every declared flag), plus ``given``
        (what is not a flag: the target's own options, the command line). A command that
        declares some of the flags only (``capacity``) keeps the defaults of the others."""
        values = {}
        for f in command_line_fields():
            if not hasattr(ns, f.name):
                continue
            spec: Flag = f.metadata["flag"]
            value = getattr(ns, f.name)
            values[f.name] = spec.convert(value, ns) if spec.convert else value
        return cls(**values, **given)

    def session_settings(self) -> SessionSettings:
        """The ORT session knobs every session (mapped and heap) and the reference share."""
        return SessionSettings(dict(self.session_config), self.intra_op_threads, dict(self.provider_options))


def command_line_fields() -> list:
    """The `RunOptions` fields that are command-line flags, in declaration (and --help) order."""
    return [f for f in fields(RunOptions) if "flag" in f.metadata]


def flag_of(name: str, prefix: str = "") -> str:
    """The command-line flag of the run option ``name`` (a `RunOptions` field), under ``prefix``
    (``flag_of("processes", "fmw-")`` is ``--fmw-processes``)."""
    spec: Flag = next(f for f in command_line_fields() if f.name == name).metadata["flag"]
    return f"--{prefix}{spec.flag[2:]}"


AddOption = Callable[..., Any]


def add_run_options(
    addoption: AddOption,
    names: list[str] | None = None,
    *,
    prefix: str = "",
    variants: dict[str, Variant] | None = None,
    targets: tuple[str, ...] = (),
    text: dict[str, str] | None = None,
    exclusive: Callable[[str], AddOption] | None = None,
) -> None:
    """Declare the run options (all of them, or ``names`` only, in declaration order) with
    ``addoption(flag, **keywords)``: argparse's ``add_argument`` or pytest's ``addoption``.

    ``prefix`` namespaces the flags and their dests (``"fmw-"``: ``--fmw-processes``, dest
    ``fmw_processes``); without it each option keeps its field's name as its dest, so
    `RunOptions.from_arguments` copies it back. ``variants``: a command's own defaults and help
    (`Variant`). ``targets``: the registered targets, the choices of ``--target``/``--peer``
    (this module sits below the registry). ``text`` fills the help's placeholders
    (``{targets}``, ``{size_help}``, ``{kind}``...). ``exclusive(group)`` gives the
    ``addoption`` of a mutually exclusive group (``--model`` / ``--model-size``); None: the
    options are added as they are."""
    chosen = [f for f in command_line_fields() if names is None or f.name in names]
    for f in chosen:
        spec: Flag = f.metadata["flag"]
        how = (variants or {}).get(f.name, Variant())
        flag_name = flag_of(f.name, prefix)
        action = "store" if how.single else (spec.action or "store")
        keywords: dict[str, Any] = {"dest": flag_name[2:].replace("-", "_") if prefix else f.name, "action": action}
        if action != "store_false":
            keywords["choices"] = tuple(targets) if spec.choose_target else spec.choices
            keywords.update(type=spec.type, metavar=how.metavar or spec.metavar)
            keywords["default"] = _default_text(f, spec, how)
        help_text = how.help or spec.help
        if help_text != argparse.SUPPRESS:
            help_text = help_text.format_map({**(text or {}), "default": keywords.get("default")})
        where = exclusive(spec.group) if exclusive is not None and spec.group else addoption
        where(flag_name, help=help_text, **{k: v for k, v in keywords.items() if v is not None})


def _default_text(f: Any, spec: Flag, how: Variant) -> Any:
    """A parser's default for one option: the variant's, else the declaration's text, else []
    for a repeatable option, else the field's default."""
    if how.default is not None:
        return how.default
    if how.single:
        return None
    if spec.text_default is not None:
        return spec.text_default
    if spec.action == "append":
        return []
    return None if f.default is MISSING else f.default
