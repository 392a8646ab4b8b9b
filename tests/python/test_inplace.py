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


# ------------------------------------------------------------------------------------
# Torch's rule for in-place writes, applied by `assume_exclusive`
# ------------------------------------------------------------------------------------

REQUIRES_GRAD = (
    "in-place write into a tensor that requires grad while grad mode is on, which torch "
    "refuses (a leaf Variable that requires grad is being used in an in-place "
    "operation); write it under torch.no_grad(), as optimizer steps do"
)


def test_a_tensor_that_requires_grad_is_refused_in_grad_mode_as_torch_refuses(ext):
    w = torch.nn.Parameter(torch.ones(4))
    # Torch's own in-place operation is refused the same way.
    with pytest.raises(RuntimeError, match="in-place operation"):
        w.mul_(2.0)
    with pytest.raises(RuntimeError) as info:
        ext.scale_in_place(w, 2.0)
    assert str(info.value) == REQUIRES_GRAD
    # A view of it requires grad too.
    with pytest.raises(RuntimeError, match="requires grad"):
        ext.scale_in_place(w[1:3], 2.0)
    assert w.detach().tolist() == [1.0] * 4


def test_under_no_grad_it_is_written_as_an_optimizer_step_writes(ext):
    model = torch.nn.Linear(3, 2)
    bias = model.bias
    before = bias.detach().clone()
    ptr = bias.data_ptr()
    with torch.no_grad():
        ext.scale_in_place(bias, 2.0)
    assert torch.equal(bias.detach(), before * 2) and bias.data_ptr() == ptr
    # The same write with grad mode off globally.
    torch.set_grad_enabled(False)
    try:
        ext.scale_in_place(bias, 0.5)
    finally:
        torch.set_grad_enabled(True)
    assert torch.equal(bias.detach(), before)


def test_a_written_tensor_is_versioned_so_backward_refuses_a_stale_saved_value(ext):
    w = torch.ones(3, requires_grad=True)
    x = torch.full((3,), 2.0)
    y = (w * x).sum()  # autograd saves x for w's gradient
    version = x._version
    ext.scale_in_place(x, 3.0)  # x does not require grad: written, in grad mode too
    assert x.tolist() == [6.0] * 3
    assert x._version > version
    # Torch's own error, never a gradient computed from the overwritten x.
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_reading_a_tensor_that_requires_grad_asks_nothing(ext):
    w = torch.nn.Parameter(torch.ones(2, 3))
    version = w._version
    assert ext.sum_f32_2d(w) == 6.0
    assert w._version == version


def test_numpy_arrays_have_no_torch_rule(ext):
    a = np.ones(3, np.float32)
    with torch.no_grad():
        ext.scale_in_place(a, 2.0)
    ext.scale_in_place(a, 2.0)
    assert a.tolist() == [4.0] * 3


def test_an_inference_tensor_is_written_only_in_inference_mode_as_torch_writes_it(ext):
    with torch.inference_mode():
        t, u = torch.ones(3), torch.ones(3)
    # Torch's own refusal (raised after its kernel ran: `u` is written nonetheless).
    with pytest.raises(RuntimeError, match="inference tensor"):
        u.mul_(2.0)
    with pytest.raises(BufferError) as info:
        ext.scale_in_place(t, 2.0)
    assert str(info.value) == (
        "torch: in-place write into an inference tensor outside inference mode, which "
        "torch refuses; write a clone (t.clone()) instead"
    )
    assert t.tolist() == [1.0] * 3
    with torch.inference_mode():
        ext.scale_in_place(t, 2.0)
    assert t.tolist() == [2.0] * 3
