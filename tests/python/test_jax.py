"""Rust <-> JAX (CPU): every dtype, ranks 0-4, empty arrays.

JAX asks for legacy capsules (``__dlpack__`` without ``max_version``), imports only
compact layouts (C order or a transposition), and copies unless the buffer is 64-byte
aligned. Zero-copy is asserted where JAX shares memory: for buffers the extension
aligns, and for every export of a JAX array. Sliced, stepped and negative-stride
exports are refused by JAX (tested) and go through ``copy=True`` instead.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import (
    ALL_DTYPES,
    NONEMPTY_SHAPES,
    SHAPES,
    capsule_name,
    expected,
    shape_id,
)

dtypes = pytest.mark.parametrize("dtype", ALL_DTYPES)
shapes = pytest.mark.parametrize("shape", SHAPES, ids=shape_id)


def as_numpy(x):
    """A JAX array's values in NumPy (bfloat16 as float32)."""
    if x.dtype == jnp.bfloat16:
        x = x.astype(jnp.float32)
    return np.asarray(x)


def expected_jax(dtype, shape):
    return jnp.asarray(expected(dtype, shape)).astype(dtype)


class Copying:
    """Forwards the DLPack protocol to ``inner``, always asking for a copy."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.inner.__dlpack__(**{**kwargs, "copy": True})

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


@dtypes
@shapes
@pytest.mark.parametrize("layout", ["c", "f"])
def test_rust_to_jax(ext, dtype, shape, layout):
    t, _ = ext.make(dtype, list(shape), layout, counted=True)
    x = jax.dlpack.from_dlpack(t)
    assert x.dtype == jnp.dtype(dtype)
    assert x.shape == shape
    np.testing.assert_array_equal(as_numpy(x), expected(dtype, shape), strict=True)
    # Whether JAX shared the buffer depends on its alignment (see the aligned test).


@dtypes
@pytest.mark.parametrize("shape", NONEMPTY_SHAPES, ids=shape_id)
def test_rust_to_jax_zero_copy_when_aligned(ext, dtype, shape):
    t, ptr = ext.make(dtype, list(shape), align=64, counted=True)
    x = jax.dlpack.from_dlpack(t)
    assert x.unsafe_buffer_pointer() == ptr  # JAX views the Rust buffer
    np.testing.assert_array_equal(as_numpy(x), expected(dtype, shape), strict=True)


@dtypes
@pytest.mark.parametrize("layout", ["sliced", "stepped", "negative"])
def test_non_compact_layouts_are_refused_by_jax_and_copied_on_request(ext, dtype, layout):
    shape = (3, 4)
    t, ptr = ext.make(dtype, list(shape), layout, counted=True)
    with pytest.raises(Exception, match="compact"):
        jax.dlpack.from_dlpack(t)
    copying = Copying(t)
    x = jax.dlpack.from_dlpack(copying)
    np.testing.assert_array_equal(as_numpy(x), expected(dtype, shape), strict=True)
    assert x.unsafe_buffer_pointer() != ptr
    assert "max_version" not in copying.calls[0]  # a legacy request


@dtypes
@shapes
def test_jax_to_rust(ext, dtype, shape):
    x = expected_jax(dtype, shape)
    info = ext.inspect(x)
    assert info["dtype"] == dtype
    assert info["shape"] == list(shape)
    assert info["values"] == as_numpy(x).ravel().tolist()
    assert info["legacy"] is True  # JAX exports legacy capsules only
    if x.size:
        assert info["ptr"] == x.unsafe_buffer_pointer()  # zero-copy import


@dtypes
@pytest.mark.parametrize("shape", NONEMPTY_SHAPES, ids=shape_id)
def test_jax_rust_jax_round_trip(ext, dtype, shape):
    x = expected_jax(dtype, shape)
    y = jax.dlpack.from_dlpack(ext.roundtrip(x))
    np.testing.assert_array_equal(as_numpy(y), as_numpy(x), strict=True)
    # JAX's own buffers are aligned, so the way back is zero-copy too.
    assert y.unsafe_buffer_pointer() == x.unsafe_buffer_pointer()


def test_jax_asks_for_legacy_capsules(ext):
    t, _ = ext.make("float32", [2, 3], counted=True)
    seen = []

    class Spy(Copying):
        def __dlpack__(self, **kwargs):
            capsule = self.inner.__dlpack__(**kwargs)
            seen.append((kwargs, capsule_name(capsule)))
            return capsule

    jax.dlpack.from_dlpack(Spy(t))
    kwargs, name = seen[0]
    assert kwargs.get("max_version") is None and name == "dltensor"


def test_read_only_tensor_reaches_jax_through_a_copy(ext):
    # JAX asks for a legacy capsule, which cannot say "read-only": the Rust side copies.
    t = ext.make_read_only([2, 3], counted=True)
    x = jax.dlpack.from_dlpack(t)
    np.testing.assert_array_equal(as_numpy(x), expected("float32", (2, 3)))
    assert x.unsafe_buffer_pointer() != t.data_ptr()
