"""Rust <-> NumPy: every dtype NumPy exchanges, ranks 0-4, every layout, empty arrays."""

import sys

import numpy as np
import pytest

from helpers import (
    LAYOUTS,
    NONEMPTY_SHAPES,
    NUMPY_DTYPES,
    SHAPES,
    expected,
    np_ptr,
    numpy_layout,
    shape_id,
)

layouts = pytest.mark.parametrize("layout", LAYOUTS)
shapes = pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
nonempty_shapes = pytest.mark.parametrize("shape", NONEMPTY_SHAPES, ids=shape_id)
pytestmark = [layouts, pytest.mark.parametrize("dtype", NUMPY_DTYPES)]


@shapes
def test_rust_to_numpy(ext, dtype, shape, layout):
    t, ptr = ext.make(dtype, list(shape), layout, counted=True)
    a = np.from_dlpack(t)
    assert a.dtype == np.dtype(dtype)
    assert a.shape == shape
    np.testing.assert_array_equal(a, expected(dtype, shape), strict=True)
    if a.size:
        # Zero-copy: NumPy views the Rust buffer, with the Rust layout.
        assert t.data_ptr() == ptr
        assert np_ptr(a) == ptr
    if a.size > 1:
        if layout == "negative":
            assert all(s < 0 for n, s in zip(a.shape, a.strides) if n > 1)
        if layout == "f":
            assert a.flags.f_contiguous
        if layout == "stepped" or (layout == "sliced" and a.ndim > 1):
            assert not a.flags.c_contiguous
    assert a.flags.writeable
    del a, t  # the leak check after the test proves the Rust deleter ran


@nonempty_shapes
def test_numpy_writes_are_seen_by_rust(ext, dtype, shape, layout):
    t, _ = ext.make(dtype, list(shape), layout, counted=True)
    a = np.from_dlpack(t)
    a[...] = np.ones((), dtype)
    b = np.from_dlpack(t)  # a second, independent export of the same tensor
    assert np_ptr(b) == np_ptr(a)
    assert ext.inspect(t)["values"] == np.ones(shape, dtype).ravel().tolist()


@shapes
def test_numpy_to_rust(ext, dtype, shape, layout):
    a = numpy_layout(expected(dtype, shape), layout)
    refs = sys.getrefcount(a)
    info = ext.inspect(a)
    assert info["dtype"] == dtype
    assert info["shape"] == list(shape)
    assert info["values"] == a.ravel(order="C").tolist()
    assert info["legacy"] is False and info["version"][0] == 1
    assert info["read_only"] is False and info["device"] == (1, 0)
    if a.size:
        assert info["ptr"] == np_ptr(a)  # zero-copy import
        # NumPy sends NULL strides for 0-d arrays.
        assert (info["strides"] or []) == [s // a.itemsize for s in a.strides]
    # NumPy's export held a reference to the array; the Rust drop released it.
    assert sys.getrefcount(a) == refs


@shapes
def test_numpy_rust_numpy_round_trip(ext, dtype, shape, layout):
    a = numpy_layout(expected(dtype, shape), layout)
    b = np.from_dlpack(ext.roundtrip(a))
    np.testing.assert_array_equal(b, a, strict=True)
    if a.size:
        assert np_ptr(b) == np_ptr(a)
        assert b.strides == a.strides


@shapes
def test_rust_numpy_rust_round_trip(ext, dtype, shape, layout):
    t, ptr = ext.make(dtype, list(shape), layout, counted=True)
    info = ext.inspect(np.from_dlpack(t))
    assert info["values"] == expected(dtype, shape).ravel().tolist()
    if all(shape):
        assert info["ptr"] == ptr


@shapes
def test_owned_import_copies_into_c_order(ext, dtype, shape, layout):
    # ndarray's `Array::from_dlpack` of a foreign tensor copies into standard layout.
    a = numpy_layout(expected(dtype, shape), layout)
    b = np.from_dlpack(ext.roundtrip_owned(a, dtype))
    np.testing.assert_array_equal(b, a, strict=True)
    assert b.flags.c_contiguous
    if a.size > 1:
        assert np_ptr(b) != np_ptr(a)
