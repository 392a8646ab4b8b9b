"""The DLPack C exchange API (DLPack 1.3), both ways, with counting deleters:

- our `Tensor`'s table, called from C (ctypes) as a C-level consumer would: an object
  made from a tensor is writable only where the tensor is known to be exclusive, and a
  borrowed description never offers read-only memory and always has strides;
- imports through a producer's table: PyTorch's, a well-behaved one, and tables that
  fail in every way the standard leaves open; the table is found on the type alone
  (its bases included, never a metaclass), and an interrupt during the look-up
  propagates;

and the rest of the import surface: options (copy, trusted only where the copy is known;
device, stream), typed arguments, NumPy's `__array__` protocol."""

import ctypes
import gc
from ctypes import (
    CFUNCTYPE,
    POINTER,
    PYFUNCTYPE,
    Structure,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
    py_object,
)

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import np_ptr

# Run again against the stable-ABI build (tests/README.md).
pytestmark = pytest.mark.protocol


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


class DLManagedTensorVersioned(Structure):
    pass


DELETER = CFUNCTYPE(None, POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", c_void_p),
    ("deleter", DELETER),
    ("flags", c_uint64),
    ("dl_tensor", DLTensor),
]


class Header(Structure):
    _fields_ = [("version", DLPackVersion), ("prev_api", c_void_p)]


class ExchangeAPI(Structure):
    _fields_ = [
        ("header", Header),
        ("managed_tensor_allocator", c_void_p),
        ("managed_tensor_from_py_object_no_sync", c_void_p),
        ("managed_tensor_to_py_object_no_sync", c_void_p),
        ("dltensor_from_py_object_no_sync", c_void_p),
        ("current_work_stream", c_void_p),
    ]


MANAGED_OUT = POINTER(POINTER(DLManagedTensorVersioned))
SET_ERROR = CFUNCTYPE(None, c_void_p, c_char_p, c_char_p)
# PYFUNCTYPE: the GIL stays held and a Python exception set by the entry is raised.
FROM_OBJECT = PYFUNCTYPE(c_int, py_object, MANAGED_OUT)
TO_OBJECT = PYFUNCTYPE(c_int, POINTER(DLManagedTensorVersioned), POINTER(c_void_p))
BORROW = PYFUNCTYPE(c_int, py_object, POINTER(DLTensor))
ALLOCATE = PYFUNCTYPE(c_int, POINTER(DLTensor), MANAGED_OUT, c_void_p, SET_ERROR)
STREAM = PYFUNCTYPE(c_int, c_int32, c_int32, POINTER(c_void_p))

capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
capsule_pointer.restype = c_void_p
capsule_pointer.argtypes = [py_object, c_char_p]
decref = ctypes.pythonapi.Py_DecRef
decref.argtypes = [py_object]
set_name = ctypes.pythonapi.PyCapsule_SetName
set_name.argtypes = [py_object, c_char_p]


def table_of(tensor_type):
    api = ctypes.cast(
        capsule_pointer(tensor_type.__dlpack_c_exchange_api__, b"dlpack_exchange_api"),
        POINTER(ExchangeAPI),
    ).contents
    return api


def entry(api, name, prototype):
    address = getattr(api, name)
    assert address, f"{name} is NULL"
    return ctypes.cast(address, prototype)


def prototype_tensor(device, shape, dtype):
    """A `DLTensor` prototype for the allocator, and its shape array (keep it alive)."""
    dims = (c_int64 * len(shape))(*shape)
    tensor = DLTensor(
        data=None,
        device=DLDevice(*device),
        ndim=len(shape),
        dtype=dtype,
        shape=dims,
        strides=None,
        byte_offset=0,
    )
    return tensor, dims


def counted_tensor(ext, shape=(2, 3)):
    tensor, ptr = ext.make("float32", list(shape), "c", True)
    return tensor, ptr


# ------------------------------------------------------------------------------------
# Our table, from C
# ------------------------------------------------------------------------------------


def test_our_table_is_version_1_3_with_every_entry(ext):
    tensor, _ = counted_tensor(ext)
    capsule = type(tensor).__dlpack_c_exchange_api__
    assert type(capsule).__name__ == "PyCapsule"
    api = table_of(type(tensor))
    assert (api.header.version.major, api.header.version.minor) == (1, 3)
    assert not api.header.prev_api
    for name, _ in ExchangeAPI._fields_[1:]:
        assert getattr(api, name), name
    # The same table every time (it lives as long as the process).
    assert capsule_pointer(type(tensor).__dlpack_c_exchange_api__, b"dlpack_exchange_api") == (
        ctypes.addressof(api)
    )


def test_managed_tensor_from_our_object_shares_the_data_and_deletes_once(ext):
    tensor, ptr = counted_tensor(ext)
    from_object = entry(table_of(type(tensor)), "managed_tensor_from_py_object_no_sync", FROM_OBJECT)
    out = POINTER(DLManagedTensorVersioned)()
    assert from_object(tensor, ctypes.byref(out)) == 0
    managed = out.contents
    assert (managed.version.major, managed.version.minor) == (1, 3)
    dl = managed.dl_tensor
    assert dl.data == ptr == tensor.data_ptr()
    assert (dl.device.device_type, dl.device.device_id) == (1, 0)
    assert dl.ndim == 2 and [dl.shape[0], dl.shape[1]] == [2, 3]
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (2, 32, 1)
    assert managed.flags & 1 == 0  # not READ_ONLY
    del tensor
    gc.collect()
    assert ext.live_exports() == 1, "the managed tensor keeps the data alive"
    managed.deleter(out)
    assert ext.live_exports() == 0


def test_read_only_flag_travels_through_the_table(ext):
    tensor = ext.make_read_only([4], True)
    from_object = entry(table_of(type(tensor)), "managed_tensor_from_py_object_no_sync", FROM_OBJECT)
    out = POINTER(DLManagedTensorVersioned)()
    assert from_object(tensor, ctypes.byref(out)) == 0
    assert out.contents.flags & 1 == 1
    out.contents.deleter(out)


def test_from_object_refuses_other_objects_with_a_type_error(ext):
    tensor, _ = counted_tensor(ext)
    from_object = entry(table_of(type(tensor)), "managed_tensor_from_py_object_no_sync", FROM_OBJECT)
    out = POINTER(DLManagedTensorVersioned)()
    for other in (np.zeros(3), torch.zeros(3), None, "tensor"):
        with pytest.raises(TypeError, match="expected a Tensor object"):
            from_object(other, ctypes.byref(out))
        assert not out


def test_borrowed_dltensor_describes_our_object(ext):
    tensor, ptr = ext.make("int16", [4, 5], "f", True)
    borrow = entry(table_of(type(tensor)), "dltensor_from_py_object_no_sync", BORROW)
    dl = DLTensor()
    assert borrow(tensor, ctypes.byref(dl)) == 0
    assert dl.data == ptr
    assert dl.ndim == 2 and [dl.shape[0], dl.shape[1]] == [4, 5]
    assert [dl.strides[0], dl.strides[1]] == list(tensor.strides)
    assert (dl.dtype.code, dl.dtype.bits) == (0, 16)
    with pytest.raises(TypeError):
        borrow(np.zeros(2), ctypes.byref(dl))


def test_borrowed_description_of_a_read_only_tensor_is_refused(ext):
    tensor = ext.make_read_only([3])
    borrow = entry(table_of(type(tensor)), "dltensor_from_py_object_no_sync", BORROW)
    dl = DLTensor()
    with pytest.raises(BufferError, match="read-only"):
        borrow(tensor, ctypes.byref(dl))
    assert not dl.data


def test_borrowed_description_always_has_strides(ext):
    tensor = ext.roundtrip(ext.foreign_tensor(5, null_strides=True))
    assert tensor.strides is None  # the producer gave none
    borrow = entry(table_of(type(tensor)), "dltensor_from_py_object_no_sync", BORROW)
    dl = DLTensor()
    assert borrow(tensor, ctypes.byref(dl)) == 0
    assert dl.strides, "DLPack 1.3 forbids NULL strides"
    assert dl.strides[0] == 1
    # The strides live as long as the object: a second description gives the same.
    again = DLTensor()
    assert borrow(tensor, ctypes.byref(again)) == 0
    assert ctypes.addressof(again.strides.contents) == ctypes.addressof(dl.strides.contents)


def test_allocator_makes_a_zeroed_tensor_whose_deleter_runs_once(ext):
    tensor, _ = counted_tensor(ext)
    api = table_of(type(tensor))
    allocate = entry(api, "managed_tensor_allocator", ALLOCATE)
    to_object = entry(api, "managed_tensor_to_py_object_no_sync", TO_OBJECT)
    prototype, shape = prototype_tensor((1, 0), (2, 3, 4), DLDataType(2, 64, 1))
    errors = []
    set_error = SET_ERROR(lambda ctx, kind, message: errors.append((kind, message)))
    out = POINTER(DLManagedTensorVersioned)()
    assert allocate(ctypes.byref(prototype), ctypes.byref(out), None, set_error) == 0
    assert errors == []
    dl = out.contents.dl_tensor
    assert [dl.shape[i] for i in range(3)] == [2, 3, 4]
    assert dl.data and dl.data % 16 == 0
    # The new tensor becomes a Python object through the table ("the tensor is
    # stolen"), which NumPy then reads: zeros, in C order.
    obj_out = c_void_p()
    assert to_object(out, ctypes.byref(obj_out)) == 0
    obj = ctypes.cast(obj_out, py_object).value
    decref(obj)  # the entry returned a new reference; `value` took another
    assert type(obj) is type(tensor)
    array = np.from_dlpack(obj)
    assert array.shape == (2, 3, 4) and array.dtype == np.float64
    assert np_ptr(array) == dl.data
    assert not array.any()
    array[1, 2, 3] = 7.0  # the allocation is writable and big enough
    assert np.from_dlpack(obj)[1, 2, 3] == 7.0


@pytest.mark.parametrize(
    "device, shape, kind, message",
    [
        ((2, 0), (3,), b"BufferError", b"unsupported device"),
        ((1, 0), (2**62, 8), b"BufferError", b"overflow"),
        ((1, 0), (2**40, 2**20), b"MemoryError", b"cannot allocate"),
        ((1, 0), (-1,), b"BufferError", b"negative"),
    ],
)
def test_allocator_errors_go_to_set_error(ext, device, shape, kind, message):
    tensor, _ = counted_tensor(ext)
    allocate = entry(table_of(type(tensor)), "managed_tensor_allocator", ALLOCATE)
    prototype, dims = prototype_tensor(device, shape, DLDataType(2, 32, 1))
    errors = []
    set_error = SET_ERROR(lambda ctx, k, m: errors.append((k, m)))
    out = POINTER(DLManagedTensorVersioned)()
    assert allocate(ctypes.byref(prototype), ctypes.byref(out), None, set_error) == -1
    assert not out
    assert len(errors) == 1
    assert errors[0][0] == kind
    assert message in errors[0][1]
    # Without an error callback the failure is only the return value.
    assert allocate(ctypes.byref(prototype), ctypes.byref(out), None, SET_ERROR()) == -1


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
    assert allocate(ctypes.byref(prototype), ctypes.byref(out), None, SET_ERROR()) == 0
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


def test_current_work_stream_is_null_for_every_device(ext):
    tensor, _ = counted_tensor(ext)
    stream = entry(table_of(type(tensor)), "current_work_stream", STREAM)
    for device_type in (1, 2, 10):
        out = c_void_p(0x1234)
        assert stream(device_type, 0, ctypes.byref(out)) == 0
        assert not out.value


def test_a_tampered_table_capsule_does_not_reach_our_imports(ext):
    # A consumer renames the class's capsule: other consumers no longer find the table,
    # but imports of our own tensors use the table itself, not the capsule.
    tensor, ptr = counted_tensor(ext)
    capsule = type(tensor).__dlpack_c_exchange_api__
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = c_void_p, [py_object]
    set_name = ctypes.pythonapi.PyCapsule_SetName
    set_name.argtypes = [py_object, c_void_p]
    original = get_name(capsule)
    renamed = ctypes.create_string_buffer(b"renamed")
    assert set_name(capsule, ctypes.addressof(renamed)) == 0
    try:
        assert ext.import_ptr(tensor) == ptr
        assert ext.sum_f32_2d(tensor) == float(np.from_dlpack(tensor).sum())
    finally:
        assert set_name(capsule, original) == 0
    assert table_of(type(tensor)).header.version.major == 1


def test_peer_consumer_reads_our_table(ext):
    # dlpark 0.10 imports through the C exchange API when the type has one.
    tensor, ptr = counted_tensor(ext)
    assert ext.dlpark_import(tensor) == ptr
    del tensor
    gc.collect()
    assert ext.live_exports() == 0


# ------------------------------------------------------------------------------------
# Imports through a producer's table
# ------------------------------------------------------------------------------------


def producer(ext, kind, fallback=None, dunder=True):
    """A new class (a new cache entry) that publishes table `kind`, with a `__dlpack__`
    that counts its calls and hands out `fallback`'s capsule, or raises (none at all
    without `dunder`)."""

    class Producer:
        calls = 0

        def __dlpack__(self, **kwargs):
            type(self).calls += 1
            if fallback is None:
                raise AssertionError("__dlpack__ called: the C exchange API was not used")
            return fallback.__dlpack__(**kwargs)

    if not dunder:
        del Producer.__dlpack__
    if kind is not None:
        Producer.__dlpack_c_exchange_api__ = ext.exchange_capsule(kind)
    return Producer


def test_import_through_a_table_without_calling_dunder_dlpack(ext):
    Producer = producer(ext, "ok")
    calls = ext.exchange_calls()
    info = ext.import_with(Producer())
    assert ext.exchange_calls() == calls + 1
    assert info["shape"] == [3] and info["dtype"] == "float32"
    assert info["version"] == (1, 3)
    assert Producer.calls == 0
    gc.collect()
    assert ext.live_exports() == 0, "the producer's deleter ran"


def test_import_through_a_table_is_shared(ext):
    Producer = producer(ext, "ok")
    with pytest.raises(BufferError, match="shared"):
        ext.write_first(Producer(), 1.0)


def test_the_table_is_found_through_prev_api(ext):
    Producer = producer(ext, "major_2_then_1")
    info = ext.import_with(Producer())
    assert info["shape"] == [3]
    assert Producer.calls == 0


@pytest.mark.parametrize("kind", ["null_entry", "major_2"])
def test_an_unusable_table_falls_back_to_dunder_dlpack(ext, kind):
    a = np.arange(4, dtype=np.float32)
    Producer = producer(ext, kind, fallback=a)
    calls = ext.exchange_calls()
    info = ext.import_with(Producer())
    assert info["ptr"] == np_ptr(a)
    assert Producer.calls == 1
    assert ext.exchange_calls() == calls


@pytest.mark.parametrize(
    "attribute",
    [
        12345,
        "dlpack_exchange_api",
        None,
        pytest.param("wrong-name", id="capsule-of-another-name"),
    ],
)
def test_an_attribute_that_is_no_table_falls_back(ext, attribute):
    if attribute == "wrong-name":
        attribute = ext.foreign_capsule()  # a capsule, but not "dlpack_exchange_api"
    a = np.arange(4, dtype=np.float32)
    Producer = producer(ext, None, fallback=a)
    Producer.__dlpack_c_exchange_api__ = attribute
    assert ext.import_with(Producer())["ptr"] == np_ptr(a)
    assert Producer.calls == 1


@pytest.mark.parametrize("kind", ["fail_with_exception", "fail_silently"])
def test_a_refusing_table_falls_back_to_dunder_dlpack(ext, kind):
    # Whatever path an import takes, a failure is the protocol path's: an entry that
    # refuses the object leaves the answer to `__dlpack__`.
    a = np.arange(4, dtype=np.float32)
    Producer = producer(ext, kind, fallback=a)
    calls = ext.exchange_calls()
    assert ext.import_with(Producer())["ptr"] == np_ptr(a)
    assert ext.exchange_calls() == calls + 1
    assert Producer.calls == 1


@pytest.mark.parametrize(
    "kind, error, message",
    [
        ("fail_with_exception", ZeroDivisionError, "the producer failed"),
        ("fail_silently", SystemError, "failed without setting an exception"),
    ],
)
def test_a_refusing_table_without_dunder_dlpack_raises_its_error(ext, kind, error, message):
    Producer = producer(ext, kind, dunder=False)
    with pytest.raises(error, match=message):
        ext.import_with(Producer())


@pytest.mark.parametrize(
    "kind, error, message",
    [
        ("success_with_exception", ValueError, "left set by the producer"),
        ("null_tensor", BufferError, "returned no tensor"),
    ],
)
def test_a_broken_table_is_an_error_and_loses_nothing(ext, kind, error, message):
    Producer = producer(ext, kind)
    with pytest.raises(error, match=message):
        ext.import_with(Producer())
    assert Producer.calls == 0
    gc.collect()
    # success_with_exception handed over a counted tensor: it was deleted, once.
    assert ext.live_exports() == 0


def test_tables_are_cached_per_type_and_many_types_work(ext):
    classes = [producer(ext, "ok") for _ in range(20)]
    calls = ext.exchange_calls()
    for _ in range(3):
        for cls in classes:
            assert ext.import_with(cls())["shape"] == [3]
    assert ext.exchange_calls() == calls + 60
    del classes
    gc.collect()


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


def test_one_object_imported_twice_gives_two_shared_tensors(ext):
    tensor, ptr = counted_tensor(ext)
    assert ext.two_mutable_views(tensor)[0] != "ok"
    assert ext.import_ptr(tensor) == ext.import_ptr(tensor) == ptr


def test_torch_imports_through_its_table(ext):
    # A subclass keeps torch's table (it is looked up on the type) but has a
    # `__dlpack__` that raises: the import cannot have called it.
    class NoDunder(torch.Tensor):
        def __dlpack__(self, *args, **kwargs):
            raise AssertionError("__dlpack__ called")

    assert hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    sub = t.as_subclass(NoDunder)
    info = ext.import_with(sub)
    assert info["ptr"] == t.data_ptr()
    assert info["shape"] == [3, 4]
    assert info["values"] == list(range(12))
    # Sliced and transposed: strides as torch has them, same memory.
    view = t.t()[1:, ::2].as_subclass(NoDunder)
    info = ext.import_with(view)
    assert info["ptr"] == view.data_ptr()
    assert info["strides"] == list(view.stride())
    with pytest.raises(BufferError, match="shared"):
        ext.write_first(sub, 1.0)


def test_torch_tensor_survives_its_python_object(ext):
    t = torch.arange(6, dtype=torch.float32)
    ptr = t.data_ptr()
    tensor = ext.roundtrip(t)  # imported through the table, handed back as ours
    del t
    gc.collect()
    assert np.from_dlpack(tensor).tolist() == list(range(6))
    assert tensor.data_ptr() == ptr


# ------------------------------------------------------------------------------------
# Options: copy, device, stream
# ------------------------------------------------------------------------------------


class Recorder:
    """A producer on `device` that records what `__dlpack__` was asked and hands out
    `capsule_source`'s capsule."""

    def __init__(self, device, capsule_source):
        self.device, self.source, self.asked = device, capsule_source, []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kwargs):
        self.asked.append(kwargs)
        return self.source.__dlpack__(max_version=kwargs.get("max_version"))


def test_a_host_copy_of_a_device_tensor_asks_for_dl_device_and_copy(ext):
    a = np.arange(3, dtype=np.float32)
    r = Recorder((2, 0), a)
    info = ext.import_with(r, copy=True, device=(1, 0))
    assert r.asked == [{"max_version": (1, 3), "dl_device": (1, 0), "copy": True}]
    assert info["device"] == (1, 0)


def test_a_stream_is_passed_for_device_data_only(ext):
    a = np.arange(3, dtype=np.float32)
    on_gpu = Recorder((2, 0), ext.make_on_device(2, 0))
    ext.import_with(on_gpu, stream=5)
    assert on_gpu.asked == [{"max_version": (1, 3), "stream": 5}]
    on_cpu = Recorder((1, 0), a)
    ext.import_with(on_cpu, stream=5)
    assert on_cpu.asked == [{"max_version": (1, 3)}]
    # Copied to the host: no stream either.
    to_host = Recorder((2, 0), a)
    ext.import_with(to_host, stream=5, device=(1, 0), copy=True)
    assert to_host.asked == [{"max_version": (1, 3), "dl_device": (1, 0), "copy": True}]


def test_the_device_asked_for_is_checked_on_the_result(ext):
    r = Recorder((2, 0), ext.make_on_device(2, 0))  # ignores dl_device
    with pytest.raises(BufferError, match="for a tensor on cpu:0, got one on cuda:0"):
        ext.import_with(r, device=(1, 0))
    gc.collect()


def test_the_device_the_data_is_on_is_not_passed(ext):
    a = np.arange(3, dtype=np.float32)
    r = Recorder((1, 0), a)
    assert ext.import_with(r, device=(1, 0))["ptr"] == np_ptr(a)
    assert r.asked == [{"max_version": (1, 3)}]


def test_options_with_real_producers(ext):
    a = np.arange(6, dtype=np.float32)
    assert ext.import_with(a, device=(1, 0))["ptr"] == np_ptr(a)
    assert ext.import_with(a, stream=7)["ptr"] == np_ptr(a)  # CPU: not passed
    copied = ext.import_with(a, copy=True, device=(1, 0))
    assert copied["ptr"] != np_ptr(a) and copied["values"] == list(range(6))
    t = torch.arange(6, dtype=torch.float32)
    assert ext.import_with(t, device=(1, 0))["ptr"] == t.data_ptr()
    assert ext.import_with(t, copy=True)["ptr"] != t.data_ptr()
    # A device that the producer cannot reach: its own error.
    with pytest.raises((BufferError, ValueError, RuntimeError)):
        ext.import_with(a, device=(2, 0))
    # PyTorch does not flag its copy IS_COPIED: nothing proves it is the caller's alone.
    with pytest.raises(BufferError, match="shared"):
        ext.write_first(t, 5.0, copy=True)
    written = ext.write_first(a, 5.0, copy=True)  # NumPy flags it: writable
    assert np.from_dlpack(written)[0] == 5.0 and a[0] == 0.0


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


# ------------------------------------------------------------------------------------
# Typed arguments
# ------------------------------------------------------------------------------------


def test_typed_argument_takes_every_producer(ext):
    n = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert ext.sum_f32_2d(n) == 15.0
    assert ext.sum_f32_2d(torch.from_numpy(n)) == 15.0
    assert ext.sum_f32_2d(jnp.asarray(n)) == 15.0
    ours, _ = ext.make("float32", [2, 3])
    assert ext.sum_f32_2d(ours) == float(np.from_dlpack(ours).sum())
    v = np.arange(5, dtype=np.float32)
    assert ext.typed_ptr_f32_1d(v) == np_ptr(v)
    t = torch.arange(5, dtype=torch.float32)
    assert ext.typed_ptr_f32_1d(t) == t.data_ptr()


@pytest.mark.parametrize(
    "value, found",
    [
        (np.zeros((2, 3), np.float64), "float64 with shape (2, 3)"),
        (np.zeros(3, np.float32), "float32 with shape (3,)"),
        (torch.zeros(2, 2, 2), "float32 with shape (2, 2, 2)"),
    ],
)
def test_typed_argument_errors_name_the_argument_and_both_types(ext, value, found):
    with pytest.raises(TypeError) as info:
        ext.sum_f32_2d(value)
    # PyO3 names the argument in a note.
    message = "\n".join([str(info.value), *getattr(info.value, "__notes__", [])])
    assert "'x'" in message
    assert "expected a DLPack array of float32 with 2 dimensions" in message
    assert found in message


def test_typed_argument_refuses_non_arrays(ext):
    with pytest.raises(TypeError, match="expected an object with __dlpack__") as info:
        ext.sum_f32_2d([[1.0, 2.0]])
    assert "'x'" in "\n".join(getattr(info.value, "__notes__", [str(info.value)]))


# ------------------------------------------------------------------------------------
# NumPy's entry points
# ------------------------------------------------------------------------------------


def test_np_asarray_shares_memory(ext):
    ours, ptr = ext.make("float32", [2, 3])
    a = np.asarray(ours)
    assert isinstance(a, np.ndarray) and a.dtype == np.float32 and a.shape == (2, 3)
    assert np_ptr(a) == ptr
    assert np_ptr(np.asarray(ours, dtype=np.float32)) == ptr
    assert np_ptr(np.array(ours, copy=False)) == ptr


def test_np_array_copies_and_converts(ext):
    ours, ptr = ext.make("float32", [4])
    expected = np.from_dlpack(ours).copy()
    b = np.array(ours)  # NumPy 2: copy=True
    assert np_ptr(b) != ptr and (b == expected).all()
    c = np.asarray(ours, dtype=np.float64)
    assert c.dtype == np.float64 and (c == expected).all()
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        np.array(ours, dtype=np.float64, copy=False)


def test_read_only_tensor_is_a_read_only_array(ext):
    a = np.asarray(ext.make_read_only([3]))
    assert not a.flags.writeable


def test_jax_and_torch_asarray(ext):
    ours, ptr = ext.make("float32", [2, 3])
    expected = np.from_dlpack(ours)
    j = jnp.asarray(ours)
    assert j.dtype == jnp.float32 and (np.asarray(j) == expected).all()
    # As documented: JAX 0.10 does not convert a Tensor given straight to a function.
    with pytest.raises(ValueError, match="__jax_array__"):
        jnp.sin(ours)
    assert np.allclose(np.asarray(jnp.sin(jnp.asarray(ours))), np.sin(expected))
    t = torch.as_tensor(ours)
    assert t.data_ptr() == ptr
    assert torch.asarray(ours).data_ptr() == ptr
