"""eplog: per-session verdicts from the QNN EP's own log.

Unit tests use the real onnxruntime-qnn 2.7.0 message texts (the literal parts are checked
against the shipped binaries in test_eplog_strings.py) inside ORT's real log-line format as the
EP prints it on this machine: ``<timestamp> [<S>:onnxruntime:, <file>:<line> <function>] <text>``,
warnings wrapped in ``ESC[0;93m ... ESC[m``, errors in ``ESC[1;31m``. Line numbers and function
names of the Windows-only messages are illustrative (the Linux build cannot print them).
The real EP's own log, session by session: test_eplog_real.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.vocab import EpState
from harness.targets.qnn.eplog import (
    ECHO_ENABLE_FLAG,
    ECHO_NONE,
    ECHO_STRING,
    EP_DISABLED_REASONS,
    EP_STATES,
    EVIDENCE_LINES,
    MAPPED_STATES,
    PATTERNS,
    PRECEDENCE,
    REASON_EMBEDDED,
    REASON_READ_CALLBACK,
    REASON_RPCMEM,
    REASON_VERSION,
    WORST_ORDER,
    EpVerdict,
    aggregate,
    check_disable_flag,
    classify_ep_log,
    classify_log,
    classify_session,
    echo_style,
    find_messages,
    read_log_segment,
    split_sessions,
)

_COLOUR = {"W": ("\x1b[0;93m", "\x1b[m"), "E": ("\x1b[1;31m", "\x1b[m")}
_n = iter(range(10**9))


def ort(sev: str, where: str, text: str) -> str:
    """One line as ORT's default sink prints it."""
    pre, post = _COLOUR.get(sev, ("", ""))
    return f"{pre}2026-11-30 02:21:25.{next(_n):09d} [{sev}:onnxruntime:, {where}] {text}{post}\n"


BIN = r"C:\m\model_ctx_qnn.bin"
SESSION = ort("I", "qnn_provider_factory.cc:253 CreateEpImpl", "Creating QNN EP")
NOISE = ort("I", "inference_session.cc:2835 operator()", "Initializing session.") + ort(
    "V", "qnn_backend_manager.cc:2065 LoadCachedQnnContextFromBuffer", "Load from cached QNN Context completed."
)
GATE = ort(
    "W",
    "qnn_execution_provider.cc:933 QnnEp",
    "File mapped weights feature is only available on Windows "
    "arm64 devices for QNN API versions >= 2.32. Feature will be disabled by default",
)
OPT1 = ort("W", "qnn_execution_provider.cc:927 QnnEp", "User specified disable_file_mapped_weights: 1")
OPT0 = ort("W", "qnn_execution_provider.cc:927 QnnEp", "User specified disable_file_mapped_weights: 0")
MAP = ort(
    "I", "qnn_windows_file_mapper.cc:31 GetContextBinMappedMemoryPtr", f"Creating context bin file mapping for {BIN}"
)
MAP_HANDLE = ort(
    "V",
    "qnn_windows_file_mapper.cc:58 GetContextBinMappedMemoryPtr",
    f"Created file mapping with handle (0000000000000A1C) for context bin:{BIN}",
)


def dma(i: int) -> str:
    off = i * 65536
    return ort(
        "I",
        "qnn_backend_manager.cc:1187 MapDmaData",
        "Mapping DMA data for request: memory mapped base "
        f"pointer(000001D3F2A10000), offset({off}), size(65536), total file size(1130496) "
        "isBackendMappingNeeded(1)",
    ) + ort(
        "I",
        "qnn_backend_manager.cc:1214 MapDmaData",
        f"Created DMA data mapping with address: {0x1D3F2A10000 + off:016X}",
    )


MAPPED = MAP + MAP_HANDLE + dma(0) + dma(1) + dma(2)
RETRY = ort(
    "W",
    "qnn_backend_manager.cc:1402 LoadCachedQnnContextFromBuffer",
    "contextCreateFromBinaryWithCallback failed (QNN_COMMON_ERROR_MEM_ALLOC). Retrying with direct read.",
)
RETRY_LIST = ort(
    "W",
    "qnn_backend_manager.cc:1296 CreateContextVtcmBackupBufferSharingEnabled",
    "Failed to create context with file mapping enabled. Error: QNN_COMMON_ERROR_GENERAL, Code: 1000. "
    "Retrying with feature disabled.",
)
REGISTER_FAILED = ort("E", "qnn_backend_manager.cc:1209 MapDmaData", "Failed to register DMA data mapping to RPCMEM")
OUT_OF_FILE = ort(
    "E", "qnn_backend_manager.cc:1199 MapDmaData", "Requested offset and size includes memory outside of mapped file"
)
AFTER_ERROR = ort(
    "W",
    "qnn_backend_manager.cc:1178 MapDmaData",
    "Attempting to map DMA data but file mapping has been disabled, possibly due to an error in a previous request.",
)
RPCMEM = ort(
    "W",
    "qnn_execution_provider.cc:1128 QnnEp",
    "Unable to load RPCMem library: Failed to initialize "
    "RPCMEM dynamic library handle: The specified module could not be found. - Disabling file mapped weights.",
)
RPCMEM_UNINIT = ort(
    "W",
    "qnn_backend_manager.cc:1366 LoadCachedQnnContextFromBuffer",
    "RPCMem Library is required for file mapping but is uninitialized.",
)
EMBEDDED = ort(
    "W",
    "qnn_backend_manager.cc:1338 LoadCachedQnnContextFromBuffer",
    "Node QNNExecutionProvider_QNN_1_0 is using an embedded cache. Disabling file mapping for this node.",
)
EMBEDDED_EP = ort(
    "W",
    "qnn_execution_provider.cc:940 QnnEp",
    "File mapped weights feature is incompatible with embedded EP contexts. Feature will be disabled by default.",
)
OLD_BINARY = ort(
    "W",
    "qnn_backend_manager.cc:1349 LoadCachedQnnContextFromBuffer",
    "Context binary of QNNExecutionProvider_QNN_part0_1_0 is 3.2.1. File mapping is only supported for "
    "versions >= 3.3.3. Disabling file mapping for this node.",
)
SSR_OLD = ort(
    "W",
    "qnn_backend_manager.cc:2412 ReloadContextForSSR",
    "SSR recovery: context binary version 3.2.1 < 3.3.3, file mapping not supported. Falling back to direct read.",
)
READ_CB = ort(
    "W",
    "qnn_execution_provider.cc:1712 QnnEp",
    "EPContext read callback registered; disabling file mapping for this session.",
)
READ_CB_REUSE = ort(
    "W",
    "qnn_execution_provider.cc:1705 QnnEp",
    "EPContext read callback registered on a session "
    "reusing an already-set-up backend manager; disabling file mapping for this session.",
)
RELEASE = ort(
    "I",
    "qnn_backend_manager.cc:1243 ReleaseDmaData",
    "Releasing DMA data mapping for memory mapped pointer(000001D3F2A10000), address(000001D3F2A10000), size: (65536)",
)
DEREGISTER_FAILED = ort(
    "E", "qnn_backend_manager.cc:1259 ReleaseDmaData", "Failed to deregister buffer from RPCMEM: 000001D3F2A10000"
)


def session(*parts: str) -> str:
    return SESSION + NOISE + "".join(parts) + NOISE


def verdict(*parts: str, flag: str = "0", echo: str | None = ECHO_STRING) -> EpVerdict:
    """A session of 2.7.0 by default (its messages, its echo)."""
    return classify_session(session(*parts), disable_file_mapped_weights=flag, echo=echo)


# ----------------------------------------------------------------------------- done-when checks


def test_no_file_mapping_line_is_unknown() -> None:
    v = verdict()
    assert (v.state, v.reason) == ("unknown", "no file-mapping line in the EP log")
    assert not v.mapped


def test_the_270_retry_line_is_retried() -> None:
    v = verdict(MAPPED, RETRY, RELEASE)
    assert v.state == "retried"
    assert v.reason == (
        "contextCreateFromBinaryWithCallback failed (QNN_COMMON_ERROR_MEM_ALLOC). Retrying with direct read"
    )


def test_the_rpcmem_missing_line_is_ep_disabled_rpcmem() -> None:
    v = verdict(RPCMEM)
    assert (v.state, v.reason) == ("ep-disabled", REASON_RPCMEM)
    assert "Unable to load RPCMem library" in v.evidence


# ----------------------------------------------------------------------------- every state


def test_active_needs_the_mapping_line_and_a_created_dma_region() -> None:
    v = verdict(MAPPED)
    assert v.state == "active" and v.mapped
    assert v.reason == rf"3 DMA region(s) mapped from {BIN}"


@pytest.mark.parametrize(
    ("parts", "why"),
    [
        ((MAP, MAP_HANDLE), "QNN requested no weight region"),  # a context without weight regions
        ((dma(0),), "no 'Creating context bin file mapping' line"),
        ((MAP, dma(0).splitlines(keepends=True)[0]), "no region created"),
    ],
    ids=["mapping-without-regions", "regions-without-mapping", "request-without-region"],
)
def test_half_the_positive_evidence_is_unknown(parts: tuple[str, ...], why: str) -> None:
    v = verdict(*parts)
    assert v.state == "unknown" and why in v.reason, v


def test_shared_resource_retry_is_retried() -> None:
    v = verdict(MAP, RETRY_LIST)
    assert v.state == "retried" and "Error: QNN_COMMON_ERROR_GENERAL, Code: 1000" in v.reason


@pytest.mark.parametrize(
    "failure", [REGISTER_FAILED, OUT_OF_FILE, AFTER_ERROR], ids=["register", "out-of-file", "after-error"]
)
def test_a_failed_mapping_attempt_without_retry_line_is_retried(failure: str) -> None:
    v = verdict(MAP, dma(0), failure)
    assert v.state == "retried" and v.reason.startswith("mapping attempt failed (")


def test_option_1_confirmed_by_the_ep_is_disabled() -> None:
    v = verdict(OPT1, flag="1")
    assert (v.state, v.reason) == ("disabled", "disable_file_mapped_weights=1 confirmed by the EP")


def test_option_1_without_the_eps_word_is_unknown() -> None:
    v = verdict(flag="1")
    assert v.state == "unknown" and "did not confirm" in v.reason and "missing" in v.reason


# ----------------------------------------------------------------------------- the option's echo

#: The readable builds' echo: the enable flag, at VERBOSE (fbd7fc5 qnn_execution_provider.cc 484).
FLAG0 = ort("V", "qnn_execution_provider.cc:484 QNNExecutionProvider", "User specified disable_file_mapped_weights: 0")
FLAG1 = ort("V", "qnn_execution_provider.cc:484 QNNExecutionProvider", "User specified disable_file_mapped_weights: 1")
#: What each build prints for the option passed: 2.7.0 the string, only for "1"; the readable
#: builds the enable flag whenever the key is given; cc7ec9e (misspelled key) nothing.
ECHOES = {
    ECHO_STRING: {"1": OPT1, "0": ""},
    ECHO_ENABLE_FLAG: {"1": FLAG0, "0": FLAG1},
    ECHO_NONE: {"1": "", "0": ""},
}
#: (build, mode's flag, mapping evidence) -> state. The two cases issue 30 found wrong: a bool
#: echo ": 0" after "1" read as option-ignored (a false failure), and a heap session that maps on
#: a build that echoes nothing read as active (a false pass).
MATRIX = [
    (ECHO_STRING, "1", False, "disabled"),
    (ECHO_STRING, "1", True, "option-ignored"),
    (ECHO_STRING, "0", False, "unknown"),
    (ECHO_STRING, "0", True, "active"),
    (ECHO_ENABLE_FLAG, "1", False, "disabled"),  # ": 0" after "1": the disable worked
    (ECHO_ENABLE_FLAG, "1", True, "option-ignored"),
    (ECHO_ENABLE_FLAG, "0", False, "unknown"),
    (ECHO_ENABLE_FLAG, "0", True, "active"),
    (ECHO_NONE, "1", False, "unknown"),  # nothing confirms "1", nothing shows a mapping
    (ECHO_NONE, "1", True, "option-ignored"),  # the misspelled key: "1" silently ignored
    (ECHO_NONE, "0", False, "unknown"),
    (ECHO_NONE, "0", True, "active"),
]


@pytest.mark.parametrize(("build", "flag", "mapping", "state"), MATRIX, ids=lambda v: str(v))
def test_the_option_echo_is_read_as_each_build_echoes_it(build: str, flag: str, mapping: bool, state: str) -> None:
    """String-echo (2.7.0), bool-echo (the readable builds) and no-echo (cc7ec9e) builds, with
    and without mapping evidence, in both modes: a heap-mode session with mapping activity is
    ``option-ignored`` (a failure) whatever was echoed; otherwise the echo, read as its build
    echoes, confirms "1" or shows the option was read otherwise."""
    v = verdict(ECHOES[build][flag], MAPPED if mapping else "", flag=flag, echo=build)
    assert v.state == state, v
    if state == "option-ignored":
        assert v.reason.startswith('option ignored by the EP: the harness passed "1" but the log shows 3 DMA')
        assert aggregate([v, verdict(MAPPED)]).failed
    if state == "disabled":
        assert v.reason.startswith("disable_file_mapped_weights=1 confirmed by the EP")
    assert not v.note, "a known build's echo is evidence, not a note"


@pytest.mark.parametrize("build", [ECHO_STRING, ECHO_ENABLE_FLAG])
@pytest.mark.parametrize("mapping", [False, True])
def test_an_unknown_versions_echo_is_a_note(build: str, mapping: bool) -> None:
    """An EP version whose echo is not known: the echo decides nothing (a note says what it
    was); "1" with mapping activity is still option-ignored, without it unknown."""
    v = verdict(ECHOES[build]["1"], MAPPED if mapping else "", flag="1", echo=None)
    assert v.state == ("option-ignored" if mapping else "unknown"), v
    assert "the echo is a note, not evidence" in v.note and "2.7.0: string" in v.note
    assert "the EP echoed" in v.note and aggregate([v]).note == v.note


@pytest.mark.parametrize(
    ("build", "flag", "echo_line", "read"),
    [
        (ECHO_STRING, "0", OPT1, "1"),  # 2.7.0 echoes what it read: "1" after "0"
        (ECHO_STRING, "1", OPT0, "0"),
        (ECHO_ENABLE_FLAG, "0", FLAG0, "1"),  # enable flag 0 after "0": the EP read a disable
        (ECHO_ENABLE_FLAG, "1", FLAG1, "0"),  # enable flag 1 after "1": the disable did not take
    ],
)
def test_an_echo_that_says_the_ep_read_another_value_is_option_ignored(build, flag, echo_line, read) -> None:
    for evidence in ("", MAPPED):
        v = verdict(echo_line, evidence, flag=flag, echo=build)
        assert v.state == "option-ignored" and v.reason.startswith("option ignored by the EP"), v
        assert f'passed disable_file_mapped_weights="{flag}"' in v.reason or flag == "1" and evidence


def test_known_versions_have_an_echo_style() -> None:
    assert echo_style("2.7.0") == ECHO_STRING and echo_style(" 2.7.0 ") == ECHO_STRING
    assert echo_style("1.24.1") == ECHO_ENABLE_FLAG
    assert echo_style("2.8.0") is None and echo_style(None) is None and echo_style("") is None
    with pytest.raises(ValueError, match="echo must be one of"):
        classify_session(GATE, disable_file_mapped_weights="0", echo="bool")


def test_rpcmem_required_but_uninitialized_is_a_hard_error_not_a_disable() -> None:
    """ "RPCMem Library is required for file mapping but is uninitialized." is a failed status of
    SetupBackend, not the EP's policy: ``ep-error``, a failure."""
    v = verdict(RPCMEM_UNINIT)
    assert v.state == "ep-error" and v.reason.startswith("hard error in SetupBackend: RPCMem Library is required")
    assert aggregate([v]).failed and not aggregate([verdict(RPCMEM)]).failed


def test_mixed_nodes_are_counted_and_reported_as_mixed() -> None:
    """Node A embedded (disabled per node), node B mapped with DMA regions: the session is
    ``mixed``, with one node of each counted; a worker sums the nodes over its sessions."""
    v = verdict(EMBEDDED, MAPPED)
    assert (v.state, v.nodes_mapped, v.nodes_disabled) == ("mixed", 1, 1)
    assert v.reason == f"1 node(s) mapped, 1 disabled per node ({REASON_EMBEDDED})"
    old = verdict(OLD_BINARY, MAPPED, MAP, dma(3))
    assert (old.state, old.nodes_mapped, old.nodes_disabled) == ("mixed", 2, 1)
    only_disabled = verdict(EMBEDDED, EMBEDDED)
    assert (only_disabled.state, only_disabled.nodes_mapped, only_disabled.nodes_disabled) == ("ep-disabled", 0, 2)
    worker = aggregate([v, old, verdict(MAPPED)])
    assert worker.state == "mixed" and worker.nodes_text() == "mapped=4 disabled=2"
    assert worker.counts == {"active": 1, "mixed": 2}
    assert aggregate([verdict(GATE)]).nodes_text() == ""


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (EMBEDDED, REASON_EMBEDDED),
        (EMBEDDED_EP, REASON_EMBEDDED),
        (OLD_BINARY, REASON_VERSION),
        (SSR_OLD, REASON_VERSION),
        (READ_CB, REASON_READ_CALLBACK),
        (READ_CB_REUSE, REASON_READ_CALLBACK),
        (RPCMEM, REASON_RPCMEM),
    ],
    ids=[
        "embedded-node",
        "embedded-ep",
        "old-binary",
        "ssr-old-binary",
        "read-callback",
        "read-callback-reuse",
        "rpcmem-load",
    ],
)
def test_ep_disabled_names_the_reason(line: str, reason: str) -> None:
    v = verdict(line)
    assert (v.state, v.reason) == ("ep-disabled", reason)


@pytest.mark.parametrize("flag", ["0", "1"])
def test_the_platform_gate_is_unavailable_whatever_the_option(flag: str) -> None:
    v = verdict(OPT1 if flag == "1" else "", GATE, flag=flag)
    assert v.state == "unavailable" and v.reason.startswith("platform gate: File mapped weights feature")
    assert "\x1b[" not in v.evidence and "2026-11-30" not in v.evidence  # colour codes and stamps gone


# ----------------------------------------------------------------------------- precedence


@pytest.mark.parametrize(
    ("parts", "flag", "state"),
    [
        ((OPT1, GATE), "1", "unavailable"),  # the gate is decided first, when the EP is built
        ((OPT1, EMBEDDED), "1", "disabled"),  # the user's option is global: per-node policy is moot
        ((MAPPED, RETRY, RELEASE), "0", "retried"),  # mapped, then creation failed, then the retry
        ((EMBEDDED, MAP, dma(0), RETRY), "0", "retried"),  # a failure never hides behind a policy
        ((EMBEDDED, MAPPED), "0", "mixed"),  # node A embedded, node B mapped: not all mapped
        ((READ_CB, MAPPED), "0", "ep-disabled"),  # a session-wide disable: no node count
        ((MAPPED, DEREGISTER_FAILED), "0", "active"),  # teardown notes do not change the path
        ((GATE, MAPPED), "0", "unknown"),  # contradictions are no evidence
        ((OPT1, MAPPED), "1", "option-ignored"),  # "1" confirmed, then mapped anyway: ignored
        ((OPT1, GATE, MAPPED), "1", "option-ignored"),  # a heap session that maps is never a pass
    ],
    ids=[
        "gate>option",
        "option>ep-disabled",
        "retry>active",
        "retry>ep-disabled",
        "mixed>active",
        "ep-disabled>active",
        "note-only",
        "gate+mapped",
        "option1+mapped",
        "option1+gate+mapped",
    ],
)
def test_precedence(parts: tuple[str, ...], flag: str, state: str) -> None:
    assert verdict(*parts, flag=flag).state == state


def test_precedence_and_worst_order_cover_every_state() -> None:
    log_states = [s for s in EP_STATES if s != EpState.COPIED]  # copied: the runner's, from memory
    assert sorted(PRECEDENCE) == sorted(WORST_ORDER) == sorted(log_states)
    assert MAPPED_STATES == ("active",)
    assert set(EP_DISABLED_REASONS) == {p.reason for p in PATTERNS if p.effect == "ep-disabled"}


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.name)
def test_every_pattern_is_recognised_in_a_log_line(pattern) -> None:
    """Filled in and printed as the EP would, each message is read as itself (no pattern shadows
    another), and its effect shows in the verdict."""
    text = pattern.template.replace("{}", "X1")
    line = ort(pattern.level or "W", "qnn_backend_manager.cc:1 F", text)
    assert find_messages(line, pattern.name) == [text]
    v = classify_session(SESSION + line, disable_file_mapped_weights="0", echo=ECHO_STRING)
    expected = {
        "gate": "unavailable",
        "ep-disabled": "ep-disabled",
        "retry": "retried",
        "map-failed": "retried",
        "ep-error": "ep-error",
        "option": "option-ignored",  # it echoed "X1", not the "0" passed
    }
    assert v.state == expected.get(pattern.effect, "unknown"), v


# ----------------------------------------------------------------------------- evidence


def test_evidence_is_the_last_line_per_message_kind_with_counts() -> None:
    v = verdict(OPT0, MAPPED, RETRY, RELEASE, RELEASE)
    lines = v.evidence.splitlines()
    assert len(lines) == EVIDENCE_LINES  # 7 kinds: the release note and the DMA request left out
    assert lines[0].endswith("User specified disable_file_mapped_weights: 0")
    assert lines[1].startswith(
        "[I:onnxruntime:, qnn_windows_file_mapper.cc:31 GetContextBinMappedMemoryPtr] "
        "Creating context bin file mapping for"
    )
    assert "Created DMA data mapping" in lines[3] and lines[3].endswith("[x3]")
    assert "contextCreateFromBinaryWithCallback failed" in lines[-1]
    assert not any("\x1b" in ln or ln.startswith("2026") for ln in lines)
    assert verdict(MAPPED, RELEASE, RELEASE).evidence.splitlines()[-1].endswith("[x2]")


def test_unknown_explains_what_is_missing() -> None:
    assert classify_session("", disable_file_mapped_weights="0").reason == "no QNN EP log captured"
    warnings_only = ort(
        "W",
        "session_state.cc:1618 VerifyEachNodeIsAssignedToAnEp",
        "Some nodes were not assigned to the preferred execution providers",
    ) + ort("W", "qnn_model.cc:1 QnnModel", "x")
    assert "log_severity_level 0 or 1" in classify_session(warnings_only, disable_file_mapped_weights="0").reason
    cpu_only = ort("I", "inference_session.cc:2835 operator()", "Initializing session.")
    assert classify_session(cpu_only, disable_file_mapped_weights="0").reason == "no QNN EP line in the log"


@pytest.mark.parametrize("bad", ["", "2", "yes", None, 0, 1, True, " 0", "0 "])
def test_invalid_option_values_are_value_errors(bad: object) -> None:
    with pytest.raises(ValueError, match="disable_file_mapped_weights must be"):
        check_disable_flag(bad)
    with pytest.raises(ValueError, match="disable_file_mapped_weights must be"):
        classify_session(GATE, disable_file_mapped_weights=bad)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- sessions of a worker


def test_aggregate_counts_every_path_and_names_the_worst() -> None:
    vs = [verdict(MAPPED), verdict(MAPPED, RETRY), verdict(MAPPED), verdict(EMBEDDED)]
    w = aggregate(vs)
    assert w.counts == {"active": 2, "retried": 1, "ep-disabled": 1}
    assert (w.state, w.sessions, w.mapped_sessions) == ("retried", 4, 2)
    assert w.reason == vs[1].reason and w.counts_text() == "active=2 retried=1 ep-disabled=1"
    assert aggregate([verdict(MAPPED), verdict()]).state == "unknown"  # no evidence is the worst
    assert aggregate([]).state == "unknown" and aggregate([]).counts == {}
    assert w.to_dict()["sessions"] == 4


def test_whole_log_is_split_at_each_session() -> None:
    text = session(MAPPED) + session(MAP, dma(0), RETRY) + session(MAPPED)
    assert len(split_sessions(text)) == 3
    w = classify_log(text, disable_file_mapped_weights="0")
    assert (w.state, w.counts) == ("retried", {"active": 2, "retried": 1})
    state, detail = classify_ep_log(text, disable_file_mapped_weights="0")  # targets/base.py's interface
    assert state == "retried" and "Retrying with direct read" in detail
    assert classify_ep_log("", disable_file_mapped_weights="0") == ("unknown", "no QNN EP log captured")
    assert split_sessions(GATE + GATE) == [GATE + GATE]  # without INFO there is no marker: one segment


def test_read_log_segment_reads_between_offsets(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_bytes(b"a\nbb\nccc\n")
    assert read_log_segment(log, 2, 5) == "bb\n" and read_log_segment(log, 5) == "ccc\n"
    assert read_log_segment(tmp_path / "missing.log", 0) == ""


@pytest.mark.parametrize(("version", "level"), [("2.7.0", 1), ("1.24.1", 0), ("1.24.0", 0), ("9.9.9", 1), (None, 1)])
def test_sessions_log_at_the_level_that_shows_their_builds_echo(version, level) -> None:
    """Issue 43 item 9: the readable builds echo the option at VERBOSE only; at INFO a "1" on a
    1.24.x build always read `unknown`. Their sessions log at VERBOSE; the others at INFO (the
    mapping evidence), never above it."""
    from harness.targets.qnn.eplog import echo_style, log_level

    assert log_level(echo_style(version)) == level


@pytest.mark.parametrize(
    "line", ["Context binary does not exist: C:\\m\\model_qnn.bin", "File is empty: C:\\m\\model_qnn.bin"]
)
def test_a_missing_or_empty_binary_is_read_as_2_7_0_names_it(line: str) -> None:
    """Issue 43 item 9: 2.7.0's GetFileSizeIfValid names a missing or empty context binary
    before the mapping step could ("Context bin has a size of 0 bytes" is not reached)."""
    v = verdict(MAP, ort("E", "qnn_backend_manager.cc:1 GetFileSizeIfValid", line))
    assert v.state == "retried" and line in v.reason, v
