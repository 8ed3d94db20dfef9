"""Upper bounds of every numeric option, and the rule that a key given twice is a mistake.

Why bounds: a number the harness turns into processes, threads, sessions, repeats, sleeps or
allocations must be one the machine can honour. Without a bound ``--intra-op-threads 100000``
grew the parent past 2 GiB (the reference session's thread pool) and ignored SIGTERM while
doing so. Each bound is far above any real use and is checked once, right after the command
line is parsed, before a model is built or a process started (one line, exit 2). docs/what-happens-when.md
lists them.

Why no repeated keys: ``--session-config k=1 --session-config k=2`` used to keep the last value
silently; the user meant one of them, and only they know which.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .errors import InputError
from .units import ascii_int

#: At most this many threads per CPU for --intra-op-threads (never above `MAX_THREADS`).
THREADS_PER_CPU = 4
MAX_THREADS = 1024


def max_threads() -> int:
    """The --intra-op-threads bound of this machine: 4 x its CPUs, at most 1024."""
    return min(MAX_THREADS, THREADS_PER_CPU * (os.cpu_count() or 1))


@dataclass(frozen=True)
class Bound:
    """The largest value an option takes, and what that is in words (docs and messages)."""

    flag: str
    dest: str
    maximum: float
    unit: str = ""


#: The bounds of ``run`` and ``bench`` (options absent from a command are skipped).
BOUNDS = (
    Bound("--processes", "processes", 1024),
    Bound("--max-processes", "max_processes", 1024),
    Bound("--sessions-per-process", "sessions_per_process", 1024),
    Bound("--repeat", "repeat", 1000),
    Bound("--runs", "runs", 1_000_000),
    Bound("--warmup", "warmup", 1_000_000),
    Bound("--concurrency", "concurrency", 256),
    Bound("--prompt-tokens", "prompt_tokens", 1_000_000),
    Bound("--new-tokens", "new_tokens", 1_000_000),
    Bound("--worker-timeout", "worker_timeout_s", 86_400, "s"),
    Bound("--worker-timeout", "worker_timeout", 86_400, "s"),
    Bound("--timeout", "timeout", 3_600, "s"),
    Bound("--model-size", "model_size", 64 * 1024**3, "bytes"),
    Bound("--map-failures", "target_option_map_failures", 1000),
    Bound("--max-attempts", "target_option_max_attempts", 100),
)
#: Values per list option (--processes 1,2,4,...) and K of --fault STAGE=K.
MAX_LIST = 64
MAX_FAULTS = 1000
#: Longest --label value, in characters.
MAX_LABEL = 256
#: --project-to: at most this many sessions of at most `MAX_PROJECTED_BYTES` of weights.
MAX_PROJECTED_SESSIONS = 1_000_000
MAX_PROJECTED_BYTES = 2**50


def _show(value: float, unit: str) -> str:
    if unit == "bytes":
        from .units import fmt_bytes

        return fmt_bytes(value)
    number = str(value) if isinstance(value, int) else f"{value:g}"
    return f"{number}{' ' + unit if unit else ''}"


def _check(flag: str, value: Any, maximum: float, unit: str = "", why: str = "") -> None:
    values = value if isinstance(value, (list, tuple)) else [value]
    for item in values:
        if isinstance(item, (int, float)) and not isinstance(item, bool) and item > maximum:
            raise InputError(f"{flag} {_show(item, unit)}: at most {_show(maximum, unit)}{why}")


def check_bounds(ns: Any, prefix: str = "") -> None:
    """InputError (one line) for any option of the parsed command line ``ns`` above its bound;
    ``prefix``: the flags' namespace in messages (the pytest plugin's ``fmw-``)."""
    for bound in BOUNDS:
        _check(f"--{prefix}{bound.flag[2:]}", getattr(ns, bound.dest, None), bound.maximum, bound.unit)
    processes = getattr(ns, "processes", None)
    if isinstance(processes, list) and len(processes) > MAX_LIST:
        raise InputError(f"--{prefix}processes: {len(processes)} values, at most {MAX_LIST}")
    threads = getattr(ns, "intra_op_threads", None)
    _check("--intra-op-threads", threads, max_threads(), why=f" ({THREADS_PER_CPU} x the {os.cpu_count()} CPU(s))")
    for _, count in getattr(ns, "target_option_fault", None) or []:
        _check("--fault K", count, MAX_FAULTS)
    for key, value in getattr(ns, "labels", None) or getattr(ns, "label", None) or []:
        if len(value) > MAX_LABEL:
            raise InputError(f"--label {key}: {len(value)} characters, at most {MAX_LABEL}")
    projection = getattr(ns, "project_to", None)
    if projection is not None:
        _check("--project-to sessions", projection[0], MAX_PROJECTED_SESSIONS)
        _check("--project-to size", projection[1], MAX_PROJECTED_BYTES, "bytes")


def refuse_repeated(items: Iterable[str | tuple], flag: str) -> None:
    """InputError when two ``KEY=VALUE`` items (or parsed (key, value) pairs) of a repeatable
    option name the same key: which one was meant is the user's to say, never "the last one
    wins"."""
    seen: dict[str, Any] = {}
    for item in items:
        key = str(item[0]) if isinstance(item, tuple) else item.partition("=")[0].strip()
        item = "=".join(map(str, item)) if isinstance(item, tuple) else item
        if key in seen:
            raise InputError(f"{flag} {key}: given twice ({seen[key]!r} and {item!r}); give it once")
        seen[key] = item


def check_text_arguments(argv: Iterable[str]) -> None:
    """InputError for an argument this locale cannot hold as text. Under ``LC_ALL=C`` without
    Python's UTF-8 mode a non-ASCII path (``modèle.onnx``) arrives with its bytes escaped
    (surrogates), and the first hash, JSON record or worker spec of it fails deep in the run:
    refuse it before any work, with the cure."""
    import sys

    for arg in argv:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = arg.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
            raise InputError(
                f"argument '{shown}': not text in this locale (file system encoding "
                f"{sys.getfilesystemencoding()}); run with LC_ALL=C.UTF-8 or PYTHONUTF8=1"
            ) from None


def parse_process_list(text: str) -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4] (sorted, once each): the --processes of ``run`` and of the
    pytest plugin. InputError (without the option's name: argparse and pytest add it)."""
    try:
        values = [ascii_int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise InputError(f"{text!r}: expected a list like 1,2,4,8") from None
    if not values or any(v < 1 for v in values):
        raise InputError(f"{text!r}: each N must be >= 1")
    return sorted(set(values))
