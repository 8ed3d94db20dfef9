"""The parser of ``python -m harness``: run options from `RunOptions`, the targets' from their `TargetOption`s."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.contract.options import Variant
from harness.core import argtypes
from harness.core.errors import HelpFormatter, InputError, OneLineArgumentParser
from harness.core.limits import refuse_repeated

PROG = "python -m harness"
DESCRIPTION = (
    "Measure N ONNX Runtime sessions with and without file-mapped weights (the QNN EP's "
    "disable_file_mapped_weights=0/1), judge the run and render a self-contained report. "
    "Also installed as the console script qnn-fmw-harness."
)
EXIT_CODES = (
    "Exit codes: 0 pass, 1 a worker or gate failed or the run is incomplete, 2 usage or input error, 130 interrupted."
)


def add_run_options(
    parser: argparse.ArgumentParser,
    names: list[str] | None = None,
    *,
    kind: str = "run",
    variants: dict[str, Any] | None = None,
    targets: tuple[str, ...] | None = None,
) -> None:
    """The flags declared on `RunOptions` (or ``names``), with a command's ``variants``; dests are field names."""
    from harness.contract.options import add_run_options as declare
    from harness.core.units import SIZE_HELP
    from harness.targets import NAMES, get_target

    summaries = "; ".join(f"{n}: {get_target(n).summary.removesuffix(' (default)')}" for n in NAMES)
    groups: dict[str, Any] = {}

    def exclusive(group: str):
        if group not in groups:
            groups[group] = parser.add_mutually_exclusive_group()
        return groups[group].add_argument

    declare(
        parser.add_argument,
        names,
        variants=variants,
        targets=NAMES if targets is None else targets,
        text={"targets": summaries, "size_help": SIZE_HELP, "kind": kind},
        exclusive=exclusive,
    )


def _add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _add_run_arguments(run: argparse.ArgumentParser) -> None:
    add_run_options(run)
    run.add_argument(
        "--gates-file", type=Path, metavar="FILE", help="one gate expression per line, # comments (default: none)"
    )
    run.add_argument(
        "--history",
        type=Path,
        metavar="FILE",
        help="append this run's summary and headline to a history CSV; needs the report (default: none)",
    )
    run.add_argument("--no-report", action="store_true", help="skip report.html (headline.json is still written)")
    _add_quiet(run)
    _add_target_options(run)


def _target_option_type(option: Any):
    """argparse type for a target option: its own parser, its message on one line."""

    def parse(text: str) -> Any:
        try:
            return option.parse(text)
        except (ValueError, TypeError) as err:
            raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None

    parse.__name__ = option.name
    return parse


class _Once(argparse.Action):
    """A single-valued target option: given twice is refused, never "the last one wins"."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        earlier = getattr(namespace, self.dest)
        if earlier is not None:
            raise argparse.ArgumentError(self, f"given twice ({earlier!r} and {values!r}); give it once")
        setattr(namespace, self.dest, values)


def _add_target_options(parser: argparse.ArgumentParser) -> None:
    """Every registered target's own options, None unless given (so one given to another target is caught)."""
    from harness.targets import all_targets

    for target in all_targets():
        group = parser.add_argument_group(f"--target {target.name} options")
        for option in target.options:
            dest = f"target_option_{option.name}"
            default = option.default
            if isinstance(default, bool):
                default = str(default).lower()
            elif default in ({}, [], (), None):  # a repeatable option starts empty
                default = "none"
            text = f"{option.help} (default: {default})"
            if option.parse is None:
                group.add_argument(option.flag, dest=dest, action="store_const", const=True, default=None, help=text)
            elif option.repeat:
                group.add_argument(
                    option.flag,
                    dest=dest,
                    type=_target_option_type(option),
                    action="append",
                    default=None,
                    metavar=option.metavar,
                    help=text,
                )
            else:
                group.add_argument(
                    option.flag,
                    dest=dest,
                    type=_target_option_type(option),
                    action=_Once,
                    default=None,
                    choices=option.choices,
                    metavar=option.metavar,
                    help=text,
                )


def _add_cache_parser(sub: Any) -> None:
    cache = sub.add_parser(
        "cache",
        help="show or clear the model cache",
        formatter_class=HelpFormatter,
        description="The model cache holds generated, externalised and compiled models "
        "(content-keyed: a stale entry is never used). Where: --cache-dir, else "
        "$HARNESS_CACHE_DIR, else ~/.cache/qnn-fmw-harness.",
    )
    cache.add_argument("action", choices=("info", "clear"), help="info: entries and sizes; clear: delete every entry")
    folder = Variant(help="the cache folder (default: $HARNESS_CACHE_DIR or ~/.cache/qnn-fmw-harness)")
    add_run_options(cache, ["cache_dir"], variants={"cache_dir": folder})


#: ``bench`` measures one N of a larger model, repeated more: its own defaults and help.
BENCH_VARIANTS = {
    "model_size": Variant(
        default="512MiB", help="weights of the generated model ({size_help}); 1GiB with --workload generate"
    ),
    "processes": Variant(default="4", metavar="N", help="worker processes (count)"),
    "repeat": Variant(
        default="8",
        help="repeats (count); memory criteria use the median over them, timing criteria the 95%% interval "
        "of their ratios (inconclusive unless all of it is on one side of the threshold): single ms-scale "
        "init times on a 2-core machine are noisy",
    ),
    "intra_op_threads": Variant(
        help="intra-op threads of every session (default: ORT's choice). 1 takes out a scheduler tick "
        "that session creation waited at random for the pool's second thread, 4 ms on a 250 Hz kernel, "
        "in both targets alike (docs/models-and-cache.md)",
    ),
}


def _add_bench_parser(sub: Any) -> None:
    bench = sub.add_parser(
        "bench",
        help="the headline benchmark: cpu mapped/heap vs ort-native, criteria as gates",
        description="A run of --target cpu with --peer ort-native, judged by the criteria of "
        "harness/bench.gates; writes report.html, headline.json and bench.json.",
        epilog=EXIT_CODES,
        formatter_class=HelpFormatter,
    )
    add_run_options(
        bench,
        ["model_size", "processes", "repeat", "intra_op_threads", "workload", "prompt_tokens", "new_tokens"]
        + ["out", "replace", "cache_dir"],
        kind="bench",
        variants=BENCH_VARIANTS,
    )
    _add_quiet(bench)


#: The run options `capacity` takes: the model, its sessions, the modes, the limit, where to write.
CAPACITY_OPTIONS = [
    "target",
    "models",
    "model_size",
    "shapes",
    "free_dims",
    "input_values",
    "session_config",
    "provider_options",
    "intra_op_threads",
    "sessions_per_process",
    "workload",
    "prompt_tokens",
    "prompt_ids",
    "new_tokens",
    "modes",
    "memory_limit",
    "worker_timeout_s",
    "out",
    "replace",
    "cache_dir",
    "labels",
]


def _add_capacity_parser(sub: Any) -> None:
    from harness.core.units import SIZE_HELP

    capacity = sub.add_parser(
        "capacity",
        help="how many sessions really fit under a memory limit, per mode, beside the projection",
        description="Per mode, the largest N for which all N workers start, answer correctly and stay alive "
        "inside a memory container of --memory-limit (Linux cgroup, as root; Windows job memory limit), found by "
        "doubling then bisection, each probe a group run; printed beside what the start-up peak projects. Writes "
        "a run folder with capacity.json and report.html (N against survived).",
        epilog=f"{SIZE_HELP}.\nExit codes: 0 an answer for every mode, 1 a mode left inconclusive (a probe "
        "failed for another reason than the limit), 2 usage or input error, 130 interrupted.",
        formatter_class=HelpFormatter,
    )
    add_run_options(capacity, CAPACITY_OPTIONS, kind="capacity")
    capacity.add_argument(
        "--max-processes",
        type=argtypes.positive_int,
        default=16,
        metavar="N",
        help="the cap of the search: no probe runs more workers (count)",
    )
    capacity.add_argument("--json", type=Path, metavar="FILE", help="also write capacity.json here (default: none)")
    capacity.add_argument("--no-report", action="store_true", help="skip report.html")
    capacity.add_argument("--quiet", action="store_true", help="no progress on stderr")


def build_parser() -> argparse.ArgumentParser:
    from harness.core.gates import metrics_epilog
    from harness.core.units import SIZE_HELP

    parser = OneLineArgumentParser(prog=PROG, description=DESCRIPTION, epilog=EXIT_CODES, formatter_class=HelpFormatter)
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        parser_class=OneLineArgumentParser,
        metavar="{run,bench,capacity,report,cache,doctor}",
    )
    run = sub.add_parser(
        "run",
        help="measure N sessions with and without file-mapped weights",
        description="Measure N worker processes x M sessions in mapped and heap mode, print the "
        "judgement, write results.csv, summary.csv, metadata.json, headline.json and "
        "report.html into --out.",
        epilog=f"{metrics_epilog()}\n{SIZE_HELP}.\n{EXIT_CODES}",
        formatter_class=HelpFormatter,
    )
    _add_run_arguments(run)
    _add_bench_parser(sub)
    _add_capacity_parser(sub)
    sub.add_parser(
        "report",
        help="render report.html from run folders, compare with a --baseline (see: report --help)",
        add_help=False,
    )
    _add_cache_parser(sub)
    doctor = sub.add_parser(
        "doctor",
        help="what the QNN EP reports on this machine: EP devices, NPU, HTP, "
        "RPCMem, file mapping, and whether it is a QNN device",
        description="Probe the QNN EP in a child process: EP devices, NPU, HTP, RPCMem, file "
        "mapping, and whether this machine is a QNN device.",
        epilog="Exit code 0 whenever a verdict was reached (no NPU is a finding, not an error); 2 usage error.",
        formatter_class=HelpFormatter,
    )
    from harness.targets import all_targets

    probed = tuple(t.name for t in all_targets() if t.has_probe)
    variant = Variant(default=probed[0], help="the target to probe")
    add_run_options(doctor, ["target"], targets=probed, variants={"target": variant})
    doctor.add_argument("--json", type=Path, metavar="FILE", help="also write the report as JSON (default: none)")
    doctor.add_argument("--timeout", type=argtypes.timeout, default="120", metavar="SECONDS", help="probe time limit")
    return parser


def target_options(ns: argparse.Namespace) -> dict[str, Any]:
    """The options given for the chosen target; InputError for another target's option."""
    from harness.targets import all_targets

    chosen: dict[str, Any] = {}
    for target in all_targets():
        for option in target.options:
            value = getattr(ns, f"target_option_{option.name}")
            if value is None:
                continue
            if target.name != ns.target:
                raise InputError(f"{option.flag} only applies to --target {target.name}")
            if option.repeat:
                refuse_repeated(value, option.flag)
            chosen[option.name] = dict(value) if option.repeat else value
    return chosen


def commands_overview() -> str:
    """What ``python -m harness`` alone prints: the commands, one line each, and where to go on."""
    sub = next(a for a in build_parser()._subparsers._group_actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    width = max(map(len, helps))
    lines = [f"usage: {PROG} COMMAND [options]   ({PROG} COMMAND --help for each command's options)", "commands:"]
    lines += [f"  {name.ljust(width)}  {text}" for name, text in helps.items()]
    lines.append(f"start with: {PROG} run   (the default: cpu target, a generated 256 MiB model, 4 processes)")
    return "\n".join(lines)
