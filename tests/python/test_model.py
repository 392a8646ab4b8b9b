"""A Rust model as a Python object (`#[pymodel]`): attributes that are the fields' own
memory, views that outlive what Rust does to the fields, setters, `state_dict` and
`load_state_dict` compared with PyTorch's own, and threads."""

import functools
import gc
import re
import threading

import jax
import numpy as np
import pytest
import torch

from helpers import np_ptr, run_child

pytestmark = pytest.mark.protocol

NAMES = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


def attr(obj, name):
    return functools.reduce(getattr, name.split("."), obj)


class Mlp(torch.nn.Module):
    """The same model in PyTorch (the class name is in PyTorch's error messages)."""

    def __init__(self, inputs=3, hidden=4, outputs=2):
        super().__init__()
        self.fc1 = torch.nn.Linear(inputs, hidden)
        self.fc2 = torch.nn.Linear(hidden, outputs)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def torch_state(m):
    return {k: torch.from_dlpack(v) for k, v in m.state_dict().items()}


def test_attributes_are_the_fields_memory(ext):
    m = ext.Mlp(3, 4, 2)
    pointers = m.pointers()
    assert sorted(pointers) == sorted(NAMES)
    for name in NAMES:
        t = attr(m, name)
        a = np.from_dlpack(t)
        assert np_ptr(a) == pointers[name]
        assert a.flags.writeable
        assert torch.from_dlpack(t).data_ptr() == pointers[name]
        assert jax.dlpack.from_dlpack(t).unsafe_buffer_pointer() == pointers[name]
    assert np.from_dlpack(m.fc1.weight).shape == (4, 3)
    assert np.from_dlpack(m.fc2.bias).shape == (2,)


def test_state_dict_shares_every_tensor_in_order(ext):
    m = ext.Mlp(3, 4, 2)
    sd = m.state_dict()
    assert list(sd) == NAMES  # PyTorch's order for the same module
    assert list(sd) == list(Mlp().state_dict())
    pointers = m.pointers()
    for name, t in sd.items():
        assert torch.from_dlpack(t).data_ptr() == pointers[name]
    assert list(m.state_dict(prefix="model.")) == ["model." + n for n in NAMES]
    assert list(m.fc1.state_dict()) == ["weight", "bias"]


def test_views_keep_their_memory_when_the_field_is_replaced(ext):
    m = ext.Mlp(3, 4, 2)
    w = np.from_dlpack(m.fc1.weight)
    t = torch.from_dlpack(m.fc1.weight)
    before = w.copy()
    m.replace_fc1_weight()
    gc.collect()
    np.testing.assert_array_equal(w, before)  # the old buffer, alive
    np.testing.assert_array_equal(t.numpy(), before)
    assert not np.from_dlpack(m.fc1.weight).any()  # the struct has the new one
    assert np_ptr(np.from_dlpack(m.fc1.weight)) != np_ptr(w)


def test_views_outlive_the_object(ext):
    m = ext.Mlp(3, 4, 2)
    w = np.from_dlpack(m.fc2.weight)
    t = torch.from_dlpack(m.fc2.bias)
    j = jax.dlpack.from_dlpack(m.fc1.weight)
    expected = (w.copy(), t.clone(), np.asarray(j).copy())
    view = m.fc1
    del m
    gc.collect()
    np.testing.assert_array_equal(w, expected[0])
    assert torch.equal(t, expected[1])
    np.testing.assert_array_equal(np.asarray(j), expected[2])
    # A group keeps the model object alive (it reads the model, not a field).
    np.testing.assert_array_equal(np.from_dlpack(view.weight), expected[2])
    w += 1  # still writable, still ours
    del view
    gc.collect()


def test_python_writes_reach_the_struct(ext):
    m = ext.Mlp(3, 4, 2)
    x = np.array([1.0, -2.0, 3.0], np.float32)
    total = m.total()
    with torch.no_grad():
        p = torch.from_dlpack(m.fc1.weight)
        p -= 0.25
    assert m.total() == pytest.approx(total - 0.25 * 12, rel=1e-6)
    tm = Mlp()
    tm.load_state_dict(torch_state(m))
    np.testing.assert_allclose(
        np.from_dlpack(m.forward(x)), tm(torch.from_numpy(x)).detach().numpy(), rtol=1e-6
    )


def test_rust_writes_copy_first_while_python_views_the_field(ext):
    m = ext.Mlp(3, 4, 2)
    pointers = m.pointers()
    m.step(0.5)  # no view alive: in place
    assert m.pointers() == pointers
    w = np.from_dlpack(m.fc1.weight)
    before = w.copy()
    m.step(0.5)  # a view of fc1.weight is alive: that field is copied first
    after = m.pointers()
    assert after["fc1.weight"] != pointers["fc1.weight"]
    assert after["fc2.weight"] == pointers["fc2.weight"]
    np.testing.assert_array_equal(w, before)  # the view keeps the old values
    np.testing.assert_allclose(np.from_dlpack(m.fc1.weight), before - 0.5)
    assert m.steps == 2


def test_an_optimizer_step_in_torch_is_what_rust_reads_next(ext):
    m = ext.Mlp(3, 4, 2)
    tm = Mlp()
    tm.load_state_dict(torch_state(m), assign=True)
    pointers = m.pointers()
    for name, p in tm.named_parameters():
        assert p.data_ptr() == pointers[name]  # the module's parameters are the fields
    opt = torch.optim.SGD(tm.parameters(), lr=0.1)
    x = torch.tensor([1.0, -2.0, 3.0])
    before = np.from_dlpack(m.forward(x)).copy()
    loss = tm(x).square().sum()
    loss.backward()
    opt.step()
    y = np.from_dlpack(m.forward(x))
    assert not np.allclose(y, before)
    np.testing.assert_allclose(y, tm(x).detach().numpy(), rtol=1e-6)
    # ... and back: a module's own tensors loaded into the Rust model.
    other = Mlp()
    m.load_state_dict(other.state_dict())
    np.testing.assert_allclose(np.from_dlpack(m.forward(x)), other(x).detach().numpy(), rtol=1e-6)


def test_pytorch_takes_the_models_state_dict_as_it_is(ext):
    m = ext.Mlp(3, 4, 2)
    m.step(0.125)  # values of its own, not the constructor's
    tm = Mlp()
    result = tm.load_state_dict(m.state_dict())  # strict, no comprehension
    assert result.missing_keys == [] and result.unexpected_keys == []
    pointers = m.pointers()
    for name, p in tm.named_parameters():
        np.testing.assert_array_equal(p.detach().numpy(), np.from_dlpack(attr(m, name)))
        assert p.data_ptr() != pointers[name]  # copied into the module's own
    assert torch.overrides.is_tensor_like(m.fc1.weight)
    np.testing.assert_array_equal(
        torch.add(m.fc1.weight, 1).numpy(), np.from_dlpack(m.fc1.weight) + 1
    )
    x = torch.tensor([1.0, -2.0, 3.0])
    np.testing.assert_allclose(np.from_dlpack(m.forward(x)), tm(x).detach().numpy(), rtol=1e-6)
    # A group's state_dict into the submodule of that name.
    fc1 = torch.nn.Linear(3, 4)
    fc1.load_state_dict(m.fc1.state_dict())
    assert torch.equal(fc1.weight, tm.fc1.weight)


def test_assign_true_shares_the_fields_under_torchs_swap_flag(ext):
    # PyTorch's `assign=True` wraps each value in `nn.Parameter`, which takes only
    # torch.Tensors; under `set_swap_module_params_on_conversion(True)` it asks the
    # value through `module_load`, which `__torch_function__` answers without a copy.
    m = ext.Mlp(3, 4, 2)
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        tm = Mlp()
        tm.load_state_dict(m.state_dict(), assign=True)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(before)
    pointers = m.pointers()
    for name, p in tm.named_parameters():
        assert isinstance(p, torch.nn.Parameter) and p.requires_grad
        assert p.data_ptr() == pointers[name]
    with pytest.raises(AttributeError):  # without the flag: PyTorch's own error
        Mlp().load_state_dict(m.state_dict(), assign=True)


def test_shares_says_whether_a_tensor_still_views_the_field(ext):
    m = ext.Mlp(3, 4, 2)
    tm = Mlp()
    tm.load_state_dict(torch_state(m), assign=True)
    assert all(m.shares(p, name) for name, p in tm.named_parameters())
    assert not m.shares(tm.fc1.weight, "fc2.weight")
    assert m.shares(m.fc1.weight, "fc1.weight")
    a = np.from_dlpack(m.fc1.bias)
    assert m.shares(a, "fc1.bias") and m.shares(a[2:], "fc1.bias")
    assert not m.shares(a.copy(), "fc1.bias") and not m.shares(np.zeros(4), "fc1.bias")
    assert m.shares(jax.dlpack.from_dlpack(m.fc2.bias), "fc2.bias")
    # A Rust write detaches the module (copy-on-write), and says so; the recipe
    # of the docs attaches it again.
    m.step(0.5)
    assert not any(m.shares(p, name) for name, p in tm.named_parameters())
    if not all(m.shares(p, n) for n, p in tm.named_parameters()):
        tm.load_state_dict({k: torch.from_dlpack(v) for k, v in m.state_dict().items()}, assign=True)
    assert all(m.shares(p, name) for name, p in tm.named_parameters())
    with pytest.raises(KeyError):
        m.shares(a, "fc1")  # a group, not a tensor


def test_a_rust_method_saves_the_model_from_self(ext, tmp_path):
    m = ext.Mlp(3, 4, 2)
    m.step(0.25)
    w = np.from_dlpack(m.fc1.weight)
    m.save(tmp_path)  # `TensorBatch::share(self)?.write_checkpoint(...)`
    assert m.shares(w, "fc1.weight")  # shares, not copies: no field was written
    loaded = ext.Mlp.load(tmp_path)
    for name in NAMES:
        np.testing.assert_array_equal(
            np.from_dlpack(attr(loaded, name)), np.from_dlpack(attr(m, name))
        )


def test_load_state_dict_in_place_when_no_view_is_alive(ext):
    m = ext.Mlp(3, 4, 2)
    pointers = m.pointers()
    other = Mlp()
    result = m.load_state_dict({k: v.detach() for k, v in other.state_dict().items()})
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert m.pointers() == pointers
    for name, value in other.state_dict().items():
        np.testing.assert_array_equal(np.from_dlpack(attr(m, name)), value.numpy())


def torch_error(module, sd, strict=True):
    with pytest.raises(RuntimeError) as e:
        module.load_state_dict(sd, strict=strict)
    return str(e.value)


def ours_error(m, sd, strict=True):
    with pytest.raises(RuntimeError) as e:
        m.load_state_dict(sd, strict=strict)
    return str(e.value)


@pytest.mark.parametrize(
    "case",
    ["missing", "unexpected", "both", "nested_unexpected"],
)
def test_load_state_dict_errors_are_pytorchs(ext, case):
    sd = {k: v.detach().clone() for k, v in Mlp().state_dict().items()}
    if case in ("missing", "both"):
        del sd["fc2.bias"]
        del sd["fc1.weight"]
    if case in ("unexpected", "both"):
        sd["fc3.weight"] = torch.zeros(2, 2)
    if case == "nested_unexpected":
        sd["fc1.scale"] = torch.zeros(4)
    m = ext.Mlp(3, 4, 2)
    assert ours_error(m, sd) == torch_error(Mlp(), sd)
    ours = m.load_state_dict(sd, strict=False)
    theirs = Mlp().load_state_dict(sd, strict=False)
    assert ours.missing_keys == theirs.missing_keys
    assert ours.unexpected_keys == theirs.unexpected_keys
    assert ours._fields == ("missing_keys", "unexpected_keys")


def test_load_state_dict_size_mismatch_is_pytorchs(ext):
    sd = {k: v.detach().clone() for k, v in Mlp().state_dict().items()}
    sd["fc1.weight"] = torch.zeros(4, 5)
    theirs = torch_error(Mlp(), sd, strict=False)
    theirs = re.sub(r"torch\.Size\((\[[0-9, ]*\])\)", r"\1", theirs)
    m = ext.Mlp(3, 4, 2)
    assert ours_error(m, sd, strict=False) == theirs
    assert ours_error(m, sd) == theirs
    # The tensors that fit were loaded, as PyTorch loads them.
    np.testing.assert_array_equal(np.from_dlpack(m.fc2.weight), sd["fc2.weight"].numpy())


def test_setters_take_any_producer(ext):
    m = ext.Mlp(3, 4, 2)
    m.fc1.weight = torch.ones(4, 3)
    np.testing.assert_array_equal(np.from_dlpack(m.fc1.weight), np.ones((4, 3), np.float32))
    m.fc2.bias = np.array([5.0, 6.0], np.float32)
    np.testing.assert_array_equal(np.from_dlpack(m.fc2.bias), [5.0, 6.0])
    m.fc2.bias = jax.numpy.array([7.0, 8.0], dtype=jax.numpy.float32)
    np.testing.assert_array_equal(np.from_dlpack(m.fc2.bias), [7.0, 8.0])
    assert m.steps == 0  # the skipped field is kept


def test_a_foreign_tensor_is_copied_and_a_fields_tensor_is_shared(ext):
    m = ext.Mlp(3, 4, 2)
    t = torch.ones(4, 3)
    m.fc1.weight = t
    assert m.pointers()["fc1.weight"] != t.data_ptr()  # one copy: torch keeps its own
    n = ext.Net(2, 4)
    n.layers[0].mlp.weight = n.layers[1].mlp.weight  # tied: one buffer
    a = np.from_dlpack(n.layers[0].mlp.weight)
    b = np.from_dlpack(n.layers[1].mlp.weight)
    assert np_ptr(a) == np_ptr(b)


def test_setter_errors(ext):
    m = ext.Mlp(3, 4, 2)
    with pytest.raises(TypeError, match="float32.*float64|float64.*float32"):
        m.fc1.weight = np.ones((4, 3))
    with pytest.raises(ValueError, match=r"fc1\.weight.*\(4, 3\).*\(3, 4\)"):
        m.fc1.weight = np.ones((3, 4), np.float32)
    with pytest.raises(TypeError, match="ndim mismatch: expected 2, found 1"):
        m.fc1.weight = np.ones(12, np.float32)
    with pytest.raises(BufferError, match="unsupported device cuda:0"):
        m.fc2.bias = ext.make_on_device(2, 0)
    with pytest.raises(TypeError, match="__dlpack__"):
        m.fc1.bias = [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(TypeError, match="group of tensors"):
        m.fc1 = m.fc2
    with pytest.raises(AttributeError, match=r"'(dlpack_test_ext\.)?Mlp' object has no attribute 'other'"):
        m.other = 1
    with pytest.raises(AttributeError, match="'Mlp' object has no attribute 'fc3'"):
        m.fc3
    with pytest.raises(TypeError, match="cannot delete"):
        del m.fc1
    with pytest.raises(TypeError, match="cannot delete"):
        del m.fc1.weight


def test_nesting_of_every_kind(ext):
    n = ext.Net(2, 4)
    names = list(n.state_dict())
    assert names[0] == "embed"
    assert "layers.1.attn.q.weight" in names and names[-1] == "scale"
    assert len(names) == 1 + 2 * 8 + 2 + 1
    assert len(n.layers) == 2
    assert np.from_dlpack(n.layers[1].attn["q"].weight).shape == (4, 4)
    assert np.from_dlpack(n.layers[-1].attn.k.bias).shape == (4,)
    assert np.from_dlpack(n.embed).shape == (10, 4)  # renamed
    assert np.from_dlpack(n.scale).shape == (4,)  # flattened
    assert np.from_dlpack(n.head.weight).shape == (2, 4)
    assert [type(x).__name__ for x in n.layers] == ["ModelView", "ModelView"]
    assert list(n.layers[1].state_dict())[0] == "attn.k.weight"
    with pytest.raises(IndexError):
        n.layers[2]
    with pytest.raises(AttributeError):
        ext.Net(2, 4, head=False).head
    assert repr(n) == "Net(2 layers)"  # the class's own __repr__ is kept
    assert "layers" in dir(n) and "state_dict" in dir(n)


def test_repr_lists_every_tensor(ext):
    m = ext.Mlp(3, 4, 2)
    assert repr(m) == (
        "Mlp(\n"
        "  fc1.weight: float32[4, 3],\n"
        "  fc1.bias: float32[4],\n"
        "  fc2.weight: float32[2, 4],\n"
        "  fc2.bias: float32[2],\n"
        ")"
    )
    assert repr(m.fc1) == "fc1(\n  weight: float32[4, 3],\n  bias: float32[4],\n)"


def test_load_from_a_checkpoint(ext, tmp_path):
    import safetensors.torch

    tm = Mlp()
    safetensors.torch.save_file({k: v.contiguous() for k, v in tm.state_dict().items()},
                                str(tmp_path / "model.safetensors"))
    m = ext.Mlp.load(str(tmp_path))
    x = torch.tensor([0.5, 1.0, -1.0])
    np.testing.assert_allclose(np.from_dlpack(m.forward(x)), tm(x).detach().numpy(), rtol=1e-6)


def test_jax_imports_a_loaded_model_without_a_copy(ext, tmp_path):
    """Every buffer the crate allocates starts on a 64-byte boundary, which XLA's CPU
    client needs to import without a copy: a model loaded from a checkpoint, and the
    copy a Rust write makes while Python holds a view (copy-on-write)."""
    import safetensors.torch

    tm = Mlp(5, 7, 3)  # odd sizes: no tensor is aligned by luck of the ones before it
    safetensors.torch.save_file({k: v.contiguous() for k, v in tm.state_dict().items()},
                                str(tmp_path / "model.safetensors"))
    m = ext.Mlp.load(str(tmp_path))
    held = [attr(m, name) for name in NAMES]
    for name in NAMES:
        t = attr(m, name)
        pointer = np_ptr(np.from_dlpack(t))
        assert pointer % 64 == 0, name
        assert jax.dlpack.from_dlpack(t).unsafe_buffer_pointer() == pointer, name
    m.step(1.0)  # Python holds every buffer: each field is copied first
    for name, old in zip(NAMES, held):
        t = attr(m, name)
        pointer = np_ptr(np.from_dlpack(t))
        assert pointer != np_ptr(np.from_dlpack(old)), name
        assert jax.dlpack.from_dlpack(t).unsafe_buffer_pointer() == pointer, name


def test_eight_threads_reading_and_writing(ext):
    """Five threads read attributes, state_dicts and the Rust sum; two call a Rust
    method that writes every field (one with the interpreter released); one sets a
    field from NumPy. A Rust `&mut` while another method runs is PyO3's typed
    "already borrowed" error; nothing else may fail. (No thread writes a view while a
    Rust method reads: the sharing rule leaves that to the caller.)"""
    m = ext.Mlp(3, 4, 2)
    expected = m.total()
    errors, borrowed = [], []

    def loop(body):
        for _ in range(200):
            try:
                body()
            except RuntimeError as e:
                (borrowed if "borrow" in str(e) else errors).append(e)
            except Exception as e:  # pragma: no cover
                errors.append(e)

    def read():
        w = np.from_dlpack(m.fc1.weight)
        float(w.sum())
        assert len(m.state_dict()) == 4
        m.total()

    def write():
        m.step(0.0)
        m.step_detached(0.0)

    def set_from_numpy():
        m.fc2.bias = np.from_dlpack(m.fc2.bias).copy()

    bodies = [read] * 5 + [write] * 2 + [set_from_numpy]
    threads = [threading.Thread(target=loop, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert m.steps > 0
    assert m.total() == pytest.approx(expected, rel=1e-6)  # writes of 0 and x 1.0


# Run in a new interpreter, so that the threads race for what a process does once (the
# class attributes installed at the first read, torch's rule found at the first typed
# argument), with the interpreter switching threads every microsecond.
STRESS = """
import sys, threading, time
sys.setswitchinterval(1e-6)
import numpy as np
import torch
import dlpack_test_ext as ext

NAMES = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
m = ext.Mlp(3, 4, 2)
# (Read through state_dict, which installs nothing on the class.)
expected = {k: np.from_dlpack(v).copy() for k, v in m.state_dict().items()}
total = sum(float(v.astype(np.float64).sum()) for v in expected.values())
x = np.array([0.5, 1.0, -1.0], np.float32)
y = np.maximum(expected["fc1.weight"] @ x + expected["fc1.bias"], 0)
y = expected["fc2.weight"] @ y + expected["fc2.bias"]
start = threading.Barrier(11)
errors, borrowed, counts = [], [], {}

def same(name, value):
    if not np.array_equal(np.asarray(value), expected[name]):
        raise AssertionError(f"{name}: {value} is not {expected[name]}")

def loop(name, body):
    # Until 100 calls went through: a call refused as "already borrowed" (a `&mut self`
    # method held the object, perhaps waiting for the interpreter) is tried again.
    start.wait()
    done, deadline = 0, time.monotonic() + 120
    while done < 100 and time.monotonic() < deadline:
        try:
            body()
            done += 1
        except RuntimeError as e:
            (borrowed if "borrow" in str(e) else errors).append(repr(e))
        except Exception as e:
            errors.append(f"{name}: {e!r}")
    counts[name] = done

def attributes():
    same("fc1.weight", np.from_dlpack(m.fc1.weight))
    same("fc2.bias", torch.from_dlpack(m.fc2.bias))
    fc1 = m.fc1
    same("fc1.bias", np.from_dlpack(fc1.bias))

def state_dicts():
    sd = m.state_dict()
    assert list(sd) == NAMES
    for k, v in sd.items():
        same(k, np.from_dlpack(v))

def typed_arguments():
    np.testing.assert_allclose(np.from_dlpack(m.forward(x)), y, rtol=1e-6)
    w = m.fc1.weight
    assert abs(ext.sum_f32_2d(w) - expected["fc1.weight"].sum()) < 1e-4
    assert abs(ext.sum_f32_2d(torch.from_dlpack(w)) - expected["fc1.weight"].sum()) < 1e-4

def rust_reads():
    assert abs(m.total() - total) < 1e-4

def rust_writes():
    m.step(0.0)
    m.step_detached(0.0)

def setters():
    m.fc2.bias = expected["fc2.bias"].copy()
    m.fc1.weight = torch.tensor(expected["fc1.weight"])

def loads():
    result = m.load_state_dict({k: v.copy() for k, v in expected.items()})
    assert list(result.missing_keys) == [] and list(result.unexpected_keys) == []

bodies = {"attributes": attributes, "state_dicts": state_dicts,
          "typed_arguments": typed_arguments, "rust_reads": rust_reads}
threads = [threading.Thread(target=loop, args=(f"{n}{i}", b))
           for n, b in bodies.items() for i in range(2)]
threads += [threading.Thread(target=loop, args=(n, b)) for n, b in
            [("rust_writes", rust_writes), ("setters", setters), ("loads", loads)]]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("errors", errors[:5], len(errors))
print("borrowed", len(borrowed), sorted(set(borrowed))[:3])
print("counts", sorted(counts.items()))
assert errors == [], errors[:5]
# Every kind of call went through 100 times; only the borrow errors PyO3 documents.
assert all(n == 100 for n in counts.values()), counts
assert all("Already" in b and "borrowed" in b for b in borrowed), set(borrowed)
assert m.steps > 0
for k, v in m.state_dict().items():
    same(k, np.from_dlpack(v))
print("ok")
"""


def test_threads_switching_every_microsecond_see_only_right_values_and_borrow_errors():
    """Eight threads read attributes, state_dicts, typed arguments and a Rust sum while
    three call `&mut self` methods (one with the interpreter released), setters and
    `load_state_dict`, every write leaving the values as they were: no crash, no wrong
    value, and no error but PyO3's "already borrowed" (a `&mut self` method beside any
    other call of the object, as the sharing rule says)."""
    child = run_child(STRESS, timeout=300)
    assert child.returncode == 0, child.stdout + child.stderr
    assert child.stdout.strip().endswith("ok"), child.stdout


def test_the_pattern_that_avoids_the_data_race_one_lock_for_writes_and_calls(ext):
    """The docs' pattern: Python's in-place writes of the model's tensors and the
    model's calls hold one lock, so a Rust method never reads while NumPy writes (the
    same writes without the lock would be a data race, which no test runs). Every Rust
    read then equals the state Python sees under the same lock."""
    m = ext.Mlp(3, 4, 2)
    lock = threading.Lock()
    w = np.from_dlpack(m.fc1.weight)
    before = w.copy()
    mismatches = []

    def writer():
        for _ in range(300):
            with lock:
                np.add(w, 1.0, out=w)

    def reader():
        for _ in range(300):
            with lock:
                rust = m.total()
                python = sum(float(np.from_dlpack(t).astype(np.float64).sum())
                             for t in m.state_dict().values())
            if abs(rust - python) > 1e-3 * max(1.0, abs(python)):
                mismatches.append((rust, python))

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader)
                                                   for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert mismatches == []
    # The writes reached the field Rust reads.
    np.testing.assert_allclose(np.from_dlpack(m.fc1.weight), before + 300.0, atol=1e-3)


def test_only_struct_fields_become_class_attributes(ext):
    n = ext.Net(2, 4)
    assert np.from_dlpack(n.layers[0].attn.q.weight).shape == (4, 4)
    n.embed
    assert type(ext.Net.__dict__["embed"]).__name__ == "TensorAttribute"
    assert type(ext.Net.__dict__["layers"]).__name__ == "TensorAttribute"
    assert "scale" not in ext.Net.__dict__  # flattened: read through __getattr__
    assert "q" not in type(n.layers[0]).__dict__  # a map's keys are data: never installed
    assert bool(n.layers[0]) is True and len(n.layers) == 2
    assert np.from_dlpack(n.scale).shape == (4,)


def test_load_state_dict_is_pytorchs_for_keys_it_does_not_have(ext):
    m = ext.Mlp(3, 4, 2)
    sd = {k: v.detach().clone() for k, v in Mlp().state_dict().items()}
    sd["zzz"] = 3  # not a tensor: PyTorch lists it as unexpected, and so do we
    ours = m.load_state_dict(sd, strict=False)
    theirs = Mlp().load_state_dict(sd, strict=False)
    assert ours.unexpected_keys == theirs.unexpected_keys == ["zzz"]
    n = ext.Net(1, 4, head=False)
    r = n.load_state_dict({"head.weight": torch.zeros(2, 4)}, strict=False)
    assert "head.weight" in r.unexpected_keys  # the `None` head stays `None`
    with pytest.raises(AttributeError):
        n.head


def test_a_field_is_one_object_until_rust_writes_it(ext):
    """As `nn.Module` returns the same `Parameter`: the same `Tensor` object at every read
    (attributes, a group's members, `state_dict`), a new one after a Rust write, which
    copies first only where Python still holds the old one."""
    m = ext.Mlp(3, 4, 2)
    w = m.fc1.weight
    assert m.fc1.weight is w and m.fc1["weight"] is w and m.state_dict()["fc1.weight"] is w
    assert m.fc1.state_dict()["weight"] is w
    d = ext.Dense(3, 4)
    assert d.weight is d.weight and d.state_dict()["bias"] is d.bias
    before = np.from_dlpack(w).copy()
    pointers = m.pointers()
    m.step(0.5)  # `w` is held: fc1.weight is copied first; the others are written in place
    after = m.pointers()
    assert after["fc1.weight"] != pointers["fc1.weight"]
    assert {k: v for k, v in after.items() if k != "fc1.weight"} == {
        k: v for k, v in pointers.items() if k != "fc1.weight"}
    new = m.fc1.weight
    assert new is not w and m.fc1.weight is new
    np.testing.assert_array_equal(np.from_dlpack(w), before)  # the old buffer, unchanged
    np.testing.assert_allclose(np.from_dlpack(new), before - 0.5)
    assert np_ptr(np.from_dlpack(new)) == after["fc1.weight"]


def test_an_unheld_object_costs_no_copy(ext):
    m = ext.Mlp(3, 4, 2)
    for name in NAMES:
        attr(m, name)  # each field now keeps its object, which nothing else holds
    m.state_dict()
    pointers = m.pointers()
    m.step(0.5)
    assert m.pointers() == pointers  # written in place: no copy for the kept objects
    np.testing.assert_allclose(np.from_dlpack(m.fc2.bias), np.arange(2) * 0.01 - 0.5,
                               rtol=1e-6)
    t = torch.from_dlpack(m.fc2.bias)  # an array made from the object holds it
    m.step(0.5)
    assert m.pointers()["fc2.bias"] != pointers["fc2.bias"]
    assert m.pointers()["fc1.weight"] == pointers["fc1.weight"]
    np.testing.assert_allclose(t.numpy(), np.arange(2) * 0.01 - 0.5, rtol=1e-6)


def test_a_replaced_field_reads_as_a_new_object(ext):
    m = ext.Mlp(3, 4, 2)
    w = m.fc1.weight
    before = np.from_dlpack(w).copy()
    m.replace_fc1_weight()  # Rust assigns a new `Parameter`
    assert m.fc1.weight is not w and not np.from_dlpack(m.fc1.weight).any()
    np.testing.assert_array_equal(np.from_dlpack(w), before)
    b = m.fc2.bias
    m.fc2.bias = np.full(2, 7.0, np.float32)  # a setter
    assert m.fc2.bias is not b and (np.from_dlpack(m.fc2.bias) == 7.0).all()
    np.testing.assert_allclose(np.from_dlpack(b), np.arange(2) * 0.01, rtol=1e-6)
    square = ext.Mlp(4, 4, 4)
    v = square.fc2.weight
    square.fc2.weight = square.fc1.weight  # tied: the same buffer, another object
    assert square.fc2.weight is not v and square.fc2.weight is square.fc2.weight
    assert np_ptr(np.from_dlpack(square.fc2.weight)) == np_ptr(
        np.from_dlpack(square.fc1.weight))
    x = m.fc1.bias
    m.load_state_dict({k: torch.ones_like(torch.from_dlpack(v)) for k, v in
                       m.state_dict().items()})
    assert m.fc1.bias is not x and (np.from_dlpack(m.fc1.bias) == 1.0).all()
    np.testing.assert_allclose(np.from_dlpack(x), np.arange(4) * 0.01, rtol=1e-6)


def test_writes_through_the_object_reach_the_struct(ext):
    m = ext.Mlp(3, 4, 2)
    tm = Mlp()
    tm.load_state_dict(torch_state(m), assign=True)
    with torch.no_grad():
        tm.fc1.weight.add_(1.0)
    total = m.total()
    np.testing.assert_allclose(torch.from_dlpack(m.fc1.weight).numpy(),
                               tm.fc1.weight.detach().numpy())
    assert m.fc1.weight is m.state_dict()["fc1.weight"]
    assert total == pytest.approx(m.total())


def test_a_dropped_model_lets_its_objects_go(ext):
    import sys

    m = ext.Mlp(3, 4, 2)
    w, sd = m.fc1.weight, m.state_dict()
    held = sys.getrefcount(w)  # w, the model's own reference, sd, the call's argument
    del m
    gc.collect()
    assert sys.getrefcount(w) == held - 1
    del sd
    assert sys.getrefcount(w) == held - 2
    # Many models whose every field was read: every export is released with them.
    live = ext.live_exports()
    for _ in range(200):
        m = ext.Net(2, 4)
        m.state_dict()
        m.layers[1].attn.q.weight
        del m
    gc.collect()
    assert ext.live_exports() == live


def test_members_named_by_data(ext):
    """A map's keys are looked up before the view's class, except the names the class
    has (`state_dict`, names with a leading `_`), which are reached by index; none is
    ever set on the class that every view shares."""
    h = ext.Heads(["w", "state_dict", "__bool__", "_x", "__class__"])
    heads = h.heads
    assert np.from_dlpack(heads.w).tolist() == [0.0, 0.0]
    assert heads.w is heads["w"] and h.heads.w is heads.w
    assert callable(heads.state_dict)  # the method
    assert np.from_dlpack(heads["state_dict"]).tolist() == [1.0, 1.0]
    assert np.from_dlpack(heads.__bool__).tolist() == [2.0, 2.0]  # the class has none
    assert bool(heads) is True and len(heads) == 5
    assert np.from_dlpack(heads._x).tolist() == [3.0, 3.0]
    assert heads.__class__ is type(heads) and isinstance(heads, ext.ModelView)
    assert np.from_dlpack(heads["__class__"]).tolist() == [4.0, 4.0]
    assert not {"w", "_x", "__bool__"} & set(vars(type(heads)))
    with pytest.raises(AttributeError, match="'heads' has no tensor or group named 'nope'"):
        heads.nope
    with pytest.raises(AttributeError):
        heads._nope
    assert "w" in dir(heads) and "state_dict" in dir(heads)


def test_a_bool_field_is_copied_at_every_read(ext):
    h = ext.Heads(["w"])
    mask = h.mask
    assert h.mask is not mask  # a copy each time: a kept copy would keep Python's writes
    np.from_dlpack(mask)[0] = False  # a write to a copy never reaches the field
    assert np.from_dlpack(h.mask).tolist() == [True, True]
    h.flip_mask()
    assert np.from_dlpack(h.mask).tolist() == [False, False]


def test_threads_read_one_object(ext):
    m = ext.Mlp(3, 4, 2)
    seen, barrier = [], threading.Barrier(8)

    def read():
        barrier.wait()
        seen.extend(id(m.fc1.weight) for _ in range(100))

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == 1 and seen[0] == id(m.fc1.weight)
