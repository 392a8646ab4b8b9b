"""Writing into a caller's array, in place: the recipe of the `python` module's docs
(`DLPackArray::assume_exclusive`), with NumPy and PyTorch; and what the docs say of JAX
arrays and of tensors that autograd tracks (read like any import; the safe path never
writes them)."""

import textwrap

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import np_ptr, run_child

# Run again against the stable-ABI build (tests/README.md).
pytestmark = pytest.mark.protocol


def test_the_recipe_writes_numpy_memory(ext):
    a = np.ones(5, np.float32)
    ptr = np_ptr(a)
    ext.scale_in_place(3.0, a)
    assert (a == 3.0).all() and np_ptr(a) == ptr
    # A strided view too: only its own elements change.
    b = np.ones(10, np.float32)
    ext.scale_in_place(2.0, b[::2])
    assert b.tolist() == [2.0, 1.0] * 5


def test_the_recipe_writes_torch_memory(ext):
    t = torch.ones(4)
    ext.scale_in_place(0.5, t)
    assert t.tolist() == [0.5] * 4


def test_the_recipe_refuses_read_only_memory(ext):
    a = np.ones(3, np.float32)
    a.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ext.scale_in_place(2.0, a)
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
# Torch's rule for in-place writes, read at extraction, applied by `assume_exclusive`
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
        ext.scale_in_place(2.0, w)
    assert str(info.value) == REQUIRES_GRAD
    # A view of it requires grad too.
    with pytest.raises(RuntimeError, match="requires grad"):
        ext.scale_in_place(2.0, w[1:3])
    assert w.detach().tolist() == [1.0] * 4


def test_under_no_grad_it_is_written_as_an_optimizer_step_writes(ext):
    model = torch.nn.Linear(3, 2)
    bias = model.bias
    before = bias.detach().clone()
    ptr = bias.data_ptr()
    with torch.no_grad():
        ext.scale_in_place(2.0, bias)
    assert torch.equal(bias.detach(), before * 2) and bias.data_ptr() == ptr
    # The same write with grad mode off globally.
    torch.set_grad_enabled(False)
    try:
        ext.scale_in_place(0.5, bias)
    finally:
        torch.set_grad_enabled(True)
    assert torch.equal(bias.detach(), before)


def test_a_non_leaf_that_requires_grad_is_refused_too(ext):
    # Torch records an in-place operation on a non-leaf; a write from Rust cannot be
    # recorded, so it is refused in grad mode, and written under no_grad.
    a = torch.ones(3, requires_grad=True)
    b = a * 1.0
    with pytest.raises(RuntimeError, match="requires grad"):
        ext.scale_in_place(2.0, b)
    with torch.no_grad():
        ext.scale_in_place(2.0, b)
    assert b.detach().tolist() == [2.0] * 3


def test_a_tensor_that_does_not_require_grad_is_written_in_grad_mode(ext):
    t = torch.ones(3)
    assert torch.is_grad_enabled()
    ext.scale_in_place(3.0, t)
    assert t.tolist() == [3.0] * 3


def test_reading_a_tensor_that_requires_grad_is_never_refused(ext):
    w = torch.nn.Parameter(torch.ones(2, 3))
    assert ext.sum_f32_2d(w) == 6.0


def test_a_refused_write_leaves_the_array_shared_and_unchanged(ext):
    t = torch.ones(1).expand(4)
    with pytest.raises(ValueError, match="overlapping"):
        ext.scale_in_place(2.0, t)
    assert t.tolist() == [1.0] * 4


def test_numpy_arrays_have_no_torch_rule(ext):
    a = np.ones(3, np.float32)
    with torch.no_grad():
        ext.scale_in_place(2.0, a)
    ext.scale_in_place(2.0, a)
    assert a.tolist() == [4.0] * 3


def test_the_rule_travels_with_the_array_to_other_threads(ext):
    # The answer is read at extraction, on the caller's thread (grad mode is per
    # thread), and kept: the door opens on any thread, never waiting for the GIL.
    a = np.ones(3, np.float32)
    ext.scale_on_another_thread(2.0, a)
    assert a.tolist() == [2.0] * 3
    w = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(RuntimeError, match="requires grad"):
        ext.scale_on_another_thread(2.0, w)
    with torch.no_grad():
        ext.scale_on_another_thread(2.0, w)
    assert w.detach().tolist() == [2.0] * 3


def test_a_subclass_cannot_hide_that_it_requires_grad(ext):
    class Hiding(torch.Tensor):
        requires_grad = property(lambda self: False)

    t = torch.ones(3).as_subclass(Hiding)
    torch.Tensor.requires_grad_(t, True)
    with pytest.raises(RuntimeError, match="requires grad"):
        ext.scale_in_place(2.0, t)
    assert torch.Tensor.tolist(t) == [1.0] * 3


def test_a_subclass_whose_torch_function_refuses_is_still_read(ext):
    class Narrow(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            raise TypeError(f"Narrow does not handle {func}")

    with torch._C.DisableTorchFunction():
        t = torch.ones(2, 5).as_subclass(Narrow)
    # Reading is never refused for the write rule's sake...
    assert ext.sum_f32_2d(t) == 10.0
    # ... and the rule is read with torch functions off: torch's own flag.
    with torch._C.DisableTorchFunction():
        v = torch.ones(3).as_subclass(Narrow)
        w = torch.ones(3).as_subclass(Narrow).requires_grad_()
    ext.scale_in_place(2.0, v)
    with pytest.raises(RuntimeError, match="requires grad"):
        ext.scale_in_place(2.0, w)
    with torch._C.DisableTorchFunction():
        assert v.tolist() == [2.0] * 3 and w.tolist() == [1.0] * 3


def test_a_torch_function_that_lies_about_requires_grad_is_not_asked(ext):
    from torch.overrides import TorchFunctionMode

    flag = torch._C.TensorBase.__dict__["requires_grad"]

    def lie(func):
        return getattr(func, "__self__", None) is flag or func is flag.__get__

    class Lying(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return False if lie(func) else func(*args, **(kwargs or {}))

    class LyingTensor(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if lie(func):
                return False
            return super().__torch_function__(func, types, args, kwargs)

    w = torch.ones(3, requires_grad=True)
    p = torch.nn.Parameter(torch.ones(3))
    with Lying():
        for t in (w, p):
            with pytest.raises(RuntimeError, match="requires grad"):
                ext.scale_in_place(2.0, t)
    s = torch.ones(3).as_subclass(LyingTensor).requires_grad_()
    with pytest.raises(RuntimeError, match="requires grad"):
        ext.scale_in_place(2.0, s)
    assert w.detach().tolist() == p.detach().tolist() == [1.0] * 3


def test_a_torch_function_found_only_on_every_other_look_up_is_not_asked(ext):
    # A class that answers "no torch function" to one look-up of `__torch_function__`
    # and gives a liar to the next: torch's own checks disagree with each other, and a
    # read that relied on the first answer would ask the liar. The flag is read once,
    # after the import, with torch functions off: neither is asked.
    class Alternating(torch.Tensor):
        looks = 0

        def __getattribute__(self, name):
            if name == "__torch_function__":
                Alternating.looks += 1
                if Alternating.looks % 2:
                    return torch._C._disabled_torch_function_impl
                return lambda *args, **kwargs: False
            return super().__getattribute__(name)

    t = torch.Tensor._make_subclass(Alternating, torch.ones(3), True)
    for _ in range(2):  # whichever answer comes first
        with pytest.raises(RuntimeError, match="requires grad"):
            ext.scale_in_place(2.0, t)
    with torch._C.DisableTorchFunction():
        assert t.tolist() == [1.0] * 3


def test_grad_mode_turned_on_by_the_import_is_seen(ext):
    # The class's own `__dlpack__` runs during the import, after the rule was read
    # (with grad mode off): grad mode is read again after the import.
    class Flipping(torch.Tensor):
        def __dlpack__(self, *args, **kwargs):
            torch._C._set_grad_enabled(True)
            with torch._C.DisableTorchFunction():
                plain = self.detach().as_subclass(torch.Tensor)
            return plain.__dlpack__(*args, **kwargs)

    Flipping.__dlpack_c_exchange_api__ = None
    with torch._C.DisableTorchFunction():
        w = torch.ones(3).as_subclass(Flipping).requires_grad_()
    try:
        with torch.no_grad():
            with pytest.raises(RuntimeError, match="requires grad"):
                ext.scale_in_place(2.0, w)
    finally:
        torch.set_grad_enabled(True)
    with torch._C.DisableTorchFunction():
        assert w.tolist() == [1.0] * 3


# A stand-in registered under torch's names (a test's mock, a stub package) is never
# taken for torch, and never kept: the real torch's rule holds once it loads. Each in a
# new interpreter, where the extension has found no torch yet.
STAND_INS = {
    # A module made in Python, with a class that claims torch's module.
    "python-module": """
        fake_c = types.ModuleType("torch._C")
        class TensorBase:
            pass
        TensorBase.__module__ = "torch._C"
        fake_c.TensorBase = TensorBase
        fake_c.is_grad_enabled = lambda: False
        fake = types.ModuleType("torch")
        fake._C = fake_c
        fake.Tensor = type("Tensor", (TensorBase,), {})
        sys.modules["torch"], sys.modules["torch._C"] = fake, fake_c
    """,
    # Torch's real TensorBase in a stand-in module that says grad mode is off.
    "real-class-in-python-module": """
        import torch
        fake_c = types.ModuleType("torch._C")
        fake_c.TensorBase = torch._C.TensorBase
        fake_c.is_grad_enabled = lambda: False
        real_c = sys.modules["torch._C"]
        sys.modules["torch._C"] = fake_c
    """,
    # Another extension module, given torch's class and a C function of its own that
    # answers False.
    "other-extension": """
        import gc, torch
        gc.TensorBase = torch._C.TensorBase
        gc.is_grad_enabled = gc.isenabled
        gc.disable()
        real_c = sys.modules["torch._C"]
        sys.modules["torch._C"] = gc
    """,
    # Torch's own module with its grad-mode function replaced by a Python one.
    "patched-function": """
        import torch
        real = torch._C.is_grad_enabled
        torch._C.is_grad_enabled = lambda: False
    """,
    # ... by another C function of the module that answers False.
    "other-c-function": """
        import torch
        real = torch._C.is_grad_enabled
        torch._C.is_grad_enabled = torch._C._is_any_autocast_enabled
    """,
    # ... by a Python function bound to the module, named like torch's.
    "bound-python-function": """
        import torch
        real = torch._C.is_grad_enabled
        def is_grad_enabled(module):
            return False
        torch._C.is_grad_enabled = types.MethodType(is_grad_enabled, torch._C)
    """,
    # Torch's TensorBase replaced, on its module, by another static type of torch's.
    "other-static-type": """
        import torch
        real = torch._C.TensorBase
        torch._C.TensorBase = torch._C._FunctionBase
    """,
    # Torch's module gone from the interpreter's modules.
    "deleted-module": """
        import torch
        real_c = sys.modules.pop("torch._C")
    """,
    # `sys.modules` rebound to another dict (the interpreter keeps its own).
    "rebound-sys-modules": """
        import torch
        saved = sys.modules
        sys.modules = {}
    """,
    # TensorBase's own dictionary rewritten (through the garbage collector), its
    # `requires_grad` another of its getters, one that answers False.
    "rewritten-requires-grad": """
        import gc, torch
        tensor_base = gc.get_referents(torch._C.TensorBase.__dict__)[0]
        real = tensor_base["requires_grad"]
        tensor_base["requires_grad"] = tensor_base["is_sparse"]
    """,
    # DisableTorchFunction's own dictionary rewritten, its `__exit__` a Python function.
    "rewritten-exit": """
        import gc, torch
        methods = gc.get_referents(torch._C.DisableTorchFunction.__dict__)[0]
        real = methods["__exit__"]
        def python_exit(self, *args):
            print("python ran")
        methods["__exit__"] = python_exit
    """,
    # TensorBase's `is_sparse` getter as its `requires_grad`, with the names Python
    # reads of a descriptor (`getset_descriptor`'s own dictionary, rewritten) lying.
    "forged-descriptor-name": """
        import gc, torch
        tensor_base = gc.get_referents(torch._C.TensorBase.__dict__)[0]
        real = tensor_base["requires_grad"]
        fake = tensor_base["is_sparse"]
        getset = gc.get_referents(type(fake).__dict__)[0]
        real_name = getset["__name__"]
        getset["__name__"] = property(
            lambda d: "requires_grad" if d is fake else real_name.__get__(d)
        )
        sys._clear_type_cache()
        tensor_base["requires_grad"] = fake
    """,
    # `object.__reduce__` (a C method whose call runs Python code) as
    # DisableTorchFunction's `__exit__`, its owner and name lying the same way.
    "forged-method-owner": """
        import copyreg, gc, torch
        off_type = torch._C.DisableTorchFunction
        methods = gc.get_referents(off_type.__dict__)[0]
        real = methods["__exit__"]
        fake = object.__dict__["__reduce__"]
        described = gc.get_referents(type(fake).__dict__)[0]
        real_owner, real_name = described["__objclass__"], described["__name__"]
        described["__objclass__"] = property(
            lambda d: off_type if d is fake else real_owner.__get__(d)
        )
        described["__name__"] = property(
            lambda d: "__exit__" if d is fake else real_name.__get__(d)
        )
        real_reduce_ex = copyreg._reduce_ex
        def python_reduce_ex(*args):
            print("python ran")
        copyreg._reduce_ex = python_reduce_ex
        sys._clear_type_cache()
        methods["__exit__"] = fake
    """,
    # Another C function without arguments, bound to something else (a list), as
    # torch's `is_grad_enabled`, its name and bound object lying the same way.
    "forged-c-function": """
        import gc, torch
        real = torch._C.is_grad_enabled
        victim = [1, 2, 3].clear
        functions = gc.get_referents(type(victim).__dict__)[0]
        real_name, real_self = functions["__name__"], functions["__self__"]
        functions["__name__"] = property(
            lambda f: "is_grad_enabled" if f is victim else real_name.__get__(f)
        )
        functions["__self__"] = property(
            lambda f: torch._C if f is victim else real_self.__get__(f)
        )
        sys._clear_type_cache()
        torch._C.is_grad_enabled = victim
    """,
}

RESTORE = {
    "python-module": 'del sys.modules["torch"], sys.modules["torch._C"]',
    "real-class-in-python-module": 'sys.modules["torch._C"] = real_c',
    "other-extension": 'sys.modules["torch._C"] = real_c; gc.enable()',
    "patched-function": "torch._C.is_grad_enabled = real",
    "other-c-function": "torch._C.is_grad_enabled = real",
    "bound-python-function": "torch._C.is_grad_enabled = real",
    "other-static-type": "torch._C.TensorBase = real",
    "deleted-module": 'sys.modules["torch._C"] = real_c',
    "rebound-sys-modules": "sys.modules = saved",
    "rewritten-requires-grad": 'tensor_base["requires_grad"] = real',
    "rewritten-exit": 'methods["__exit__"] = real',
    "forged-descriptor-name": 'tensor_base["requires_grad"] = real; '
    'getset["__name__"] = real_name; sys._clear_type_cache()',
    "forged-method-owner": 'methods["__exit__"] = real; '
    'described["__objclass__"], described["__name__"] = real_owner, real_name; '
    "copyreg._reduce_ex = real_reduce_ex; sys._clear_type_cache()",
    "forged-c-function": "torch._C.is_grad_enabled = real; "
    'functions["__name__"], functions["__self__"] = real_name, real_self; '
    "sys._clear_type_cache()",
}


@pytest.mark.parametrize("stand_in", sorted(STAND_INS))
def test_a_stand_in_for_torch_is_never_kept(stand_in):
    child = run_child(
        "import sys, textwrap, types\n"
        "import numpy as np\n"
        "import dlpack_test_ext as ext\n"
        + textwrap.dedent(STAND_INS[stand_in])
        + """
# The extension asks for torch's rule while the stand-in is registered...
a = np.ones(3, np.float32)
ext.scale_in_place(2.0, a)
assert a.tolist() == [2.0] * 3
if "torch" in sys.modules and hasattr(sys.modules["torch"], "nn"):
    w = sys.modules["torch"].nn.Parameter(sys.modules["torch"].ones(3))
    try:
        ext.scale_in_place(2.0, w)
        print("during: written")
    except RuntimeError as e:
        print("during: refused" if "requires grad" in str(e) else f"during: {e}")
"""
        + RESTORE[stand_in]
        + """
# ... and the real torch's rule holds once the stand-in is gone.
import torch
assert torch.is_grad_enabled()
w = torch.nn.Parameter(torch.ones(3))
try:
    ext.scale_in_place(2.0, w)
    print("after: written")
except RuntimeError as e:
    print("after: refused" if "requires grad" in str(e) else f"after: {e}")
print("values", w.detach().tolist())
"""
    )
    assert child.returncode == 0, child.stderr
    lines = child.stdout.split("\n")
    assert "after: refused" in lines and "values [1.0, 1.0, 1.0]" in lines, child.stdout
    # While a stand-in holds torch's names, a real tensor that requires grad is
    # refused all the same (the rule is torch's object's own) or, where the stand-in
    # hides the real module, read as a plain import: never written in grad mode.
    assert "during: written" not in lines, child.stdout
    # No Python code runs between an import and its write.
    assert "python ran" not in lines, child.stdout


def test_a_class_whose_mro_leaves_torch_out_is_still_a_torch_tensor(ext):
    # The tensor's layout is TensorBase's whatever its class's `mro()` says: it is
    # found base by base, not through the MRO.
    class Meta(type(torch.Tensor)):
        def mro(cls):
            return [cls, torch.Tensor, object]

    class Hidden(torch.Tensor, metaclass=Meta):
        pass

    w = torch.ones(4, requires_grad=True)
    w.__class__ = Hidden
    assert torch._C.TensorBase not in type(w).__mro__
    with pytest.raises(RuntimeError, match="requires grad"):
        ext.scale_in_place(2.0, w)
    w.__class__ = torch.Tensor
    assert w.tolist() == [1.0] * 4


def test_python_code_run_while_torch_is_looked_for_cannot_hang_it():
    # Looking torch's module up may run Python code (a module's `__spec__`), which may
    # extract a typed argument in turn: no lock is held meanwhile, so it cannot wait
    # for itself. (A new interpreter: torch not yet looked for.)
    child = run_child(
        """
        import sys
        import torch
        import dlpack_test_ext as ext

        inner = []

        class Spec:
            @property
            def _initializing(self):
                if not inner:
                    inner.append(1)
                    try:
                        ext.scale_in_place(2.0, torch.ones(3, requires_grad=True))
                        inner.append("written")
                    except RuntimeError as e:
                        inner.append(str(e))
                return False

        torch._C.__spec__ = Spec()
        w = torch.ones(3, requires_grad=True)
        try:
            ext.scale_in_place(2.0, w)
            print("outer: written")
        except RuntimeError as e:
            print("outer: refused" if "requires grad" in str(e) else f"outer: {e}")
        print("inner:", inner[1:])
        """,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    assert "outer: refused" in child.stdout, child.stdout
    assert "written" not in child.stdout, child.stdout


def test_requires_grad_set_by_the_import_is_seen(ext):
    # The class's own `__dlpack__` (no C exchange table: the import calls it) sets the
    # flag after the rule was read: the rule is read again after the import.
    class Setting(torch.Tensor):
        __dlpack_c_exchange_api__ = None

        def __dlpack__(self, *args, **kwargs):
            capsule = torch.Tensor.__dlpack__(self, *args, **kwargs)
            self.requires_grad_(True)
            return capsule

    w = torch.ones(3).as_subclass(Setting)
    with pytest.raises(RuntimeError, match="requires grad"):
        ext.scale_in_place(2.0, w)
    with torch._C.DisableTorchFunction():
        assert w.requires_grad and w.tolist() == [1.0] * 3
