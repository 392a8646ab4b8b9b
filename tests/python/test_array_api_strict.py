"""Rust <-> array-api-strict, the Python array API's reference implementation: every
dtype it has (no float16/bfloat16), ranks 0-4, every layout, empty arrays."""

import numpy as np
import pytest

import array_api_strict as xp

from helpers import (
    COMPLEX,
    INTS,
    LAYOUTS,
    SHAPES,
    UINTS,
    expected,
    np_ptr,
    numpy_layout,
    shape_id,
)

XP_DTYPES = ["bool", *INTS, *UINTS, "float32", "float64", *COMPLEX]

pytestmark = [
    pytest.mark.parametrize("layout", LAYOUTS),
    pytest.mark.parametrize("shape", SHAPES, ids=shape_id),
    pytest.mark.parametrize("dtype", XP_DTYPES),
]


def test_rust_to_array_api_strict(ext, dtype, shape, layout):
    t, ptr = ext.make(dtype, list(shape), layout, counted=True)
    x = xp.from_dlpack(t)
    assert x.dtype == getattr(xp, dtype)
    assert x.shape == shape
    assert x.device == xp.Device()  # the CPU device
    # Read back through DLPack again (array-api-strict has no public buffer access).
    a = np.from_dlpack(x)
    np.testing.assert_array_equal(a, expected(dtype, shape), strict=True)
    if a.size:
        assert np_ptr(a) == ptr  # zero-copy all the way


def test_array_api_strict_to_rust(ext, dtype, shape, layout):
    base = numpy_layout(expected(dtype, shape), layout)
    x = xp.asarray(base)
    info = ext.inspect(x)
    assert info["dtype"] == dtype
    assert info["shape"] == list(shape)
    assert info["values"] == base.ravel(order="C").tolist()
    if base.size:
        assert info["ptr"] == np_ptr(np.from_dlpack(x))


def test_array_api_strict_round_trip(ext, dtype, shape, layout):
    x = xp.asarray(numpy_layout(expected(dtype, shape), layout))
    y = xp.from_dlpack(ext.roundtrip(x))
    assert xp.all(y == x)
    assert y.dtype == x.dtype and y.shape == x.shape
    if all(shape):
        assert np_ptr(np.from_dlpack(y)) == np_ptr(np.from_dlpack(x))
