"""Who shares one mapping: "session" (default, upstream's per-backend-manager mapper) or "process" (opt-in)."""

from __future__ import annotations

from ._registry import REGISTRY, MappingRegistry

#: The names `load_context(scope=...)` and the cpu target's ``--mapping-scope`` accept.
SCOPES = ("session", "process")
#: What a failed mapped attempt disables (`MappingScope.disables`).
DISABLES = ("model", "backend-manager")


class MappingScope:
    """One file mapper's path -> mapping table (one backend manager's ``file_mapper_``)."""

    def __init__(
        self,
        kind: str = "session",
        registry: MappingRegistry | None = None,
        *,
        disables: str = "model",
        sessions: bool = False,
    ) -> None:
        if kind not in SCOPES:
            raise ValueError(f"mapping scope must be one of {', '.join(SCOPES)}, got {kind!r}")
        if disables not in DISABLES:
            raise ValueError(f"disables must be one of {', '.join(DISABLES)}, got {disables!r}")
        self.kind = kind
        self.registry = registry if registry is not None else MappingRegistry()
        #: What a failed mapped attempt switches off: "model" (that context only: microsoft/onnxruntime
        #: #27871) or "backend-manager" (before #27871: every later load of this scope is refused ABORTED).
        self.disables, self.disabled = disables, False
        #: ``sessions=True``: the sessions of a process share it (``ep.share_ep_contexts``), one
        #: backend manager whose loads count one fault plan together; None: each load counts its own.
        self.cursors: dict[int, object] | None = {} if sessions else None
        #: Where a failed mapped attempt that does not fall back on its own leaves its mapping,
        #: still mapped, for its caller's retry (the list path's attempt scope: upstream's file
        #: mapper keeps the view while the list is retried); None: released when it fails.
        self.failed_mappings: list | None = None

    def __repr__(self) -> str:
        return f"<MappingScope {self.kind} {id(self.registry):#x}>"


PROCESS_SCOPE = MappingScope("process", REGISTRY)  #: The process-wide table (``scope="process"``, `load_weights`).


def resolve_scope(scope: str | MappingScope | None) -> MappingScope:
    """A scope for a load: new per "session" call (or None), the process's, or the caller's shared object."""
    if isinstance(scope, MappingScope):
        return scope
    if scope is None or scope == "session":
        return MappingScope("session")
    if scope == "process":
        return PROCESS_SCOPE
    raise ValueError(f"scope must be one of {', '.join(SCOPES)} or a MappingScope, got {scope!r}")
