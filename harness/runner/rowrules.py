"""Two verdicts on a worker that only the parent can give, from what it saw of the worker
rather than what the worker said of itself:

- an early exit: a worker that ended before the harness released it is a failure, exit code 0
  included (onnxruntime-qnn #337: QnnSignal_trigger schedules a background
  ``TerminateProcess(0)`` after a failed file-mapped creation; the process had written its
  result and "succeeded");
- a silent copy: a mapped-mode worker that reported the mapped path (or an active EP) while
  its private memory held the weights, measured against the group's control worker
  (``copied_bytes``). onnxruntime-qnn #677: SSR recovery went back to a direct read and
  printed nothing, so only memory shows it. Its state is ``copied``, a failure.
"""

from __future__ import annotations

from harness.contract.spec import WorkerRecord
from harness.core.physics import NOISE_BYTES
from harness.core.slack import SLACK_BYTES
from harness.core.units import fmt_bytes, fmt_percent
from harness.core.vocab import MAPPED_PATH_STATES, EpState, Mode, PathTaken
from harness.runner.exits import describe_exit

#: A mapped worker holding at least this share of the weights as private copies, plus the
#: sampling slack (beyond the control's runtime), holds the weights: not mapped, whatever it
#: says. Weights smaller than a worker's own memory noise (`physics.NOISE_BYTES`, 4 MiB: a 24 KiB
#: model's mapped worker measured 2.1 MiB beyond its control) cannot be told from noise: no verdict.
#: Half: a worker whose sessions were served from the mapping holds ~0 (a few pages of noise);
#: one that copied them holds ~1 copy per session; partial copies below it stay a warning
#: ("Mapped workers still copied weights").
SILENT_COPY_SHARE = 0.5


def copy_bound(weights: int) -> float:
    """The private bytes beyond the control that make a mapped worker ``copied``: half its
    weights, never less than a worker's own memory noise (`physics.NOISE_BYTES`): the romanizer
    decoder's cpu mapped worker, 4.1 MiB of weights, held 3.1 MiB beyond its control in one CI run
    (ORT's own mapped worker of it, in the same run, 1.8 MiB), which half its weights alone called
    a copy; plus the sampling slack (`slack.SLACK_BYTES`)."""
    return max(SILENT_COPY_SHARE * weights, NOISE_BYTES) + SLACK_BYTES


def early_exit(index: int, code: int | None, timed_out: bool, final: WorkerRecord | None) -> str:
    """Why the worker's end is a failure although it may say nothing else ("" when it is not):
    it exited (any code) before the parent's release reached it, i.e. without a final record
    that says it was released."""
    if timed_out or code is None or (final is not None and final.released):
        return ""
    return f"worker {index} {describe_exit(code, False, 0)} before the harness released it"


def silent_copy(mode: str, record: WorkerRecord, copied: int | None) -> tuple[str, str] | None:
    """(``copied``, why) when a mapped-mode worker that claims the mapped path holds the
    weights in private memory; None otherwise (or when there is no control figure)."""
    weights = record.weights_bytes
    if mode != Mode.MAPPED or copied is None or not weights or record.path_taken != PathTaken.MAPPED:
        return None
    if EpState.of(record.ep_file_mapping) not in MAPPED_PATH_STATES:  # it does not claim the mapping
        return None
    if weights < NOISE_BYTES:  # a copy smaller than a worker's own memory noise: no verdict either way
        return None
    if copied < copy_bound(weights):
        return None
    said = "its EP log said active" if record.ep_file_mapping == EpState.ACTIVE else "its pipeline reported mapped"
    return EpState.COPIED, (
        f"copied: private memory held {fmt_bytes(copied)} of weight copies ({fmt_percent(copied / weights)} of "
        f"the {fmt_bytes(weights)} of weights, copied_bytes against the control worker) although {said}: "
        "its sessions hold the weights in private memory, not in the shared mapping"
    )
