"""Writing into a caller's array, in place: the recipe of the `python` module's docs
(`DLPackArray::assume_exclusive`), with NumPy and PyTorch; and what the docs say of JAX
arrays and of tensors that autograd tracks (read like any import; the safe path never
writes them)."""

import sys

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
    "in-place write refused: the tensor requires grad and grad mode is on: autograd "
    "cannot record a write made outside torch (torch itself refuses one into a leaf such "
    "as a Parameter); write it under torch.no_grad(), as optimizer steps do"
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
    with pytest.raises(RuntimeError) as info:
        ext.scale_in_place(t, 2.0)
    assert str(info.value) == (
        "in-place write refused: an inference tensor outside inference mode, which torch "
        "refuses; write a clone (t.clone()) instead, or write it under "
        "torch.inference_mode()"
    )
    assert t.tolist() == [1.0] * 3
    with torch.inference_mode():
        ext.scale_in_place(t, 2.0)
    assert t.tolist() == [2.0] * 3


def test_a_non_leaf_that_requires_grad_is_refused_too(ext):
    # Torch records an in-place operation on a non-leaf; a write from Rust cannot be
    # recorded, so it is refused in grad mode, and written under no_grad.
    a = torch.ones(3, requires_grad=True)
    b = a * 1.0
    with pytest.raises(RuntimeError, match="requires grad"):
        ext.scale_in_place(b, 2.0)
    with torch.no_grad():
        ext.scale_in_place(b, 2.0)
    assert b.detach().tolist() == [2.0] * 3


def test_a_write_refused_for_its_layout_bumps_no_version(ext):
    t = torch.ones(1).expand(4)
    version = t._version
    with pytest.raises(ValueError, match="overlapping"):
        ext.scale_in_place(t, 2.0)
    assert t._version == version
    # The array is unchanged, and the same call still reads it.
    assert ext.sum_f32_2d(torch.ones(1).expand(2, 2)) == 4.0


def test_the_check_runs_no_python_code_of_subclasses_modes_or_profilers(ext):
    # Python code run between the import and the write could free the memory (a resize):
    # the check calls torch's C entry points with torch functions off.
    from torch.overrides import TorchFunctionMode

    calls = []

    class Spy(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            calls.append(getattr(func, "__name__", str(func)))
            return super().__torch_function__(func, types, args, kwargs or {})

        @property
        def requires_grad(self):  # never read by the check
            calls.append("requires_grad property")
            return False

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            calls.append("mode: " + getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    t = torch.ones(4).as_subclass(Spy)
    events = []

    def profile(frame, event, arg):
        events.append((event, getattr(arg, "__name__", None)))

    calls.clear()
    with torch.no_grad(), Mode():
        sys.setprofile(profile)
        try:
            ext.scale_in_place(t, 2.0)
        finally:
            sys.setprofile(None)
    assert calls == []
    # Only the call itself, and leaving it: no Python or C function called from inside.
    assert [e for e in events if e[1] not in ("scale_in_place", "setprofile")] == []
    assert torch.Tensor.tolist(t) == [2.0] * 4


def test_the_door_is_refused_off_the_attached_thread_instead_of_waiting(ext):
    a = np.ones(3, np.float32)
    with pytest.raises(RuntimeError) as info:
        ext.scale_on_another_thread(a, 2.0)
    assert "thread attached to the interpreter" in str(info.value)
    assert a.tolist() == [1.0] * 3
