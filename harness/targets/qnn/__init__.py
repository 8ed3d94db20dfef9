"""The qnn target: the real QNN EP loading an EPContext model with ``disable_file_mapped_weights`` "0" or "1"."""

from __future__ import annotations

import time
from dataclasses import replace

from harness.core.errors import InputError
from harness.core.schema import disable_flag
from harness.core.vocab import EpState, PathTaken, Workload
from harness.targets.base import LiveSessions, Prepared, Target, TargetOption

from .ep import BACKEND_TYPES
from .quantize import CALIBRATION_SIZE, MIN_COSINE, QUANTIZE_CHOICES, parse_calibration_size, parse_quantize
from .sharing import RESOURCE_SHARING_CHOICES, parse_resource_sharing, refusal, sharing_provider_options


def _embed_mode(text: str) -> int:
    if text not in ("0", "1"):
        raise ValueError("must be 0 or 1")
    return int(text)


def _backend(text: str) -> str:
    if text not in BACKEND_TYPES:
        raise ValueError(f"backends are {','.join(BACKEND_TYPES)}")
    return text


class QnnTarget(Target):
    name = "qnn"
    summary = "the real QNN EP from onnxruntime-qnn (HTP simulator on Linux x86_64)"
    provider_ep = "the QNN EP"
    #: What ``doctor`` says before the probe (about 9 s here, on the simulator).
    probe_summary = (
        "it registers the QNN EP, lists its devices, compiles a tiny QDQ model for the HTP and runs it "
        "with file mapping on; about 10 s"
    )
    options = (
        TargetOption(
            "embed_mode",
            "--embed-mode",
            0,
            "0 = context in an external .bin (mappable), 1 = inside the ONNX file",
            parse=_embed_mode,
            choices=(0, 1),
        ),
        TargetOption(
            "share_ep_contexts",
            "--share-ep-contexts",
            False,
            "the M sessions of one process share their QNN contexts (ep.share_ep_contexts)",
        ),
        TargetOption(
            "resource_sharing",
            "--resource-sharing",
            "none",
            "the sessions load their contexts on the EP's shared-resource (list) path: "
            "vtcm-backup-buffer sets enable_vtcm_backup_buffer_sharing=1, htp-share-resource "
            "htp_share_resource_optimization=1 (provider options of the workers' sessions, not of the compile)",
            parse=parse_resource_sharing,
            choices=RESOURCE_SHARING_CHOICES,
        ),
        TargetOption(
            "backend_type",
            "--backend-type",
            "htp",
            "the QNN backend (provider option backend_type)",
            parse=_backend,
            choices=BACKEND_TYPES,
        ),
        TargetOption(
            "quantize",
            "--quantize",
            "none",
            "qdq: quantize a float --model to uint8 QDQ before compiling (qnn_preprocess_model, "
            "quantize_static with get_qnn_qdq_config), as ORT's QNN docs prepare models for the HTP",
            parse=parse_quantize,
            choices=QUANTIZE_CHOICES,
        ),
        TargetOption(
            "calibration_size",
            "--calibration-size",
            CALIBRATION_SIZE,
            "inputs --quantize qdq calibrates on (made like the reference input, never it)",
            parse=parse_calibration_size,
            metavar="N",
        ),
    )

    def check(self, opts) -> None:
        if opts.workload == Workload.GENERATE and opts.models:
            from harness.prep.pipeline import resolve_models

            if len(resolve_models(opts.models).paths) > 1:
                raise InputError(
                    "--target qnn --workload generate makes its prefill and decode graphs from ONE decoder"
                )

    def prepare(self, opts, progress) -> Prepared:
        from harness.core.units import fmt_bytes
        from harness.prep.externalise import mappable_bytes
        from harness.prep.onnxfile import load_onnx

        from .partitions import load_level, load_note
        from .prepare import prepare_qnn
        from .simulator import default_soc_model

        chosen = default_soc_model(opts)
        if chosen is not None:
            opts = replace(opts, provider_options=chosen[0])
        if opts.workload == Workload.GENERATE:
            from .prepare import prepare_generate

            prepared = prepare_generate(opts, progress)
            prepared.notes[:0] = [chosen[1]] if chosen else []
            prepared.provider_options = chosen[0] if chosen else None
            return prepared
        parts = prepare_qnn(opts, progress)
        bins = list(dict.fromkeys(b for p in parts for b in p.bins))
        embedded = sum(p.context_bytes - sum(b.stat().st_size for b in p.bins) for p in parts)
        shared = len(parts) > 1 and (
            any(p.shares_context for p in parts) or len(bins) < sum(len(p.bins) for p in parts)
        )
        options = {"onnx": [str(p.onnx_path) for p in parts], "partitions": [p.partitions for p in parts]}
        notes = [chosen[1]] if chosen else []
        notes += [f"{p.model.source}: {load_note(p.partitions)}" for p in parts if load_level(p.partitions)]
        if shared and not opts.target_options.get("share_ep_contexts"):
            options["share_ep_contexts"] = True
            notes.append(
                "The pipeline's models share QNN context binaries: every session is created with "
                "ep.share_ep_contexts=1, as onnxruntime-genai runs QNN pipelines."
            )
        notes += [note for p in parts for note in _part_notes(p)]
        models = [p.model for p in parts]
        contexts = sum(b.stat().st_size for b in bins) + embedded
        cpu = sum(mappable_bytes(load_onnx(p.onnx_path, external_data=False)) for p in parts)  # QNN took none of it
        if cpu:
            notes.append(
                f"Weights: {fmt_bytes(contexts)} in QNN context binaries (what file mapping maps) and "
                f"{fmt_bytes(cpu)} in the nodes left to ORT's CPU EP, which loads them itself in both modes."
            )
        return Prepared(
            models[0],
            contexts + cpu,
            list(dict.fromkeys([*(p.onnx_path for p in parts), *bins])),
            worker_options=options,
            source=" + ".join(m.source for m in models),
            models=models,
            notes=notes,
            logs=[p.log for p in parts if p.log is not None],
            provider_options=chosen[0] if chosen else None,
        )

    def notes(self, opts) -> list[str]:
        if opts.workload == Workload.GENERATE:
            return [
                *super().notes(opts),
                "The generate workload on QNN: static prefill and decode graphs over a left-padded fixed-size KV "
                "cache; every session's greedy ids must equal the un-compiled decoder's on ORT's CPU EP.",
            ]
        return [
            *super().notes(opts),
            "The reference output of a model the harness compiles is the un-compiled model's output on "
            "ORT's CPU EP; the QNN EP quantizes activations (or runs fp16), so those outputs are compared "
            "by cosine similarity (and quantization steps for the generated model), not element by element.",
        ]

    def versions(self) -> dict[str, str | None]:
        from .ep import qnn_versions

        return qnn_versions()

    def version_keys(self) -> dict[str, str]:
        return {"onnxruntime_qnn": "onnxruntime-qnn", "qnn_sdk": "QNN SDK"}

    def probe(self, timeout_s: float):
        """The QNN EP probed in a child process (`device.probe_device`)."""
        from .device import probe_device

        return probe_device(timeout_s=timeout_s)

    def create_sessions(self, spec, models, record) -> LiveSessions:
        """M session groups, each session with its own EP verdict from its own slice of the worker's log."""
        import onnxruntime as ort

        from .ep import qnn_session_options, qnn_versions
        from .eplog import LogSegment, aggregate, classify_session, echo_style, log_level
        from .partitions import apply_load_level

        options = spec.options
        settings = spec.session_settings()
        paths = options["onnx"] if isinstance(options["onnx"], list) else [options["onnx"]]
        partitions = options.get("partitions") or [1] * len(paths)
        flag = disable_flag(spec.mode)
        echo = echo_style(qnn_versions()["onnxruntime_qnn"])  # how this EP echoes the option (None: a note)
        sharing = sharing_provider_options(options.get("resource_sharing", "none"))
        level = log_level(echo)  # a readable build's echo is VERBOSE only
        ort.set_default_logger_severity(level)  # some EP lines go through ORT's default logger
        live = LiveSessions()
        verdicts = []
        from harness.contract import phases

        phases.mark("create")  # the EP maps or reads the context binary inside session creation
        t0 = time.perf_counter()
        for _ in range(spec.sessions):
            group = []
            for path, parts in zip(paths, partitions, strict=True):
                so = qnn_session_options(
                    disable_file_mapped_weights=flag,
                    share_ep_contexts=bool(options.get("share_ep_contexts")),
                    backend_type=options.get("backend_type", "htp"),
                    provider_options={**settings.provider_options, **sharing},
                    log_severity=level,
                )
                apply_load_level(so, parts)
                segment = LogSegment(spec.log_path)
                try:
                    with segment:
                        group.append(ort.InferenceSession(path, settings.apply(so)))
                except Exception as err:  # the backend's refusal of the list path, named
                    why = refusal(f"{segment.text()}\n{err}", sharing)
                    if why:
                        raise RuntimeError(why) from err
                    raise
                verdicts.append(classify_session(segment.text(), disable_file_mapped_weights=flag, echo=echo))
            live.add_group(group)
        record.create_s = time.perf_counter() - t0
        record.load_s = 0.0  # the EP maps or reads the context binary inside session creation
        worker = aggregate(verdicts)
        record.ep_file_mapping, record.ep_log_tail = worker.state, worker.evidence or worker.reason
        record.ep_sessions = worker.counts_text()
        record.ep_reason = "; ".join(x for x in (worker.reason, worker.note and f"note: {worker.note}") if x)
        record.ep_nodes = worker.nodes_text()
        if worker.failed:  # the EP ignored the option or failed its setup: never a success
            record.error = f"{worker.state}: {worker.reason}"
        record.path_taken = path_taken(worker.state, worker.counts)
        record.weights_bytes = spec.weights_bytes or sum(m.weights_bytes for m in models)
        return live

    def generate(self, group: list, models: list, settings, after_prefill=None):
        """The generate workload's loop over the group's static prefill and decode sessions (`llm`)."""
        from .llm import static_generate

        return static_generate(group[0], group[1], settings.prompt_ids, settings.new_tokens, after_prefill)

    def check_output(self, outputs: list, reference: dict, model) -> tuple[bool, str]:
        """The compile child's check again (`outputs.check_compiled_outputs`): by element type, cosine or shape."""
        from .outputs import check_compiled_outputs

        return check_compiled_outputs(outputs, reference, model)


def path_taken(state: str, counts: dict[str, int]) -> str:
    """How the weights were loaded, from the EP's verdicts: "mapped" only when every session was active."""
    if counts.get(EpState.RETRIED):
        return PathTaken.FALLBACK
    if state == EpState.ACTIVE:
        return PathTaken.MAPPED
    if state == EpState.UNKNOWN:
        return PathTaken.UNKNOWN
    return PathTaken.HEAP


TARGET = QnnTarget()


def _part_notes(p) -> list[str]:
    """What a run's notes say of one prepared model: pre-compiled, quantized, non-deterministic."""
    out: list[str] = []
    if not p.compiled:
        out.append(
            f"{p.model.source} is a pre-compiled EPContext model, measured as it is (no compile). "
            "There is no CPU original to compare with: its reference output is its own first "
            "inference on the QNN EP with file mapping disabled (disable_file_mapped_weights=1), "
            "and every worker must reproduce it within its output type's tolerance."
        )
    if p.model.extra.get("quantized"):
        out.append(
            f"{p.model.source} was quantized before the compile ({p.model.extra['quantized']}): its "
            "outputs are compared with the FLOAT model's CPU output by cosine similarity >= "
            f"{p.model.extra.get('min_cosine', MIN_COSINE)} (uint8 activations move every value by up "
            "to half a step)."
        )
    unstable = p.model.extra.get("nondeterministic") or {}
    if unstable:
        out.append(
            f"{p.model.source}: output(s) {', '.join(unstable)} differ between two runs of the "
            "reference itself (non-deterministic): checked by shape only."
        )
    return out
