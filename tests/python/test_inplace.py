"""Writing into a caller's array, in place: the recipe of the `python` module's docs
(`DLPackArray::assume_exclusive`), with NumPy and PyTorch; and what the docs say of JAX
arrays and of tensors that autograd tracks (read like any import; the safe path never
writes them)."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import np_ptr

# Run again against the stable-ABI build (tests/README.md).
pytestmark = pytest.mark.protocol


def test_the_recipe_writes_numpy_memory(ext):
    a = np.ones(5, np.float32)
    ptr = np_ptr(a)
    ext.scale_in_place(a, 3.0)
    assert (a == 3.0).all() and np_ptr(a) == ptr
    # A strided view too: only its own elements change.
    b = np.ones(10, np.float32)
    ext.scale_in_place(b[::2], 2.0)
    assert b.tolist() == [2.0, 1.0] * 5


def test_the_recipe_writes_torch_memory(ext):
    t = torch.ones(4)
    ext.scale_in_place(t, 0.5)
    assert t.tolist() == [0.5] * 4


def test_the_recipe_refuses_read_only_memory(ext):
    a = np.ones(3, np.float32)
    a.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ext.scale_in_place(a, 2.0)
    assert (a == 1.0).all()


def test_tensors_autograd_tracks_are_read_never_written_by_the_safe_path(ext):
    w = torch.ones(2, 3, requires_grad=True)
    # torch's own __dlpack__ refuses it; its C exchange API, which imports use, does
    # not: reading is harmless.
    with pytest.raises(BufferError):
        w.__dlpack__()
    assert ext.sum_f32_2d(w) == 6.0
    # Writing without the unsafe door is refused (shared), as for every import.
    with pytest.raises(BufferError, match="shared"):
        ext.write_first(w, 5.0)
    assert w.detach().tolist() == [[1.0] * 3] * 2


def test_jax_arrays_are_read_never_written_by_the_safe_path(ext):
    j = jnp.ones((2, 3), jnp.float32)
    assert ext.sum_f32_2d(j) == 6.0
    with pytest.raises(BufferError, match="shared"):
        ext.write_first(j, 5.0)
    assert float(j.sum()) == 6.0
