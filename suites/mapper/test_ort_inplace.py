"""ONNX Runtime uses mapped weights in place: an OrtValue over a mapped load points into the
mapping (no copy), and closing the load while ORT still holds it defers the unmap."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from mapper_support import assert_clean, stats_guard  # noqa: F401 (autouse fixture)

from mapper_impl import load_weights, stats

ort = pytest.importorskip("onnxruntime")


def test_ortvalue_over_mapped_weights_is_in_place(tmp_path):
    """numpy.frombuffer(weights.buffer) -> OrtValue.ortvalue_from_numpy shares the mapped
    bytes (same data pointer); closing the Weights while the OrtValue lives defers the unmap
    and the tensor stays readable; dropping the OrtValue releases everything."""
    path = tmp_path / "tiny_weights.bin"
    expected = np.linspace(-1.0, 1.0, 3 * 1024 + 7, dtype=np.float32)
    expected.tofile(path)

    weights = load_weights(path)
    assert weights.path_taken == "mapped"
    array = np.frombuffer(weights.buffer, dtype=np.float32)
    assert not array.flags.writeable
    value = ort.OrtValue.ortvalue_from_numpy(array)
    array_ptr = array.__array_interface__["data"][0]
    assert value.data_ptr() == array_ptr  # in place, no copy
    assert value.shape() == [expected.size]
    assert value.data_type() == "tensor(float)"
    np.testing.assert_array_equal(value.numpy(), expected)

    del array  # the OrtValue alone keeps the view alive from here on
    weights.close()
    gc.collect()
    assert stats().deferred_unmaps == 1
    assert stats().live_mappings == 1
    assert value.data_ptr() == array_ptr
    np.testing.assert_array_equal(value.numpy(), expected)

    del value
    assert_clean()


def test_ortvalue_over_heap_weights_is_a_private_buffer(tmp_path):
    """The heap path also feeds ORT in place, but from this load's private copy."""
    path = tmp_path / "tiny_heap.bin"
    expected = np.arange(4096, dtype=np.float32)
    expected.tofile(path)
    with (
        load_weights(path) as mapped,
        load_weights(path, disable_file_mapped_weights="1") as heap,
    ):
        mapped_value = ort.OrtValue.ortvalue_from_numpy(np.frombuffer(mapped.buffer, np.float32))
        heap_value = ort.OrtValue.ortvalue_from_numpy(np.frombuffer(heap.buffer, np.float32))
        assert heap_value.data_ptr() != mapped_value.data_ptr()
        np.testing.assert_array_equal(heap_value.numpy(), mapped_value.numpy())
        del mapped_value, heap_value
