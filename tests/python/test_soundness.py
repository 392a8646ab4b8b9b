"""Soundness, second round: defects of the import paths, each reproduced the way it can
be reached (from safe code, or from a conforming C caller), and what the import-safety
policy trusts. Crashes and hangs run in a child process, so that a regression fails its test
instead of the suite."""

import ctypes
import gc
import subprocess
import sys
import textwrap
from ctypes import POINTER, byref, c_char_p, c_void_p, py_object

import numpy as np
import pytest
import torch

from helpers import np_ptr
from test_exchange import (
    ALLOCATE,
    BORROW,
    SET_ERROR,
    TO_OBJECT,
    DLDataType,
    DLManagedTensorVersioned,
    DLTensor,
    capsule_pointer,
    entry,
    producer,
    prototype_tensor,
    table_of,
)

set_name = ctypes.pythonapi.PyCapsule_SetName
set_name.argtypes = [py_object, c_char_p]


def run_child(code, timeout=120):
    """Runs `code` in a new interpreter with the test extension; its exit status and
    output. A hang is a failure after `timeout` seconds."""
    try:
        result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child process hung for {timeout} s")
    return result.returncode, result.stdout + result.stderr


# ---------------------------------------------------------------------------------------
# 1. Dropping an import after a subinterpreter existed.
# ---------------------------------------------------------------------------------------


def test_drop_after_a_subinterpreter_detached_and_on_a_thread():
    # Once a subinterpreter exists, `PyGILState_Check` answers 1 on every thread: the
    # release of an imported tensor must ask whether this thread is attached instead.
    status, output = run_child(
        """
        import numpy as np
        import dlpack_test_ext as ext
        try:
            import _interpreters as interpreters  # 3.13+
        except ImportError:
            import _xxsubinterpreters as interpreters  # 3.11, 3.12
        interpreters.destroy(interpreters.create())
        interpreters.create()
        for _ in range(3):
            ext.drop_detached(np.arange(3.0))
            ext.drop_on_thread(np.arange(3.0))
        print("dropped")
        """
    )
    assert status == 0, output
    assert "dropped" in output


# ---------------------------------------------------------------------------------------
# 2. The table's "to object" entry: a foreign tensor stays shared.
# ---------------------------------------------------------------------------------------


def consumed_capsule_pointer(array):
    """The versioned tensor of `array`'s capsule, taken over as a consumer does."""
    capsule = array.__dlpack__(max_version=(1, 3))
    pointer = capsule_pointer(capsule, b"dltensor_versioned")
    assert set_name(capsule, b"used_dltensor_versioned") == 0
    return pointer


def test_to_object_of_a_numpy_export_gives_no_mutable_view(ext):
    a = np.zeros(3)
    with pytest.raises(BufferError, match="shared"):
        ext.to_object_then_write(consumed_capsule_pointer(a), 5.0)
    assert a[0] == 0.0, "NumPy's array was written through an aliasing &mut"
    gc.collect()


def allocated(ext):
    """A float64 tensor of 4 zeros from our table's allocator, as its caller holds it."""
    tensor, _ = ext.make("float32", [2], "c", True)
    allocate = entry(table_of(type(tensor)), "managed_tensor_allocator", ALLOCATE)
    prototype, dims = prototype_tensor((1, 0), (4,), DLDataType(2, 64, 1))
    out = POINTER(DLManagedTensorVersioned)()
    assert allocate(byref(prototype), byref(out), None, SET_ERROR()) == 0
    return out


def address(out):
    return ctypes.cast(out, c_void_p).value


def test_to_object_of_our_allocation_stays_exclusive(ext):
    ext.to_object_then_write(address(allocated(ext)), 5.0)


def test_to_object_of_our_allocation_judges_a_rewritten_header_by_its_addresses(ext):
    """The allocator's caller may rewrite the header before handing it back."""
    # Pointed at a NumPy array's memory: shared, and the array is never written.
    out = allocated(ext)
    other = np.zeros(4)
    out.contents.dl_tensor.data = other.ctypes.data
    with pytest.raises(BufferError, match="shared"):
        ext.to_object_then_write(address(out), 5.0)
    assert other[0] == 0.0
    # 2^59 elements over the first one: inside the buffer, judged at once (the check
    # used to walk every element), and the mutable view refuses the overlap.
    out = allocated(ext)
    out.contents.dl_tensor.shape[0] = 2**59
    out.contents.dl_tensor.strides[0] = 0
    with pytest.raises(ValueError, match="overlap"):
        ext.to_object_then_write(address(out), 5.0)


# ---------------------------------------------------------------------------------------
# 3. The borrowed description: never writable read-only memory, always strides.
# ---------------------------------------------------------------------------------------


def test_borrowed_description_of_a_read_only_tensor_is_refused(ext):
    tensor = ext.make_read_only([3])
    borrow = entry(table_of(type(tensor)), "dltensor_from_py_object_no_sync", BORROW)
    dl = DLTensor()
    with pytest.raises(BufferError, match="read-only"):
        borrow(tensor, byref(dl))
    assert not dl.data


def test_borrowed_description_always_has_strides(ext):
    tensor = ext.roundtrip(ext.foreign_tensor(5, null_strides=True))
    assert tensor.strides is None  # the producer gave none
    borrow = entry(table_of(type(tensor)), "dltensor_from_py_object_no_sync", BORROW)
    dl = DLTensor()
    assert borrow(tensor, byref(dl)) == 0
    assert dl.strides, "DLPack 1.3 forbids NULL strides"
    assert dl.strides[0] == 1
    # The strides live as long as the object: a second description gives the same.
    again = DLTensor()
    assert borrow(tensor, byref(again)) == 0
    assert ctypes.addressof(again.strides.contents) == ctypes.addressof(dl.strides.contents)


# ---------------------------------------------------------------------------------------
# 4. Bool checks of overlapping windows cost their span, not their element count.
# ---------------------------------------------------------------------------------------


def test_bool_view_of_overlapping_windows_is_quick():
    # 2^40 elements over 5 MiB: byte strides (2, 3) do not divide each other. The check
    # used to visit every element (hours); it must visit each byte once.
    status, output = run_child(
        """
        import numpy as np
        import dlpack_test_ext as ext
        n = 2**20
        base = np.zeros(5 * n, np.bool_)
        x = np.lib.stride_tricks.as_strided(base, shape=(n, n), strides=(2, 3))
        assert ext.bool_len(x) == n * n
        base[5 * (n - 1) - 3] = True  # 2 * (n - 1) + 3 * (n - 2): reachable, still valid
        assert ext.bool_len(x) == n * n
        base.view(np.uint8)[7] = 2  # an invalid bool, found and named
        try:
            ext.bool_len(x)
        except ValueError as e:
            assert "byte 2" in str(e) or "2" in str(e), e
            print("refused:", e)
        """,
        timeout=60,
    )
    assert status == 0, output
    assert "refused" in output


# ---------------------------------------------------------------------------------------
# 5. `copy=True` is trusted only where the copy is known.
# ---------------------------------------------------------------------------------------


class DropsCopy:
    """A pure-Python wrapper that forwards `__dlpack__` without its `copy` keyword."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        kwargs.pop("copy", None)
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_copy_true_without_a_copy_is_still_shared(ext):
    a = np.zeros(3, np.float32)
    with pytest.raises(BufferError, match="shared"):
        ext.write_first(DropsCopy(a), 1.0, copy=True)
    assert a[0] == 0.0


def test_copy_true_is_exclusive_only_when_flagged(ext):
    # NumPy flags its copy IS_COPIED: exclusive, and the original is untouched.
    a = np.zeros(3, np.float32)
    written = ext.write_first(a, 1.0, copy=True)
    assert np.from_dlpack(written)[0] == 1.0 and a[0] == 0.0
    # PyTorch copies without the flag, and nothing proves that a given torch.Tensor's
    # `__dlpack__` is PyTorch's own (an instance attribute, a patched class, a torch
    # function mode): shared.
    t = torch.zeros(3)
    t.__dlpack__ = lambda **kwargs: a.__dlpack__(max_version=(1, 0))
    with pytest.raises(BufferError, match="shared"):
        ext.write_first(t, 1.0, copy=True)
    with pytest.raises(BufferError, match="shared"):
        ext.write_first(torch.zeros(3), 1.0, copy=True)
    assert a[0] == 0.0


# ---------------------------------------------------------------------------------------
# 6. The table look-up: interrupts propagate; only the type's own dictionaries count.
# ---------------------------------------------------------------------------------------


def test_an_interrupt_during_the_table_lookup_propagates_and_is_not_cached(ext):
    class Collider:
        """A key of the class dictionary that collides with the attribute's name and
        raises on comparison, once."""

        raised = False

        def __hash__(self):
            return hash("__dlpack_c_exchange_api__")

        def __eq__(self, other):
            if not Collider.raised:
                Collider.raised = True
                raise KeyboardInterrupt("while looking up the table")
            return False

    a = np.arange(3, dtype=np.float32)
    cls = type("Producer", (), {Collider(): 1, "__dlpack__": lambda self, **kw: a.__dlpack__(**kw)})
    with pytest.raises(KeyboardInterrupt):
        ext.import_ptr(cls())
    # Not cached as "no table": the next look-up runs again, and now finds none.
    assert ext.import_ptr(cls()) == a.ctypes.data


def test_a_metaclass_getattr_is_never_consulted(ext):
    calls = []
    capsule = ext.exchange_capsule("ok")

    class Meta(type):
        def __getattr__(cls, name):
            calls.append(name)
            if name == "__dlpack_c_exchange_api__":
                return capsule  # a table the type does not publish
            raise AttributeError(name)

    a = np.arange(3, dtype=np.float32)

    class Producer(metaclass=Meta):
        def __dlpack__(self, **kwargs):
            return a.__dlpack__(**kwargs)

    before = ext.exchange_calls()
    assert ext.import_ptr(Producer()) == a.ctypes.data
    assert ext.exchange_calls() == before, "a table the type does not publish was used"
    assert "__dlpack_c_exchange_api__" not in calls


def test_an_inherited_table_is_found_through_the_mro(ext):
    Base = producer(ext, "ok")

    class Derived(Base):
        pass

    before = ext.exchange_calls()
    assert ext.import_with(Derived())["shape"] == [3]
    assert ext.exchange_calls() == before + 1


# ---------------------------------------------------------------------------------------
# 7. Dropping an import on a thread while the GIL holder waits for it.
# ---------------------------------------------------------------------------------------


def test_drop_on_a_thread_while_the_gil_holder_joins_it():
    # Neither our own tensors nor a foreign deleter that needs no Python may wait for
    # the GIL (the stable-ABI build used to take it for every Python import).
    status, output = run_child(
        """
        import dlpack_test_ext as ext
        t, _ = ext.make("float32", [4], "c", True)
        ext.drop_on_thread_holding_gil(t)
        ext.drop_on_thread_holding_gil(ext.foreign_tensor(4))
        print("returned")
        """,
        timeout=60,
    )
    assert status == 0, output
    assert "returned" in output


# ---------------------------------------------------------------------------------------
# To settle: broken tables lose nothing; device tensors never skip synchronisation.
# ---------------------------------------------------------------------------------------


def test_a_failing_entry_that_hands_over_a_tensor_loses_nothing(ext):
    Producer = producer(ext, "fail_with_tensor", fallback=np.arange(2, dtype=np.float32))
    info = ext.import_with(Producer())
    assert info["shape"] == [2], "the import fell back to __dlpack__"
    assert Producer.calls == 1
    gc.collect()
    assert ext.live_exports() == 0, "the tensor the failing entry handed over was deleted"


def test_a_panic_left_by_an_entry_loses_nothing(ext):
    # PyO3 resumes a `PanicException` as a panic when the consumer takes it: the tensor
    # the entry handed over must be released by the unwinding, not leaked.
    Producer = producer(ext, "panic_with_tensor")
    with pytest.raises(BaseException, match="a panic left behind"):
        ext.import_with(Producer())
    gc.collect()
    assert ext.live_exports() == 0


def test_pinned_memory_from_a_table_is_imported_by_dunder_dlpack(ext):
    # The table's calls never wait for a device's stream: when the entry hands over a
    # tensor in pinned (or managed) memory, it is released and the import goes through
    # `__dlpack__`, which synchronises.
    a = np.arange(3, dtype=np.float32)
    Producer = producer(ext, "pinned", fallback=a)
    before = ext.exchange_calls()
    info = ext.import_with(Producer())
    assert ext.exchange_calls() == before + 1
    assert Producer.calls == 1
    assert info["ptr"] == np_ptr(a)
    gc.collect()
    assert ext.live_exports() == 0, "the pinned tensor the entry handed over was released"
