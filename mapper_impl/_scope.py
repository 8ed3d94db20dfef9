"""Who shares one mapping: "session" (default, upstream's per-backend-manager mapper) or "process" (opt-in)."""

from __future__ import annotations

from ._registry import REGISTRY, MappingRegistry

SCOPES = ("session", "process")  #: The names `load_context(scope=...)` and the cpu target's ``--mapping-scope`` accept.


class MappingScope:
    """One file mapper's path -> mapping table (one backend manager's ``file_mapper_``)."""

    def __init__(self, kind: str = "session", registry: MappingRegistry | None = None) -> None:
        if kind not in SCOPES:
            raise ValueError(f"mapping scope must be one of {', '.join(SCOPES)}, got {kind!r}")
        self.kind = kind
        self.registry = registry if registry is not None else MappingRegistry()
        #: Where a failed attempt leaves its mapping, still mapped, for its caller's retry (the list path); None:
        #: released.
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
