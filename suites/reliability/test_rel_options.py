"""The provider option `disable_file_mapped_weights` at both entry points that take it:
anything but "0"/"1" (and bools, for mapper_impl) is a ValueError naming the option, never a
silently chosen mode. (suites/mapper covers more spellings for mapper_impl alone.)"""

from __future__ import annotations

import re

import pytest

from harness.targets.qnn.ep import qnn_session_options
from mapper_impl import load_weights, stats

BAD_VALUES = ["", "2", "yes", None]
MUST_BE = '"0", "1", True or False'


@pytest.fixture
def weights_file(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(bytes(range(256)) * 64)
    return path


@pytest.mark.parametrize("value", BAD_VALUES, ids=repr)
def test_load_weights_rejects_ambiguous_flag(weights_file, value):
    before = stats()
    with pytest.raises(ValueError, match="disable_file_mapped_weights"):
        load_weights(weights_file, disable_file_mapped_weights=value)
    assert stats() == before, "a refused option must not map or read anything"


@pytest.mark.parametrize("value", BAD_VALUES, ids=repr)
def test_qnn_session_options_rejects_ambiguous_flag(value):
    """Checked before the QNN EP is registered: the error is the same with or without
    onnxruntime-qnn installed. Imported at the top of this module: a renamed or moved function
    fails the collection, never skips."""
    with pytest.raises(ValueError, match=re.escape(f"disable_file_mapped_weights must be {MUST_BE}, got {value!r}")):
        qnn_session_options(disable_file_mapped_weights=value)


@pytest.mark.parametrize(("value", "path_taken"), [("0", "mapped"), ("1", "heap")])
def test_the_two_valid_values_still_work(weights_file, value, path_taken):
    with load_weights(weights_file, disable_file_mapped_weights=value) as weights:
        assert weights.path_taken == path_taken
        assert bytes(weights.buffer[:256]) == bytes(range(256))
