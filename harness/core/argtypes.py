"""The command line's argument types: each parses one value and says what is wrong with it in
one line (argparse prints it as ``error: argument --X: ...``, exit 2). Shared by the run
options' declarations (`harness.contract.options`) and the parser (`harness.cli_parser`)."""

from __future__ import annotations

import argparse
import math
import re

from harness.core.errors import InputError
from harness.core.units import ascii_float, ascii_int
from harness.core.vocab import MODES

#: Hidden test hooks of the reliability suites (--inject-worker-fault I=ACTION): make worker I
#: fail, drop its weight pages before it is sampled, or stop at a moment of its start-up.
WORKER_FAULTS = (
    "crash",
    "signal",
    "hang",
    "raise",
    "drop-weight-pages",
    "exit-after-ready",
    "pause-spawn",
    "pause-start",
    "pause-imports",
    "pause-session",
)


def int_at_least(minimum: int):
    """An argparse type: a whole number >= ``minimum``, with a one-line message otherwise."""

    def parse(text: str) -> int:
        try:
            value = ascii_int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} must be >= {minimum}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


positive_int = int_at_least(1)


def token_ids(text: str) -> list[int]:
    """``3,1,4`` -> ``[3, 1, 4]``: token ids, each a whole number >= 0."""
    try:
        ids = [ascii_int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected token ids such as 3,1,4") from None
    if not ids or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: token ids are whole numbers >= 0")
    return ids


def processes(text: str) -> list[int]:
    from .limits import parse_process_list

    try:
        return parse_process_list(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def modes(text: str) -> list[str]:
    values = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in values if m not in MODES]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"{text!r}: modes are {','.join(MODES)}")
    return list(dict.fromkeys(values))


def timeout(text: str) -> float:
    try:
        value = ascii_float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds > 0")
    return value


def size(text: str) -> int:
    from harness.core.units import parse_size

    try:
        return parse_size(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


#: The smallest generated model: one layer of the narrowest chain (128 x 128 fp32).
MIN_GENERATED_BYTES = 64 * 1024


def generated_size(text: str) -> int:
    """A --model-size: a size of at least one layer of the generated chain, the error echoing
    what the user typed (``'10KiB'``, not ``10240``)."""
    value = size(text)
    if value < MIN_GENERATED_BYTES:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the generated model needs at least 64 KiB of weights "
            "(sizes are bytes unless given a unit, e.g. 64MiB)"
        )
    return value


def projection(text: str) -> tuple[int, int]:
    """``8x4GiB`` -> (8 sessions, 4 GiB of weights)."""
    from harness.core.units import parse_projection

    try:
        return parse_projection(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def worker_fault(text: str) -> tuple[int, str]:
    index, _, action = text.partition("=")
    if not (index.isascii() and index.isdigit()) or action not in WORKER_FAULTS:
        raise argparse.ArgumentTypeError(f"{text!r}: expected INDEX=ACTION, ACTION in {','.join(WORKER_FAULTS)}")
    return int(index), action


def label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or any(c in key for c in ",;=\n"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE, e.g. device=x-elite")
    return key.strip(), value.strip()


def labels(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """--label KEY=VALUE pairs; a key given twice is a mistake, not "the last one wins"."""
    labels: dict[str, str] = {}
    for key, value in pairs:
        if key in labels:
            raise InputError(f"--label {key}: given twice ({labels[key]!r} and {value!r})")
        labels[key] = value
    return labels


def attach_dash_values(argv: list[str]) -> list[str]:
    """argparse reads ``--model-size -5MiB`` as two options ("expected one argument"): a value
    starting with a dash and a digit is attached to the flag before it (``--model-size=-5MiB``),
    so the option's own type says what is wrong with it."""
    out: list[str] = []
    for item in argv:
        if out and re.fullmatch(r"-\d.*", item) and out[-1].startswith("--") and "=" not in out[-1]:
            out[-1] = f"{out[-1]}={item}"
        else:
            out.append(item)
    return out
