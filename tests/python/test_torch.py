"""Rust <-> PyTorch (CPU): every dtype, ranks 0-4, layouts, empty tensors, and a Rust
model loaded into a ``torch.nn.Module`` / a ``state_dict`` loaded into Rust.

PyTorch has no negative strides: it refuses Rust exports that have them (tested), and
takes them through ``copy=True``, which makes the Rust side copy into C order.
"""

import numpy as np
import pytest
import torch

from helpers import (
    ALL_DTYPES,
    NONEMPTY_SHAPES,
    SHAPES,
    capsule_name,
    expected,
    run_child,
    shape_id,
)

TORCH_DTYPES = {
    "bool": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}
assert set(TORCH_DTYPES) == set(ALL_DTYPES)

dtypes = pytest.mark.parametrize("dtype", ALL_DTYPES)
shapes = pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
nonempty_shapes = pytest.mark.parametrize("shape", NONEMPTY_SHAPES, ids=shape_id)
# Layouts PyTorch can view without a copy.
torch_layouts = pytest.mark.parametrize("layout", ["c", "f", "sliced", "stepped"])


def expected_torch(dtype, shape):
    return torch.from_numpy(expected(dtype, shape)).to(TORCH_DTYPES[dtype])


def f_strides(shape):
    strides, step = [], 1
    for n in shape:
        strides.append(step)
        step *= n
    return tuple(strides)


def torch_layout(values, layout):
    """A tensor equal to ``values`` with the given memory layout."""
    shape = values.shape
    if layout == "c":
        return values.contiguous()
    if layout == "f":
        reverse = tuple(reversed(range(values.ndim)))
        return values.permute(reverse).contiguous().permute(reverse)
    if layout == "sliced":
        big = torch.zeros(tuple(n + 2 for n in shape), dtype=values.dtype)
        view = big[tuple(slice(1, n + 1) for n in shape) + (Ellipsis,)]
    elif layout == "stepped":
        big = torch.zeros(tuple(2 * n for n in shape), dtype=values.dtype)
        view = big[tuple(slice(None, None, 2) for n in shape) + (Ellipsis,)]
    else:
        raise ValueError(layout)
    view.copy_(values)
    return view


@dtypes
@shapes
@torch_layouts
def test_rust_to_torch(ext, dtype, shape, layout):
    t, ptr = ext.make(dtype, list(shape), layout, counted=True)
    x = torch.from_dlpack(t)
    assert x.dtype == TORCH_DTYPES[dtype]
    assert tuple(x.shape) == shape
    assert torch.equal(x, expected_torch(dtype, shape))
    if x.numel():
        assert x.data_ptr() == ptr  # zero-copy
    if x.numel() > 1 and layout == "f":
        assert x.stride() == f_strides(shape)
    if x.numel() > 1 and layout == "stepped":
        assert not x.is_contiguous()


@dtypes
@nonempty_shapes
def test_torch_writes_are_seen_by_rust(ext, dtype, shape):
    t, _ = ext.make(dtype, list(shape), "sliced", counted=True)
    torch.from_dlpack(t).fill_(1)
    assert ext.inspect(t)["values"] == np.ones(shape, expected(dtype, ()).dtype).ravel().tolist()


@dtypes
@shapes
@torch_layouts
def test_torch_to_rust(ext, dtype, shape, layout):
    x = torch_layout(expected_torch(dtype, shape), layout)
    info = ext.inspect(x)
    assert info["dtype"] == dtype
    assert info["shape"] == list(shape)
    assert info["values"] == x.flatten().tolist()
    assert info["version"][0] == 1 and info["legacy"] is False
    if x.numel():
        assert info["ptr"] == x.data_ptr()  # zero-copy import
        assert info["strides"] == list(x.stride())


@dtypes
@shapes
@torch_layouts
def test_torch_rust_torch_round_trip(ext, dtype, shape, layout):
    x = torch_layout(expected_torch(dtype, shape), layout)
    y = torch.from_dlpack(ext.roundtrip(x))
    assert torch.equal(y, x)
    if x.numel():
        assert y.data_ptr() == x.data_ptr()
        assert y.stride() == x.stride()


@dtypes
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)], ids=shape_id)
def test_negative_strides_are_refused_by_torch_and_copied_on_request(ext, dtype, shape):
    t, ptr = ext.make(dtype, list(shape), "negative", counted=True)
    # PyTorch cannot represent negative strides (it raises; older releases aborted).
    with pytest.raises(RuntimeError):
        torch.from_dlpack(t)
    x = torch.from_dlpack(t, copy=True)  # the Rust side copies into C order
    assert torch.equal(x, expected_torch(dtype, shape))
    assert x.is_contiguous() and x.data_ptr() != ptr


def test_torch_asks_for_versioned_capsules(ext):
    seen = []

    class Spy:
        def __init__(self, inner):
            self.inner = inner

        def __dlpack__(self, **kwargs):
            capsule = self.inner.__dlpack__(**kwargs)
            seen.append((kwargs.get("max_version"), capsule_name(capsule)))
            return capsule

        def __dlpack_device__(self):
            return self.inner.__dlpack_device__()

    t, ptr = ext.make("float32", [2, 3], counted=True)
    x = torch.from_dlpack(Spy(t))
    assert x.data_ptr() == ptr
    assert seen[0][0][0] >= 1 and seen[0][1] == "dltensor_versioned"


def test_torch_ignores_the_read_only_flag(ext):
    # Why read-only memory of Rust's never reaches a consumer without a copy: PyTorch
    # imports a READ_ONLY tensor as a writable one, and its in-place operations write
    # the producer's memory. (Here a tensor that no Rust code reads any more, handed
    # over without the guard: `Tensor::new_unchecked`.) NumPy's own read-only arrays
    # fare the same.
    t = ext.make_read_only([4], counted=True)
    assert t.read_only and not t.copies_read_only
    x = torch.from_dlpack(t)
    assert x.data_ptr() == t.data_ptr()
    x.add_(1)
    assert np.from_dlpack(t).tolist() == (expected("float32", (4,)) + 1).tolist()
    a = np.arange(3.0)
    a.flags.writeable = False
    torch.from_dlpack(a).add_(1)
    assert a.tolist() == [1.0, 2.0, 3.0]


def test_a_shared_arc_array_reaches_torch_as_a_copy_rust_never_sees_written(ext):
    kept = ext.KeptArc(4)
    t = kept.export()
    # Flagged read-only (Rust keeps another handle), and guarded.
    assert t.read_only and t.copies_read_only
    assert t.data_ptr() == kept.data_ptr()
    x = torch.from_dlpack(t)
    assert x.data_ptr() != kept.data_ptr()
    x.add_(10)
    assert x.tolist() == [10.0, 11.0, 12.0, 13.0]
    # What Rust reads through its own handle never changed.
    assert kept.values() == [0.0, 1.0, 2.0, 3.0]
    # Through the C exchange API (which torch may use) and every capsule alike.
    capsule = t.__dlpack__(max_version=(1, 0))
    y = torch.from_dlpack(capsule)
    y.mul_(0)
    assert kept.values() == [0.0, 1.0, 2.0, 3.0]
    # NumPy gets its copy too (writable: nothing else sees it), and copy=False, which
    # cannot be honoured, is refused as NumPy refuses what it cannot share.
    a = np.from_dlpack(t)
    assert a.flags.writeable and a.tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(BufferError, match="read-only memory that Rust code also reads"):
        t.__dlpack__(max_version=(1, 0), copy=False)
    with pytest.raises(BufferError):
        torch.from_dlpack(t, copy=False)
    # Taken back into Rust (through the exchange API or `__dlpack__`, as any import),
    # it is a copy too.
    back = ext.roundtrip(t)
    assert back.data_ptr() != kept.data_ptr() and not back.read_only
    torch.from_dlpack(back).add_(1)
    assert kept.values() == [0.0, 1.0, 2.0, 3.0]


def test_a_producers_read_only_memory_is_handed_on_as_it_came(ext):
    # A read-only NumPy array (read in place) or torch's export of one: the memory is
    # the producer's, whose own rules apply (PyTorch writes NumPy's read-only arrays
    # itself, above); no copy is forced.
    a = np.arange(4.0)
    a.flags.writeable = False
    for t in [ext.roundtrip(a), ext.roundtrip(a.__dlpack__(max_version=(1, 0)))]:
        assert t.read_only and not t.copies_read_only
        assert np.from_dlpack(t).ctypes.data == a.ctypes.data


def test_an_owned_array_reaches_torch_without_a_copy(ext):
    # What the guard's message advises: a moved array is shared, writable.
    t, ptr = ext.make("float32", [4], counted=True)
    assert not t.read_only and not t.copies_read_only
    x = torch.from_dlpack(t)
    assert x.data_ptr() == ptr


# ---------------------------------------------------------------------------------------
# Models.
# ---------------------------------------------------------------------------------------


class Mlp(torch.nn.Module):
    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8, dtype=dtype)
        self.fc2 = torch.nn.Linear(8, 2, dtype=dtype)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


NAMES = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


def rust_linear(inputs, outputs, seed):
    o = torch.arange(outputs, dtype=torch.float32)
    i = torch.arange(inputs, dtype=torch.float32)
    return seed + o[:, None] * 0.25 - i[None, :] * 0.125, seed - o * 0.5


def test_rust_model_loads_into_torch_module(ext):
    state, pointers = ext.model_state()
    pointers = dict(pointers)
    assert isinstance(state, dict) and list(state) == NAMES
    # Zero-copy: every value of the dict views the Rust model's own buffer.
    tensors = {name: torch.from_dlpack(value) for name, value in state.items()}
    for name, x in tensors.items():
        assert x.data_ptr() == pointers[name]
    w1, b1 = rust_linear(4, 8, 1.0)
    w2, b2 = rust_linear(8, 2, -1.0)
    for name, value in zip(NAMES, [w1, b1, w2, b2]):
        assert torch.equal(tensors[name], value)

    # load_state_dict copies into the module's parameters: equal values.
    model = Mlp()
    model.load_state_dict(tensors)
    for name, p in model.state_dict().items():
        assert torch.equal(p, tensors[name])
        assert p.data_ptr() != pointers[name]

    # assign=True keeps the tensors themselves: the module runs on Rust memory.
    shared = Mlp()
    shared.load_state_dict(tensors, assign=True)
    for name, p in shared.state_dict().items():
        assert p.data_ptr() == pointers[name]
    x = torch.ones(3, 4)
    assert torch.equal(shared(x), model(x))


def test_torch_state_dict_loads_into_rust(ext):
    torch.manual_seed(0)
    model = Mlp()
    sd = model.state_dict()
    loaded = ext.load_model(sd)
    assert [name for name, _, _ in loaded] == NAMES
    for name, shape, total in loaded:
        assert tuple(shape) == tuple(sd[name].shape)
        assert total == pytest.approx(sd[name].sum().item(), rel=1e-6, abs=1e-6)
    # Zero-copy batch import: names, dtypes, shapes and pointers as PyTorch has them.
    batch = ext.load_batch(sd)
    assert [(n, d, tuple(s), p) for n, d, s, p in batch] == [
        (n, "float32", tuple(x.shape), x.data_ptr()) for n, x in sd.items()
    ]


def test_state_dict_round_trip_shares_memory(ext):
    model = Mlp()
    sd = model.state_dict()
    back = ext.roundtrip_batch(sd)
    assert list(back) == list(sd)
    for name, value in back.items():
        x = torch.from_dlpack(value)
        assert x.data_ptr() == sd[name].data_ptr()
        assert torch.equal(x, sd[name])
    # The round trip loads straight back into a fresh module.
    other = Mlp()
    other.load_state_dict({name: torch.from_dlpack(v) for name, v in back.items()})
    x = torch.randn(2, 4)
    assert torch.equal(other(x), model(x))


def test_rust_model_import_is_strict(ext):
    sd = dict(Mlp().state_dict())
    with pytest.raises(ValueError, match="unexpected"):
        ext.load_model({**sd, "extra": torch.zeros(1)})
    del sd["fc2.bias"]
    with pytest.raises(KeyError, match="fc2.bias"):
        ext.load_model(sd)
    with pytest.raises(TypeError, match="dtype"):
        ext.load_model(Mlp(dtype=torch.float64).state_dict())
    with pytest.raises(TypeError):
        ext.load_model([("fc1.weight", torch.zeros(8, 4))])  # not a mapping


def fresh_net():
    net = torch.nn.Sequential()
    net.fc1 = torch.nn.Linear(4, 8)
    net.fc2 = torch.nn.Linear(8, 2)
    return net


def test_a_batch_is_a_state_dict_pytorch_takes(ext):
    # As documented: a `Tensor` is tensor-like for PyTorch, so `load_state_dict` takes a
    # dict of them as it is (each copied in by `param.copy_`, through
    # `__torch_function__`); `assign=True` needs PyTorch's own tensors, one
    # `torch.from_dlpack` away, and then runs the module on that memory.
    state, pointers = ext.model_state()
    pointers = dict(pointers)
    copied = fresh_net()
    result = copied.load_state_dict(state, strict=True)
    assert result.missing_keys == [] and result.unexpected_keys == []
    for name, parameter in copied.named_parameters():
        assert parameter.data_ptr() != pointers[name]  # copied into the module's own
        assert torch.equal(parameter.detach(), torch.from_dlpack(state[name])), name
    # `assign=True` with the tensors as they are: torch.nn.Parameter takes only
    # torch.Tensors, so PyTorch fails on them (its own AttributeError).
    with pytest.raises(AttributeError, match="has no attribute"):
        fresh_net().load_state_dict(state, assign=True)
    net = fresh_net()
    net.load_state_dict({k: torch.from_dlpack(v) for k, v in state.items()}, assign=True)
    for name, parameter in net.named_parameters():
        assert parameter.data_ptr() == pointers[name], name
    assert torch.equal(copied.fc1.weight, net.fc1.weight)


def test_assign_true_takes_the_tensors_under_torchs_swap_flag(ext):
    # PyTorch's `set_swap_module_params_on_conversion(True)` loads through
    # `Tensor.module_load`, which `__torch_function__` answers: `assign=True` then takes
    # the tensors as they are, the module's parameters the Rust memory.
    state, pointers = ext.model_state()
    pointers = dict(pointers)
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        net = fresh_net()
        net.load_state_dict(state, assign=True)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(before)
    for name, parameter in net.named_parameters():
        assert type(parameter) is torch.nn.Parameter and parameter.requires_grad
        assert parameter.data_ptr() == pointers[name], name


def test_a_tensor_is_tensor_like_for_pytorch(ext):
    t, ptr = ext.make("float32", [2, 3])
    values = torch.from_dlpack(t).clone()
    assert torch.overrides.is_tensor_like(t)
    assert torch.equal(torch.add(t, 1), values + 1)
    # Nested in lists and tuples, and as keywords.
    assert torch.equal(torch.cat([t, t]), torch.cat([values, values]))
    assert torch.equal(torch.stack((t, t)), torch.stack((values, values)))
    assert torch.equal(torch.add(values, other=t, alpha=2), values * 3)
    assert torch.equal(torch.zeros(2, 3).copy_(t), values)
    # Without a copy: a PyTorch function writes the tensor's own memory (`out=`).
    torch.add(values, 1, out=t)
    assert torch.from_dlpack(t).data_ptr() == ptr
    assert torch.equal(torch.from_dlpack(t), values + 1)
    assert torch.as_tensor(t).data_ptr() == ptr


def test_read_only_memory_of_rusts_reaches_torch_functions_as_a_copy(ext):
    # As for torch.from_dlpack: the guard of `copies_read_only` holds through
    # `__torch_function__`, so a function that writes it writes a copy.
    kept = ext.KeptArc(4)
    t = kept.export()
    torch.add(torch.ones(4), 10, out=t)
    assert kept.values() == [0.0, 1.0, 2.0, 3.0]
    assert torch.add(t, 1).tolist() == [1.0, 2.0, 3.0, 4.0]


def test_another_tensor_like_type_gets_the_call(ext):
    t, _ = ext.make("float32", [3])

    class Other:
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return "other"

    assert torch.add(t, Other()) == "other"
    assert torch.add(Other(), t) == "other"


def test_torch_is_imported_only_by_torch():
    child = run_child(
        """
        import sys
        import numpy as np
        import dlpack_test_ext as ext
        t, _ = ext.make("float32", [3])
        np.from_dlpack(t)
        assert "torch" not in sys.modules, "imported"
        import torch
        assert torch.add(t, 1).tolist() == (np.from_dlpack(t) + 1).tolist()
        print("ok")
        """
    )
    assert child.returncode == 0 and child.stdout.strip() == "ok", child.stderr


def test_torch_save_of_a_state_dict_is_refused_with_the_copy_to_make(ext, tmp_path):
    import pickle

    state, _ = ext.model_state()
    with pytest.raises(TypeError, match=r"torch\.from_dlpack\(t\)\.clone\(\)"):
        torch.save(state, tmp_path / "model.pt")
    with pytest.raises(TypeError, match="cannot pickle"):
        pickle.dumps(state)
    # The copy the message names saves and loads back.
    torch.save({k: torch.from_dlpack(v).clone() for k, v in state.items()},
               tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt")
    assert all(torch.equal(loaded[k], torch.from_dlpack(v)) for k, v in state.items())
