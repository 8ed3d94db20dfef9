"""The pieces the load_context suites share: the weights file and its regions, a recording
``create``, the mapped load most tests vary, and a spy on the direct read (fixtures are
imported into each test module by name)."""

from __future__ import annotations

import pytest
from mapper_support import data_address, write_file

from mapper_impl import LoadedContext, load_context
from mapper_impl import _attempts as context_mod

SIZE = 64 * 1024 + 77
REGIONS = [(0, 1000), (4097, 3000), (SIZE - 500, 500)]


@pytest.fixture
def weights_file(tmp_path):
    path = tmp_path / "ctx_qnn.bin"
    return path, write_file(path, SIZE, seed=31)


class Recorder:
    """A ``create`` that records how it was called (path taken, bytes and addresses of the
    views it got) and returns a small value that does not pin the views."""

    def __init__(self, fail_on: set[int] = frozenset(), error: type[BaseException] = RuntimeError) -> None:
        self.calls: list[dict] = []
        self.fail_on = fail_on
        self.error = error

    def __call__(self, weights, views):
        self.calls.append(
            {
                "path_taken": weights.path_taken,
                "mapped": weights.mapped,
                "bytes": [bytes(v) for v in views],
                "addresses": [data_address(v) for v in views],
                "base": weights.base_address,
            }
        )
        if len(self.calls) in self.fail_on:
            raise self.error(f"create call {len(self.calls)} failed")
        return ("value", len(self.calls))


def _mapped(path, **options) -> LoadedContext:
    """``load_context`` of REGIONS with mapping on and a fresh `Recorder`: most tests here vary
    only the faults and the policy."""
    return load_context(path, REGIONS, Recorder(), disable_file_mapped_weights="0", **options)


@pytest.fixture
def direct_reads(monkeypatch):
    """Count direct (heap) reads made by load_context (a spy: the real read still runs)."""
    calls = []
    real = context_mod.heap_weights

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(context_mod, "heap_weights", counting)
    return calls


def expected_bytes(data: bytes) -> list[bytes]:
    return [data[o : o + s] for o, s in REGIONS]
