"""``headline.json``: a judged run in a form a machine can compare, defined once here.

Why a file of its own: results.csv and summary.csv hold every figure but need this project's
rules (which N, which metric, medians over repeats) to mean anything; a nightly job that asks
"did ORT 1.33 regress the saving?" wants the answer those rules give, with the versions it was
measured with. `headline_document` builds it from the run's one `Judgement`, so it can never
disagree with the terminal or report.html. The command line writes it next to the run's
tables (``harness run``, ``harness bench``).

Format (``format_version`` 1; keys are only ever added within a version):

- ``format_version`` (int), ``kind`` ("run" | "bench"), ``run_id``, ``target``, ``peer``,
  ``status`` (complete | running | interrupted | unknown), ``started``, ``duration_s``;
- ``verdict`` (pass | fail | incomplete), ``reasons`` (why not pass), ``feature``
  ({``state``: active | partial | unavailable | disabled | option-ignored | ep-error | unknown |
  not-measured, ``text``}),
  ``sentence`` (the plain-language summary the report opens with);
- ``model``, ``weights_bytes`` (tensor bytes), ``weights_file_bytes`` (the files the heap path
  copies: tensors plus alignment padding), ``labels`` ({KEY: VALUE} given with --label);
- ``contention``: {``contended_groups``, ``groups``, ``load_avg_max``, ``cpu_share_min``}: how
  busy the machine was while the timings were taken (timing gates read "contended" then);
- ``headline``: the gate metrics at the largest N x M measured in both modes (medians over
  repeats), e.g. ``mapped_pss_ratio``, ``init_ratio``, ``processes``, ``sessions``;
- ``per_n``: one entry per (N, M) measured in both modes, in N order: ``processes``,
  ``sessions_per_process``, ``sessions``, ``repeats`` (complete pairs: the only ones the
  figures come from), ``incomplete_repeats``, ``mapped`` and ``heap`` ({SummaryRow
  figure: median over repeats}, bytes and seconds, incl. ``copied_bytes_median``,
  ``mapped_resident_bytes_median``, ``runtime_bytes``), ``ratios`` ({metric: the ratio of the
  two medians, `median_ratio`: the factor the sentence prints}), ``ratio_range`` ({metric:
  [min, max] of the per-repeat ratios: their spread}),
  ``saving`` ({``metric``: "pss" | "private", ``bytes``: heap - mapped, ``fraction``:
  1 - mapped/heap});
- ``timing_spread``: {timing metric: {``repeats``, ``min``, ``max``, ``interval`` ([low, high],
  the 95 % interval of the ratio over repeats; null below 2)}} at the headline's N x M: no
  timing figure goes without its spread;
- ``latency``: at the headline's first complete pair: ``processes``, ``sessions_per_process``,
  ``repeat``, ``runs``, ``warmup``, ``concurrency``, ``page_cache``, and per mode (``mapped``,
  ``heap``) ``mean``, ``stdev``, ``min``, ``p50``, ``p90``, ``p95``, ``p99``, ``max`` (s),
  ``inferences_per_s``, ``init_s``, ``first_run_s``, ``init_plus_first_run_s`` and
  ``first_run_penalty_s`` (first inference minus the steady p50); null without a pair;
- ``fits``: ``sentence`` ("with heap, 2 sessions of this model fit this machine's commit
  limit; mapped, 11 fit"), ``modes`` ({mode: ``bound``, ``headroom_bytes``,
  ``peak_per_worker_bytes``, ``sessions_fit``}) and ``assumptions``; null without a pair;
- ``gates``: [{``expr``, ``status`` (pass | fail | skip | inconclusive), ``value``, ``interval``
  ([low, high]: a timing gate's 95 % interval over its repeats, else null), ``repeats`` (the
  repeats a timing gate was judged on, else null), ``reason``, ``why``};
- ``versions``: {``onnxruntime``, each target's own keys (``Target.version_keys``: the qnn
  target's ``onnxruntime_qnn``, ``qnn_sdk``), ``python``, ``os``, ``cpu``, ``commit``} (null
  where unknown), plus ``system``, ``arch``, ``hostname``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .faultnotes import fault_sentence
from .files import write_json_atomic
from .metrics import FAIR, FAIR_BY_KEY, FIGURES, RATIO_COLUMNS, fair_figure, fair_key
from .passes import LABELS, SEQUENTIAL, contention, contention_text, memory_view, timing_start, timing_view
from .schema import SummaryRow
from .summary import complete_pair, median, median_ratio, pair_ratio, paired, sessions_of, timing_pairs
from .timing import spread_text, timing_rounds, timing_spread
from .units import fmt_bytes, fmt_percent, fmt_ratio, fmt_seconds
from .vocab import FeatureStatus, Mode

HEADLINE_JSON = "headline.json"
HEADLINE_FORMAT_VERSION = 1
#: headline.json version key -> metadata.json ``env`` key, besides the targets' own keys
#: (`Target.version_keys`, which go after onnxruntime: see `version_keys`).
MACHINE_VERSION_KEYS = {
    "python": "python",
    "os": "os",
    "cpu": "cpu",
    "commit": "git_commit",
    "system": "system",
    "arch": "arch",
    "hostname": "hostname",
}


#: Below this a saving larger than the shared weights explain is measurement noise, not news.
SAVING_SLACK_BYTES = 4 * 1024**2
#: Mapped workers' copied_bytes above this share of the weights (plus the slack) are named.
COPIED_SLACK_SHARE = 0.05


def per_n(summary: Sequence[SummaryRow], target: str, view=memory_view) -> list[dict[str, Any]]:
    """Mapped and heap side by side at every (N, M) ``target`` measured in both modes, from its
    complete pairs only (a group with a dead or unsampled worker has no figures that compare;
    ``incomplete_repeats`` counts those left out), as the gates see them; a system delta within
    its noise has no ratio. ``view``: the pass (`passes`): the concurrent one by default, whose
    memory figures these are; `timing_view` for the timing pass's times."""
    by_size: dict[tuple[int, int], list[tuple[SummaryRow, SummaryRow]]] = defaultdict(list)
    for mapped, heap in paired(s for s in view(summary) if s.target == target):
        by_size[(mapped.processes, mapped.sessions_per_process)].append((mapped, heap))
    out = []
    for (n, m), measured in sorted(by_size.items()):
        pairs = [p for p in measured if complete_pair(*p)]
        mapped_rows, heap_rows = [p[0] for p in pairs], [p[1] for p in pairs]
        entry: dict[str, Any] = {
            "processes": n,
            "sessions_per_process": m,
            "sessions": sessions_of(measured[0][0]),
            "repeats": len(pairs),
            "incomplete_repeats": len(measured) - len(pairs),
            **{
                mode: {f.column: median(getattr(r, f.column) for r in rows) for f in FIGURES if f.per_n}
                for mode, rows in ((Mode.MAPPED, mapped_rows), (Mode.HEAP, heap_rows))
            },
            "ratios": {},
            "ratio_range": {},
        }
        for name, column in RATIO_COLUMNS.items():  # the factor is the ratio of the printed medians
            values = [v for v in (pair_ratio(a, b, column) for a, b in pairs) if v is not None]
            entry["ratios"][name] = median_ratio(pairs, column)
            entry["ratio_range"][name] = [min(values), max(values)] if values else None
        fair = fair_figure(mapped_rows + heap_rows)
        mapped_value = entry[Mode.MAPPED][fair.column] if fair else None
        heap_value = entry[Mode.HEAP][fair.column] if fair else None
        saved = heap_value - mapped_value if mapped_value is not None and heap_value is not None else None
        # the fraction is 1 - the headline ratio (the ratio of the two medians), as the gates see it
        fair_ratio = entry["ratios"][fair.ratio] if fair else None
        entry["saving"] = {
            "metric": fair_key(fair),
            "bytes": saved,
            "fraction": 1 - fair_ratio if fair_ratio is not None and saved is not None else None,
        }
        out.append(entry)
    return out


#: metadata ``env`` keys of the machine and the generic stack: never a target's own version.
GENERIC_ENV_KEYS = frozenset(
    ("os", "system", "arch", "cpu", "cpu_count", "ram_bytes", "python", "onnxruntime", "numpy")
    + ("hostname", "git_commit", "version_labels")
)
_VERSION_KEY = re.compile(r"[a-z][a-z0-9_]{0,47}")
MAX_TARGET_VERSION_KEYS = 32


def target_version_labels(env: dict[str, Any]) -> dict[str, str]:
    """A run's target version keys and what reports call them, as its metadata recorded them
    (``env["version_labels"]``: every target's `Target.version_keys`, written by the runner), so
    core and reports never import the targets. A run recorded before that: its other env keys,
    each its own label. Untrusted: identifier keys only, a bounded number, short labels."""
    recorded = env.get("version_labels")
    if isinstance(recorded, dict):
        pairs = [(str(k), str(v)[:60]) for k, v in recorded.items()]
    else:
        pairs = [(str(k), str(k)) for k in env if k not in GENERIC_ENV_KEYS]
    return dict([(k, v) for k, v in pairs if _VERSION_KEY.fullmatch(k)][:MAX_TARGET_VERSION_KEYS])


def version_keys(env: dict[str, Any]) -> dict[str, str]:
    """headline.json version key -> metadata.json ``env`` key: onnxruntime, the targets' own
    versions (same key in both), then the machine's."""
    targets = {key: key for key in target_version_labels(env)}
    return {"onnxruntime": "onnxruntime", **targets, **MACHINE_VERSION_KEYS}


def versions(env: dict[str, Any]) -> dict[str, Any]:
    return {key: env.get(source) or None for key, source in version_keys(env).items()}


def headline_sentence(judgement: Any) -> str:
    """One plain sentence: the saving at the largest N (absolute and %), the init speed-up, the
    verdict and whether file mapping was really exercised (when it was not, the figures are
    stated as measurements of one path, never as a saving)."""
    run = judgement.run
    entries = per_n(run.summary, run.target)
    feature = judgement.feature
    verdict = f"Verdict: {judgement.verdict}" + (f" ({'; '.join(judgement.reasons)})" if judgement.reasons else "")
    if feature.state == FeatureStatus.ACTIVE:
        tail = f"{verdict}; file mapping active."
    else:
        tail = f"{verdict}; file mapping {feature.state}: {feature.text}."
    if not entries:
        none = f"No mapped/heap pair was measured for target {run.target}, so there is no saving to state."
        return f"{none}{fault_sentence(judgement)} {tail}"
    top = max(entries, key=lambda e: (e["sessions"], e["processes"]))
    saving = top["saving"]
    weights = fmt_bytes(run.weights_bytes) if run.weights_bytes else "?"
    files = " of weights"
    if run.weights_file_bytes:  # what the heap baseline copies: the files, padding included
        files = f" of tensors in {fmt_bytes(run.weights_file_bytes)} of weights files, which the heap path copies"
    size = f"{top['processes']} process(es) x {top['sessions_per_process']} session(s)"
    where = f"With {size} ({run.target}, {weights}{files})"
    busy = contention_text(judgement) + fault_sentence(judgement)
    fair = FAIR_BY_KEY.get(saving["metric"], FAIR[-1])
    label, column = fair.short, fair.column
    timed, started = timing_entry(run.summary, run.target, top)
    init_m, init_h = timed[Mode.MAPPED]["init_s_median"], timed[Mode.HEAP]["init_s_median"]
    times = f"{fmt_seconds(init_m)} vs {fmt_seconds(init_h)} median init"
    start_m, start_h = timed[Mode.MAPPED]["startup_s_median"], timed[Mode.HEAP]["startup_s_median"]
    if start_m is not None and start_h is not None:  # mapped pages are faulted in by the first run
        times += f", {fmt_seconds(start_m)} vs {fmt_seconds(start_h)} init + first inference"
    if feature.state not in (FeatureStatus.ACTIVE, FeatureStatus.PARTIAL):
        memory = (
            f"mapped and heap mode measured {fmt_bytes(top[Mode.MAPPED][column])} vs "
            f"{fmt_bytes(top[Mode.HEAP][column])} summed {label}"
            if saving["bytes"] is not None
            else "no fair memory figure (PSS or private bytes) was measured"
        )
        return (
            f"{where}, {memory} and {times}, but file mapping was NOT exercised ({feature.state}), so this is "
            f"no measurement of its saving.{busy} {verdict}."
        )
    memory = _saving_text(top, run.weights_bytes, label, column, run.gathered_weights_bytes)
    init = started + _init_text(timed, times, timing_spread(run.summary, timing_rounds(run)).get("init_ratio"))
    if contention_text(judgement):  # memory leads; a factor timed on a contended machine is only indicative
        init = f"indicatively (timed on a contended machine), {init}"
    return f"{where}, {memory}, and {init}.{busy} {tail}"


def timing_entry(summary: Sequence[SummaryRow], target: str, top: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(the `per_n` entry the init times are quoted from, the words naming its pass): the
    timing pass's at the headline's N x M when the run has one, else ``top`` itself."""
    if timing_start(summary) != SEQUENTIAL:
        return top, ""
    size = (top["processes"], top["sessions_per_process"])
    entry = next(
        (e for e in per_n(summary, target, timing_view) if (e["processes"], e["sessions_per_process"]) == size), None
    )
    if entry is None or not entry["repeats"]:
        return top, ""
    return entry, f"started {LABELS[SEQUENTIAL]} (the timing pass), "


def beyond_sharing(top: dict[str, Any], weights: int, gathered: int | None = None) -> str:
    """Why a saving exceeds what sharing explains, from the memory split: the heap path copies
    every byte, a mapped worker has only the pages its inferences touched; when the untouched
    part can be embedding tables (``gathered``: bytes read through Gather), that the inputs
    index few of their rows."""
    resident = top[Mode.MAPPED].get("mapped_resident_bytes_median")
    if resident is None or not weights:
        return "the rest is other memory the two modes use differently"
    text = (
        f"the mapped workers touched only {fmt_percent(min(resident / weights, 1))} of the weights "
        f"({fmt_bytes(resident)} of {fmt_bytes(weights)} resident each), while every heap session copies all of them"
    )
    if gathered and gathered >= 0.5 * (weights - resident):
        text += (
            f": {fmt_bytes(gathered)} of the weights are embedding tables (read by Gather) and the inputs index "
            "few of their rows, so the other rows' pages are never read; inputs that index more rows shrink "
            "this part of the saving"
        )
    return text


def still_copied(top: dict[str, Any], weights: int | None) -> str:
    """ " - yet the mapped workers copied X each" when mapped mode still holds weight copies."""
    copied = top[Mode.MAPPED].get("copied_bytes_median")
    if copied is None or not weights or copied <= COPIED_SLACK_SHARE * weights + SAVING_SLACK_BYTES:
        return ""
    return f"; yet each mapped worker still copied {fmt_bytes(copied)} of weights (copied_bytes)"


def _saving_text(
    top: dict[str, Any], weights_bytes: int | None, label: str, column: str, gathered: int | None = None
) -> str:
    """The memory clause of `headline_sentence` when mapping was exercised: the saving, and
    when it exceeds what sharing the weights can explain, that it does."""
    saving = top["saving"]
    if saving["bytes"] is None:
        return "no fair memory figure (PSS or private bytes) was measured"
    less = saving["bytes"] >= 0
    memory = (
        f"mapped weights used {fmt_bytes(abs(saving['bytes']))} {'less' if less else 'MORE'} summed "
        f"{label} than heap ({fmt_bytes(top[Mode.MAPPED][column])} vs {fmt_bytes(top[Mode.HEAP][column])}, "
        f"{fmt_percent(abs(saving['fraction'] or 0))} {'saved' if less else 'extra'})"
    )
    # PSS counts the one shared copy once: sharing saves N - 1 copies. Private bytes (Windows)
    # count a mapped view of a file in no process: sharing saves all N.
    copies = top["sessions"] - (1 if saving["metric"] == "pss" else 0)
    explained = copies * (weights_bytes or 0)
    if less and weights_bytes and saving["bytes"] > 1.1 * explained + SAVING_SLACK_BYTES:
        memory += (
            f" - more than sharing the weights can explain ({copies} x {fmt_bytes(weights_bytes)} = "
            f"{fmt_bytes(explained)}): {beyond_sharing(top, weights_bytes, gathered)}"
        )
    return memory + still_copied(top, weights_bytes)


def _init_text(top: dict[str, Any], times: str, spread: dict | None = None) -> str:
    """The init clause: the ratio of the two median times it prints (`median_ratio`, as the
    init_ratio gates judge it), with its spread over repeats (``spread``: `timing_spread`'s
    entry for init_ratio)."""
    init_ratio = top["ratios"].get("init_ratio")
    if not init_ratio:
        return "init time was not measured"
    speed = 1 / init_ratio
    times += f"; init ratio {fmt_ratio(init_ratio)}, {spread_text(spread)}"
    return (
        f"sessions started {speed:.1f}x faster ({times})"
        if speed >= 1
        else f"sessions started {1 / speed:.1f}x SLOWER ({times})"
    )


def startup_documents(run: Any) -> dict[str, Any]:
    """headline.json's ``latency`` (percentiles, inferences/s, init, first inference and init +
    first inference per mode) and ``fits`` (how many sessions fit this machine at the start-up
    peak) keys, from the headline's first complete pair (None: no complete pair)."""
    from .capacity import measured_for
    from .fits import fits, fits_document
    from .latency import headline_latency

    own = [s for s in run.summary if s.target == run.target]
    memory = [p for p in timing_pairs(memory_view(own)) if complete_pair(*p)]
    timed = [p for p in timing_pairs(own) if complete_pair(*p)]
    found = fits(*memory[0]) if memory else {}
    document = fits_document(found) if memory else None
    measured = measured_for(run, found)
    if measured is not None or document is not None:
        document = document or fits_document({})
        document["measured"] = measured[1] if measured is not None else None
    return {"latency": headline_latency(timed, run.run), "fits": document}


def headline_document(judgement: Any, *, kind: str = "run") -> dict[str, Any]:
    """The ``headline.json`` content of one judged run (see the module docstring)."""
    run = judgement.run
    r = run.run
    return {
        "format_version": HEADLINE_FORMAT_VERSION,
        "kind": kind,
        "run_id": run.run_id,
        "target": run.target,
        "peer": r.get("peer"),
        "status": run.status,
        "started": r.get("started"),
        "duration_s": r.get("duration_s"),
        "verdict": judgement.verdict,
        "reasons": list(judgement.reasons),
        "feature": {"state": judgement.feature.state, "text": judgement.feature.text},
        "sentence": headline_sentence(judgement),
        "model": r.get("model"),
        "weights_bytes": run.weights_bytes,
        "weights_file_bytes": run.weights_file_bytes,
        "contention": contention(run.summary, run.target),
        "labels": dict(r.get("labels") or {}),
        "headline": dict(judgement.values),
        "timing_spread": timing_spread(run.summary, timing_rounds(run)),
        "per_n": per_n(run.summary, run.target),
        "timing_pass": (
            {"start": SEQUENTIAL, "per_n": per_n(run.summary, run.target, timing_view)}
            if timing_start(run.summary) == SEQUENTIAL
            else None
        ),
        **startup_documents(run),
        "gates": [
            {
                "expr": g.gate.expr,
                "status": g.status,
                "value": g.value,
                "interval": list(g.interval) if g.interval else None,
                "repeats": g.repeats,
                "repeats_to_decide": g.repeats_to_decide,
                "reason": g.reason,
                "why": g.gate.why or None,
            }
            for g in judgement.gates
        ],
        "versions": versions(run.env),
    }


def write_headline(folder: Path | str, judgement: Any, *, kind: str = "run") -> Path:
    """Write ``folder/headline.json`` atomically; returns its path."""
    return write_json_atomic(Path(folder) / HEADLINE_JSON, headline_document(judgement, kind=kind), what=HEADLINE_JSON)


def read_headline(path: Path | str) -> dict[str, Any]:
    """A headline.json written by this version (ValueError otherwise)."""
    from .inputfiles import parse_json_bounded, read_text_bounded

    # bounded as every JSON of a run folder (rundata.MAX_JSON_BYTES / MAX_JSON_DEPTH)
    data = parse_json_bounded(read_text_bounded(path, "", 16 * 1024**2), str(path), 32, allow_nan=False)
    if not isinstance(data, dict) or data.get("format_version") != HEADLINE_FORMAT_VERSION:
        raise ValueError(f"{path}: not a headline.json of format_version {HEADLINE_FORMAT_VERSION}")
    return data


_FACTOR = re.compile(r"([\d.]+)x (?:faster|SLOWER) \(([\d.]+) (ms|s) vs ([\d.]+) (ms|s) median init[,;)]")


def _bounds(number: str, unit: str) -> tuple[float, float]:
    """The interval of seconds a printed time stands for (half a unit of its last digit)."""
    scale = 1e-3 if unit == "ms" else 1.0
    half = 0.5 * 10 ** -len(number.partition(".")[2])
    return (float(number) - half) * scale, (float(number) + half) * scale


def factor_problem(sentence: str) -> str:
    """Why the speed-up factor of ``sentence`` is not the ratio of the two times it prints
    ("" when it is, or states none): one definition of every factor, checked on every run the
    test suites make (`harness.pytest_plugin`)."""
    match = _FACTOR.search(sentence)
    if not match:
        return ""
    factor, a, unit_a, b, unit_b = match.groups()
    (a_low, a_high), (b_low, b_high) = _bounds(a, unit_a), _bounds(b, unit_b)
    if min(a_low, b_low) <= 0:
        return ""  # a time printed as 0.0: no ratio can be checked against it
    if b_low + b_high < a_low + a_high:  # the factor is always the larger time over the smaller
        (a_low, a_high), (b_low, b_high) = (b_low, b_high), (a_low, a_high)
    low, high = b_low / a_high, b_high / a_low
    if not low - 0.05 <= float(factor) <= high + 0.05:
        return f"the factor {factor}x is not the ratio of the times it prints ({a} {unit_a} vs {b} {unit_b})"
    return ""
