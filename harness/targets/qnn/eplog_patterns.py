"""The EP's file-mapping messages (2.7.0), their meaning, and `IGNORED` strings (`epstrings.check` keeps both)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from harness.core.vocab import EpState

OPTION_VALUES = ("0", "1")  # disable_file_mapped_weights: "1" turns the feature off

#: How a build echoes ``disable_file_mapped_weights``: "string" (2.7.0: "1" only, WARNING), "enable-flag"
#: (fbd7fc5 qnn_execution_provider.cc 478-485: the enable flag, VERBOSE) or "none" (cc7ec9e misspells the key,
#: 639-643).
ECHO_STRING, ECHO_ENABLE_FLAG, ECHO_NONE = "string", "enable-flag", "none"
ECHO_STYLES = (ECHO_STRING, ECHO_ENABLE_FLAG, ECHO_NONE)
#: The EP versions whose echo is known: any other version's echo is a note, never evidence.
ECHO_BY_VERSION = {"2.7.0": ECHO_STRING, "1.24.0": ECHO_ENABLE_FLAG, "1.24.1": ECHO_ENABLE_FLAG}
#: Effects showing the EP working on a mapping: a session run with "1" that prints any ignored the option.
MAPPING_ACTIVITY = ("map", "dma-request", "dma-ok", "map-failed", "retry")


def echo_style(version: str | None) -> str | None:
    """How the EP of this version echoes the option; None when the version is not known."""
    return ECHO_BY_VERSION.get((version or "").strip())


def log_level(echo: str | None) -> int:
    """The session log severity that shows the mapping evidence (INFO) and this build's echo:
    VERBOSE (0) for the readable builds, whose echo is VERBOSE only; INFO (1) otherwise."""
    return 0 if echo == ECHO_ENABLE_FLAG else 1


#: inside one session's segment: the first state whose evidence is present wins
PRECEDENCE = (
    EpState.OPTION_IGNORED,
    EpState.EP_ERROR,
    EpState.UNAVAILABLE,
    EpState.DISABLED,
    EpState.RETRIED,
    EpState.MIXED,
    EpState.EP_DISABLED,
    EpState.ACTIVE,
    EpState.UNKNOWN,
)
#: Across a worker's sessions, worst first (no evidence is worst: nothing can be ruled out).
WORST_ORDER = (
    EpState.OPTION_IGNORED,
    EpState.EP_ERROR,
    EpState.UNKNOWN,
    EpState.RETRIED,
    EpState.MIXED,
    EpState.EP_DISABLED,
    EpState.UNAVAILABLE,
    EpState.DISABLED,
    EpState.ACTIVE,
)
FAILED_STATES = (EpState.OPTION_IGNORED, EpState.EP_ERROR)  #: states that fail the worker whatever else it did
#: (the schema's ``copied`` state is no log state: the runner sets it from memory)

REASON_EMBEDDED = "embedded context"
REASON_VERSION = "context binary version < 3.3.3"
REASON_READ_CALLBACK = "read callback registered"
REASON_RPCMEM = "RPCMem unavailable"
EP_DISABLED_REASONS = (REASON_EMBEDDED, REASON_VERSION, REASON_READ_CALLBACK, REASON_RPCMEM)

#: The binaries onnxruntime-qnn ships: win_arm64 (the feature); linux x86_64 and win_amd64 print the platform gate.
WIN, LINUX, WIN_X64 = "win_arm64", "linux_x86_64", "win_amd64"
PLATFORMS = (WIN, LINUX, WIN_X64)
EVIDENCE_LINES = 5


@dataclass(frozen=True)
class LogPattern:
    """One EP message: ``template`` with ``{}`` for values; its literals are strings of ``platforms``."""

    name: str
    template: str
    effect: str  # see _EFFECTS
    platforms: tuple[str, ...] = (WIN,)
    reason: str = ""  # ep-disabled only: one of EP_DISABLED_REASONS
    level: str = ""  # log level the EP uses (I/W/E/V; "" when it is a status text)

    @property
    def fragments(self) -> tuple[str, ...]:
        return tuple(part for part in self.template.split("{}") if part)

    @cached_property
    def regex(self) -> re.Pattern[str]:
        parts = self.template.split("{}")
        body = "(.*?)".join(re.escape(p) for p in parts[:-1])
        body = body + "(.*)" + re.escape(parts[-1]) if len(parts) > 1 else re.escape(parts[0])
        return re.compile(body)


_EVIDENCE_RANK = (
    "ep-error",
    "gate",
    "option",
    "retry",
    "map-failed",
    "ep-disabled",
    "map",
    "dma-ok",
    "dma-request",
    "note",
    "session",
)
_EFFECTS = (
    "session",
    "gate",
    "option",
    "ep-error",
    "ep-disabled",
    "retry",
    "map",
    "dma-request",
    "dma-ok",
    "map-failed",
    "note",
)
NODE_DISABLES = ("embedded-node", "old-binary")  #: per-node disables (the others switch mapping off for the session)
NODE_MAPS = ("map-create", "map-cached")  #: one per context bin a node maps (first use, or the mapper's cache hit)

# Order matters only where one text contains another: specific before generic.
PATTERNS: tuple[LogPattern, ...] = (
    LogPattern("session", "Creating QNN EP", "session", PLATFORMS, level="I"),
    LogPattern(
        "gate",
        "File mapped weights feature is only available on Windows arm64 devices for QNN API "
        "versions >= 2.32. Feature will be disabled by default",
        "gate",
        (LINUX, WIN_X64),
        level="W",
    ),
    LogPattern("option", "User specified disable_file_mapped_weights: {}", "option", PLATFORMS, level="W"),
    LogPattern(
        "embedded-node",
        "{} is using an embedded cache. Disabling file mapping for this node.",
        "ep-disabled",
        reason=REASON_EMBEDDED,
        level="W",
    ),
    LogPattern(
        "embedded-ep",
        "File mapped weights feature is incompatible with embedded EP contexts. Feature will be disabled by default.",
        "ep-disabled",
        reason=REASON_EMBEDDED,
        level="W",
    ),
    LogPattern(
        "old-binary",
        "{}. File mapping is only supported for versions >= 3.3.3. Disabling file mapping for this node.",
        "ep-disabled",
        reason=REASON_VERSION,
        level="W",
    ),
    LogPattern(
        "old-binary-ssr",
        "SSR recovery: context binary version {} < 3.3.3, file mapping not supported. Falling back to direct read.",
        "ep-disabled",
        reason=REASON_VERSION,
        level="W",
    ),
    LogPattern(
        "read-callback-reuse",
        "EPContext read callback registered on a session reusing an already-set-up "
        "backend manager; disabling file mapping for this session.",
        "ep-disabled",
        PLATFORMS,
        reason=REASON_READ_CALLBACK,
        level="W",
    ),
    LogPattern(
        "read-callback",
        "EPContext read callback registered; disabling file mapping for this session.",
        "ep-disabled",
        PLATFORMS,
        reason=REASON_READ_CALLBACK,
        level="W",
    ),
    LogPattern(
        "rpcmem-load",
        "Unable to load RPCMem library: {} - Disabling file mapped weights.",
        "ep-disabled",
        PLATFORMS,
        reason=REASON_RPCMEM,
        level="W",
    ),
    # a hard error of SetupBackend (a failed status), not a deliberate disable
    LogPattern(
        "rpcmem-missing", "RPCMem Library is required for file mapping but is uninitialized.", "ep-error", level="E"
    ),
    LogPattern(
        "retry-direct-read",
        "contextCreateFromBinaryWithCallback failed ({}). Retrying with direct read.",
        "retry",
        level="W",
    ),
    LogPattern(
        "retry-feature-off",
        "Failed to create context with file mapping enabled. Error: {}. Retrying with feature disabled.",
        "retry",
        level="W",
    ),
    # the retry tails are literals of their own: any other message ending in one is a retry too
    LogPattern("retry-direct-read-tail", "{}). Retrying with direct read.", "retry", level="W"),
    LogPattern("retry-feature-off-tail", "{}. Retrying with feature disabled.", "retry", level="W"),
    LogPattern("map-create", "Creating context bin file mapping for {}", "map", level="I"),
    LogPattern("map-cached", "Found existing mapview memory pointer ({}", "map", level="I"),
    LogPattern("map-file-handle", "Created file handle ({}", "map", level="V"),
    LogPattern("map-handle", "Created file mapping with handle ({}", "map", level="V"),
    LogPattern("map-view", "Created mapview pointer with address {}", "map", level="I"),
    LogPattern("dma-request", "Mapping DMA data for request: memory mapped base pointer({}", "dma-request", level="I"),
    LogPattern("dma-ok", "Created DMA data mapping with address: {}", "dma-ok", level="I"),
    LogPattern("dma-register-failed", "Failed to register DMA data mapping to RPCMEM", "map-failed", level="E"),
    LogPattern(
        "dma-after-error",
        "Attempting to map DMA data but file mapping has been disabled, possibly due "
        "to an error in a previous request.",
        "map-failed",
        level="W",
    ),
    LogPattern(
        "dma-null-base", "Attempting to map DMA data for null memory mapped base pointer", "map-failed", level="E"
    ),
    LogPattern(
        "dma-bad-size", "Mapping request size must be > 0 with backend mapping required", "map-failed", level="E"
    ),
    LogPattern(
        "dma-overflow",
        "Critical error in QNN: mapping request offset + size will overflow 64 bits",
        "map-failed",
        level="E",
    ),
    LogPattern(
        "dma-out-of-file", "Requested offset and size includes memory outside of mapped file", "map-failed", level="E"
    ),
    LogPattern("dma-callback-param", "MapDmaDataCallback: notify_param is null", "map-failed", level="E"),
    LogPattern("dma-callback-manager", "MapDmaDataCallback: QnnBackendManager is null", "map-failed", level="E"),
    # The mapping step's own failures (windows_file_mapper.cc).
    LogPattern("map-file-failed", "Failed to create file handle for context bin{}", "map-failed", level="E"),
    # GetFileSizeIfValid checks the binary first: a missing or empty one is named here, so the
    # mapping step's own "size of 0 bytes" is not reached in practice
    LogPattern("bin-missing", "Context binary does not exist: {}", "map-failed", (WIN, WIN_X64, LINUX), level="E"),
    LogPattern("bin-empty", "File is empty: {}", "map-failed", (WIN, WIN_X64, LINUX), level="E"),
    LogPattern("map-empty", "Context bin has a size of 0 bytes: {}", "map-failed", level="E"),
    LogPattern("map-no-path", "Context bin file path is empty", "map-failed", level="E"),
    LogPattern("map-handle-failed", "Failed to create file mapping handle for context bin{}", "map-failed"),
    LogPattern("map-view-failed", "Failed to retrieve mapview pointer for context bin{}", "map-failed"),
    LogPattern(
        "mapper-missing", "Attempting to use File Mapping feature but file_mapper_ is uninitialized", "map-failed"
    ),
    LogPattern(
        "callback-api-missing", "Invalid function pointer for contextCreateFromBinaryWithCallback.", "map-failed"
    ),
    # release side: reported as evidence, they do not change where this session's weights came from
    LogPattern("dma-release", "Releasing DMA data mapping for memory mapped pointer({}", "note", level="I"),
    LogPattern("deregister-failed", "Failed to deregister buffer from RPCMEM: {}", "note", level="E"),
    LogPattern("unmap-failed", "Failed to unmap view of file with ptr: {}", "note", level="E"),
    LogPattern("release-null", "Attempting to release DMA data for null memory mapped pointer", "note", level="E"),
    LogPattern(
        "release-bad-request",
        "Mapping release request address must not be null and size must be > 0",
        "note",
        level="E",
    ),
    LogPattern("release-callback-param", "ReleaseDmaDataCallback: notify_param is null", "note", level="E"),
    LogPattern("release-callback-manager", "ReleaseDmaDataCallback: QnnBackendManager is null", "note", level="E"),
)

#: Selected strings of the binaries that no pattern reads, each with why (a regex on the whole string).
IGNORED: tuple[tuple[str, str], ...] = (
    (r"disable_file_mapped_weights", "the provider option's key, not a message"),
    (
        r"Failed to get symbol remote_register_buf_attr2\.|remote_register_buf_attr2",
        "RPCMem loader: a symbol name and the exception text reported inside 'Unable to load RPCMem library: <e>'",
    ),
    (
        r"\) for context bin( file)?: ?|\) isBackendMappingNeeded\(|\), (total file size|size|offset|address)\(|"
        r"\), size: \(| for context bin |[.,] Error code: ",
        "value-formatting tails of mapper / DMA messages whose head is classified",
    ),
    (
        r"onnxruntime::qnn::(QnnBackendManager::)?(MapDmaData|ReleaseDmaData)|onnxruntime::qnn::UnmapFile|"
        r"onnxruntime::qnn::WindowsFileMapper::GetContextBinMappedMemoryPtr",
        "__FUNCTION__ names of the mapper and DMA functions (the position rule's anchors)",
    ),
    (
        r"Profiling level set to (basic|detailed|optrace)\.|Failed to create QNN profile! Error: |"
        r"Failed to enable op trace! Error: |Could not free backend profile handle!|Invalid Qnn context priority\.|"
        r"No known node names associated with context handle: ",
        "a neighbouring function's literals inside the DMA callbacks' pool (profiling, context priority, "
        "context-to-node lookup): not file mapping",
    ),
    (
        r"Exception|FailFast|ReturnHr|ReturnNt|RaiseFailFastException|RtlDisownModuleHeapAllocation|WIL Exception|"
        r"C:\\actions-runner\\.*",
        "WIL (Windows Implementation Library) error-reporting texts and build paths before the mapper's pool",
    ),
    (
        r"SC8[0-9]{3}XP|~+|Hash table size overflow| \.\.\. \(message truncated\)|\[%s : %d\] RAW: |bad allocation|"
        r"bad function call",
        "SoC names, a separator line, abseil and C++ runtime texts after the RPCMem loader's pool",
    ),
    (r"rpcmem_(alloc|free|to_fd)", "symbol names the EP resolves in the RPCMem library"),
    (r"rpcmem_[aft]H", "machine code bytes that happen to spell a symbol prefix (Linux .so)"),
    (
        r"Failed to get symbol rpcmem_(alloc|free|to_fd)\.",
        "text of the exception reported inside 'Unable to load RPCMem library: <e>'",
    ),
    (
        r"(remote_register_)?Failed to initialize RPCMEM dynamic library hand(le: |Hash table size overflow)",
        "text of the exception reported inside 'Unable to load RPCMem library: <e>'",
    ),
    (r"rpcmem_lib should not be nullptr\.", "internal assertion text (ORT_ENFORCE), not a log message"),
    (
        r"rpcmem_alloc\(\) failed to allocate and returned nullptr\.",
        "HTP shared-memory allocator (enable_htp_shared_memory_allocator), not file mapping",
    ),
    (
        r"rpcmem_to_fd\(\) returned invalid file descriptor\.",
        "HTP shared-memory allocator (enable_htp_shared_memory_allocator), not file mapping",
    ),
    (
        r"No EPContext read callback registered; reading '",
        "debug detail (VERBOSE) of where ORT gets the .bin path; printed on Linux too, says nothing of mapping",
    ),
    (
        r"EPContext binary decrypted via App read callback: ",
        "debug detail of the read-callback path; the 'read callback registered' line is what is classified",
    ),
    (
        r"Failed to resolve EPContext read callback \(",
        "configuration error of the read callback: session creation fails, no mapping path taken",
    ),
    (
        r"Unknown exception occurred while creating QNN EP( factory\.| for compatibility check|\.)",
        "EP construction error; selected only by the session marker's search term",
    ),
    (r"(Unmap|Map)ViewOfFile", "Win32 API import names"),
    (r"onnxruntime::qnn::(Map|Release)DmaDataCallback", "function names (__FUNCTION__ of error statuses)"),
    (r"\.\?AV.*RpcMemLibrary.*", "MSVC RTTI type name (symbol)"),
    (r"_Z.*|St\d+_Sp_counted_ptr_inplace.*", "C++ mangled symbol name (Linux .so)"),
    (r"(/.*/)?rpcmem_library\.cc", "source file name (Linux .so)"),
)
