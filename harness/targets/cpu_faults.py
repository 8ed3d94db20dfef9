"""The cpu target's faults (`--fault`: its model of what the QNN EP does when a stage fails,
docs/upstream.md) and its opt-ins that are not upstream behaviour, read by the target and its notes."""

from __future__ import annotations

from typing import Any

#: Stages of mapper_impl's pipeline a fault can be injected at (`--fault STAGE[=K]`).
FAULT_STAGES = ("map", "register", "create", "deregister")
#: `--fault late-release[=WHEN]`: when the failed attempt's release callbacks arrive.
LATE_WHEN = ("during", "after", "teardown")
#: `--fault` values that take no stage count.
SILENT_COPY = "silent-copy"
#: `--fallback-stages`: upstream (a failed mapping step fails the session) or all (lenient).
FALLBACK_STAGES = {"upstream": ("register", "create"), "all": ("map", "register", "create")}
#: `--failed-registration`: stale (upstream) or undo (onnxruntime-qnn PR #337's proposal).
FAILED_REGISTRATION = ("stale", "undo")
FAULT_HELP = (
    "inject faults into mapper_impl's pipeline as the EP has them: the first K attempts of "
    f"STAGE ({', '.join(FAULT_STAGES)}) fail in every session (repeatable; K defaults to 1; a failed "
    "mapping step fails the session, a failed registration is left stale, as upstream); register@K: "
    "the K-th registration fails after K-1 succeeded; late-release[=during|after|teardown]: the failed "
    "attempt's release callbacks arrive during or after the direct read, or while the session is torn "
    "down (alone: with a create failure); silent-copy: mapped sessions read the weights into private "
    "memory and log nothing (onnxruntime-qnn #677's silent direct read)"
)


def parse_fault(text: str) -> tuple[str, int | str | bool]:
    """``STAGE`` or ``STAGE=K``: the first K attempts of that stage fail in every session;
    ``register@K``: the K-th registration fails after K-1 succeeded; ``late-release[=WHEN]``:
    the failed attempt's release callbacks arrive during (default), after the direct read or at
    teardown; ``silent-copy``: the mapped sessions' weights are copied, silently."""
    if text == SILENT_COPY:
        return "silent_copy", True
    if text.startswith("register@"):
        k = text.partition("@")[2]
        if not (k.isascii() and k.isdigit()) or int(k) < 1:
            raise ValueError("register@K needs a whole number K >= 1")
        return "register_at", int(k)
    if text.partition("=")[0] == "late-release":
        when = text.partition("=")[2] or "during"
        if when not in LATE_WHEN:
            raise ValueError(f"late-release=WHEN takes {', '.join(LATE_WHEN)}")
        return "late_release", when
    stage, sep, count = text.partition("=")
    if stage not in FAULT_STAGES:
        raise ValueError(
            f"stages are {','.join(FAULT_STAGES)}, register@K, late-release[={'|'.join(LATE_WHEN)}], {SILENT_COPY}"
        )
    if not sep:
        return stage, 1
    if not (count.isascii() and count.isdigit()):
        raise ValueError("K must be a whole number >= 0")
    return stage, int(count)


def refuse_two_ways(given: dict) -> None:
    """--map-failures K is --fault map=K, register=K and register@K both say which registrations
    fail: both ways given is a mistake, never "the last one wins"."""
    from harness.core.errors import InputError

    faults = given.get("fault") or {}
    pairs = [(given.get("map_failures"), "map", "--map-failures {}", "--fault map={}")]
    pairs.append((faults.get("register_at"), "register", "--fault register@{}", "--fault register={}"))
    for value, stage, one, other in pairs:
        if value is not None and stage in faults:
            what = f"{one.format(value)} and {other.format(faults[stage])}"
            raise InputError(f"{what}: one fault given two ways; give it once")


def fault_plan(options: dict):
    """The FaultPlan the options ask for (``--fault`` and its shorthand ``--map-failures``), or None."""
    from mapper_impl import FaultPlan

    counts = dict(options.get("fault") or {})
    counts.pop("silent_copy", None)  # not a stage of the pipeline: the session's own copy
    if options.get("map_failures"):
        counts["map"] = options["map_failures"]
    extra = {key: counts.pop(key) for key in ("register_at", "late_release") if key in counts}
    counts = {stage: k for stage, k in counts.items() if k}
    if extra.get("late_release") and not (set(counts) - {"deregister"} or extra.get("register_at")):
        counts["create"] = 1  # late release callbacks need a failed attempt: a create failure
    plan = {f"{stage}_failures": k for stage, k in counts.items()} | extra
    return FaultPlan(**plan) if plan else None


def silent_copy(options: dict) -> bool:
    """`--fault silent-copy`: mapped sessions copy their weights into private memory."""
    return bool((options.get("fault") or {}).get("silent_copy"))


def faulted(options: dict) -> bool:
    """Any fault asked for (a plan of the pipeline or the silent copy)."""
    return fault_plan(options) is not None or silent_copy(options)


def pipeline_options(options: dict) -> dict[str, Any]:
    """`load_context` arguments of the two upstream-or-opt-in choices."""
    stages = FALLBACK_STAGES[options.get("fallback_stages") or "upstream"]
    return {"fallback_stages": stages, "failed_registration": options.get("failed_registration") or "stale"}


def not_upstream(options: dict) -> list[str]:
    """The opt-ins of a run that are not what the QNN EP does, each with what the EP does
    instead: the figures they shape are labelled with these words."""
    out = []
    if (options.get("fallback_stages") or "upstream") == "all":
        out.append(
            "--fallback-stages all: a failed mapping step falls back to a direct read (not upstream behaviour: "
            "the EP's single-context path fails the session, cc7ec9e qnn_backend_manager.cc 1416-1422)"
        )
    if options.get("failed_registration") == "undo":
        out.append(
            "--failed-registration undo: a failed registration is undone and mapping disabled for the context "
            "(not upstream behaviour: onnxruntime-qnn PR #337 proposed it and was closed unmerged; the EP leaves "
            "the registration stale)"
        )
    if options.get("sweep_deregistrations"):
        out.append(
            "--sweep-deregistrations: failed deregistrations are retried at teardown (not upstream "
            "behaviour: the EP returns MEM_ALLOC and forgets them)"
        )
    if (options.get("mapping_scope") or "session") == "process":
        out.append(
            "--mapping-scope process: one mapping per file per process (not upstream behaviour on the single "
            "path: one per backend manager, i.e. per session; the list path's one backend manager maps it once)"
        )
    if options.get("disable_after_failure") == "backend-manager":
        out.append(
            "--disable-after-failure backend-manager: a failed mapped attempt switches mapping off for every later "
            "load of its backend manager (not upstream behaviour since microsoft/onnxruntime #27871: per model)"
        )
    if (options.get("max_attempts") or 1) > 1:
        out.append(
            f"--max-attempts {options['max_attempts']}: a failed map step (that step only; map_attempts counts the "
            "tries) is tried again before the direct read (not upstream behaviour: the EP never retries it)"
        )
    return out
