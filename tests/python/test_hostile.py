"""Hostile inputs, as an attacker would send them from Python: capsules renamed or
corrupted by a consumer, deleters that raise or leave exceptions set, broadcast tensors
of 2**62 elements, copies that cannot be allocated, one capsule imported from many
threads, one object imported twice for writing. Every case ends in a typed exception or
a correct result, the process survives, and every deleter runs exactly once (counted by
the test extension, and by the leak check after every test)."""

import ctypes
import gc
import sys
import threading

import numpy as np
import pytest
import torch

from helpers import capsule_name, run_child

# Run again against the stable-ABI build (tests/README.md).
pytestmark = pytest.mark.protocol

# A capsule keeps a pointer to its name: these must outlive every capsule renamed here.
GARBAGE_NAME = b"not_a_dlpack_name"
USED_VERSIONED = b"used_dltensor_versioned"

_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
_set_name.restype = ctypes.c_int
_set_pointer = ctypes.pythonapi.PyCapsule_SetPointer
_set_pointer.argtypes = [ctypes.py_object, ctypes.c_void_p]
_set_pointer.restype = ctypes.c_int


class Unraisable:
    """What ``sys.unraisablehook`` was given, without keeping the object it names alive
    (keeping a dying object would resurrect it)."""

    def __init__(self, args):
        self.exc_type = args.exc_type
        self.exc_value = args.exc_value
        self.has_object = args.object is not None


@pytest.fixture
def unraisable(monkeypatch):
    """The unraisable exceptions reported during the test."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda args: seen.append(Unraisable(args)))
    return seen


def messages(seen):
    return [str(u.exc_value) for u in seen]


# ---------------------------------------------------------------------------------------
# Capsules renamed or corrupted by a consumer.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_version", [None, (1, 3)])
@pytest.mark.parametrize("name", [GARBAGE_NAME, None])
def test_renamed_unconsumed_capsule_is_leaked_and_reported(ext, unraisable, max_version, name):
    # Not counted: a capsule renamed without being consumed cannot say whether its
    # renamer took the tensor, so it is leaked, never freed on a guess.
    t = ext.make("float32", [3])[0]
    capsule = t.__dlpack__(max_version=max_version)
    assert _set_name(capsule, name) == 0
    del capsule
    gc.collect()
    assert len(unraisable) == 1, messages(unraisable)
    assert unraisable[0].exc_type is RuntimeError
    assert "leaked" in str(unraisable[0].exc_value)
    assert not unraisable[0].has_object  # never the dying capsule
    # The object still exports.
    assert np.from_dlpack(t).shape == (3,)


@pytest.mark.parametrize("max_version", [None, (1, 3)])
def test_capsule_with_a_replaced_pointer_is_left_alone(ext, unraisable, max_version):
    t = ext.make("float32", [3])[0]
    capsule = t.__dlpack__(max_version=max_version)
    decoy = ctypes.create_string_buffer(256)
    assert _set_pointer(capsule, ctypes.addressof(decoy)) == 0
    del capsule
    gc.collect()
    assert len(unraisable) == 1, messages(unraisable)
    assert "replaced" in str(unraisable[0].exc_value)
    assert decoy.raw == b"\0" * 256


def test_capsule_renamed_used_is_not_freed_by_us(ext):
    # A consumer that takes the tensor renames the capsule; the tensor is then its.
    t = ext.make("float32", [3], counted=True)[0]
    capsule = t.__dlpack__(max_version=(1, 3))
    imported = ext.roundtrip(capsule)
    assert capsule_name(capsule) == "used_dltensor_versioned"
    del capsule, t
    gc.collect()
    assert ext.live_exports() == 1  # `imported` holds it
    del imported


# ---------------------------------------------------------------------------------------
# Deleters that leave an exception set, or raise.
# ---------------------------------------------------------------------------------------


def test_deleter_leaving_an_exception_set_in_a_rust_drop(ext, unraisable):
    capsule = ext.foreign_tensor(4, raise_in_deleter=True)
    assert ext.live_exports() == 1
    # The import is dropped inside the call: the deleter's exception is reported, the
    # call itself returns normally.
    assert isinstance(ext.import_ptr(capsule), int)
    assert ext.live_exports() == 0
    assert messages(unraisable) == ["a deleter that leaves an exception set"]


def test_deleter_leaving_an_exception_set_then_an_unconsumed_capsule(ext, unraisable):
    # The round-tripped tensor is freed by the destructor of an unconsumed capsule of
    # ours, whose reporting once re-entered the destructor (a double free).
    capsule = ext.foreign_tensor(4, raise_in_deleter=True)
    t = ext.roundtrip(capsule)
    ours = [t.__dlpack__(max_version=(1, 3)), t.__dlpack__()]
    del t, capsule
    assert ext.live_exports() == 1
    del ours
    gc.collect()
    assert ext.live_exports() == 0
    assert messages(unraisable) == ["a deleter that leaves an exception set"]


def test_deleter_leaving_an_exception_set_while_another_is_in_flight(ext, unraisable):
    capsule = ext.foreign_tensor(4, raise_in_deleter=True)
    t = ext.roundtrip(capsule)
    del capsule

    def fail(holder):
        holder.append(t.__dlpack__(max_version=(1, 3)))
        raise KeyError("in flight")

    holder = []
    with pytest.raises(KeyError, match="in flight"):
        try:
            fail(holder)
        finally:
            del t
            holder.clear()  # the capsule dies while KeyError propagates
    assert ext.live_exports() == 0
    assert messages(unraisable) == ["a deleter that leaves an exception set"]


# A foreign producer in pure Python (ctypes), whose deleter raises.


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DELETER),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_new.restype = ctypes.py_object


class CtypesProducer:
    """Makes versioned capsules over NumPy buffers, each header a ctypes struct whose
    deleter records its call and then raises (the ctypes callback reports it)."""

    def __init__(self, raise_in_deleter=True):
        self.live = {}
        self.deleted = []
        self.raise_in_deleter = raise_in_deleter
        self.deleter = DELETER(self._delete)

    def _delete(self, managed):
        address = ctypes.cast(managed, ctypes.c_void_p).value
        self.deleted.append(address)
        self.live.pop(address)
        if self.raise_in_deleter:
            raise ValueError("a deleter that raises")

    def capsule(self, values, *, ndim=None, null_shape=False, major=1):
        values = np.ascontiguousarray(values, dtype=np.float32)
        shape = (ctypes.c_int64 * max(values.ndim, 1))(*values.shape)
        strides = (ctypes.c_int64 * max(values.ndim, 1))(*(s // 4 for s in values.strides))
        managed = DLManagedTensorVersioned()
        managed.version = DLPackVersion(major, 3)
        managed.deleter = self.deleter
        managed.dl_tensor.data = values.ctypes.data
        managed.dl_tensor.device = DLDevice(1, 0)
        managed.dl_tensor.ndim = values.ndim if ndim is None else ndim
        managed.dl_tensor.dtype = DLDataType(2, 32, 1)
        managed.dl_tensor.shape = (
            ctypes.cast(None, ctypes.POINTER(ctypes.c_int64)) if null_shape else shape
        )
        managed.dl_tensor.strides = strides
        address = ctypes.addressof(managed)
        self.live[address] = (managed, values, shape, strides)
        return _capsule_new(address, b"dltensor_versioned", None)


def test_deleter_that_raises_runs_once(ext, unraisable):
    producer = CtypesProducer()
    capsule = producer.capsule(np.arange(6).reshape(2, 3))
    assert ext.inspect(capsule)["values"] == [0, 1, 2, 3, 4, 5]
    assert len(producer.deleted) == 1
    assert not producer.live
    assert any("a deleter that raises" in m for m in messages(unraisable))


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        (dict(ndim=-1), "ndim"),
        (dict(null_shape=True), "null pointer"),
    ],
)
def test_malformed_ctypes_headers_are_refused_and_deleted_once(ext, kwargs, error):
    producer = CtypesProducer(raise_in_deleter=False)
    capsule = producer.capsule(np.arange(3), **kwargs)
    with pytest.raises(BufferError, match=error):
        ext.import_ptr(capsule)
    assert len(producer.deleted) == 1
    assert capsule_name(capsule) == "used_dltensor_versioned"


def test_unsupported_major_version_is_left_to_its_producer(ext):
    producer = CtypesProducer(raise_in_deleter=False)
    capsule = producer.capsule(np.arange(3), major=2)
    with pytest.raises(BufferError, match="version"):
        ext.import_ptr(capsule)
    assert producer.deleted == []
    assert capsule_name(capsule) == "dltensor_versioned"


# ---------------------------------------------------------------------------------------
# Broadcast and huge tensors; copies that cannot be allocated.
# ---------------------------------------------------------------------------------------

HUGE = 2**62


def huge_int8():
    return np.broadcast_to(np.full(1, 7, np.int8), (HUGE,))


def test_huge_broadcast_import_shares(ext):
    x = huge_int8()
    assert ext.import_ptr(x) == x.__array_interface__["data"][0]


@pytest.mark.parametrize(
    "make",
    [huge_int8, lambda: torch.full((1,), 7, dtype=torch.int8).expand(HUGE)],
    ids=["numpy", "torch"],
)
def test_copy_of_a_huge_broadcast_is_a_memory_error(ext, make):
    with pytest.raises(MemoryError, match="allocat"):
        ext.roundtrip_owned(make(), "int8")


def test_huge_broadcast_export_copy_is_a_memory_error(ext):
    t = ext.roundtrip(huge_int8())
    for max_version in [None, (1, 3)]:
        with pytest.raises(MemoryError, match="allocat"):
            t.__dlpack__(max_version=max_version, copy=True)
    with pytest.raises(MemoryError):
        np.from_dlpack(t, copy=True)
    # Sharing still works.
    shared = np.from_dlpack(t)
    assert shared.shape == (HUGE,) and shared.strides == (0,)
    assert shared[HUGE - 1] == 7


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.broadcast_to(np.ones(1, bool), (2**40,)),
        lambda: np.broadcast_to(np.ones((1, 3), bool), (2**30, 3)),
        lambda: np.broadcast_to(np.ones(1, bool), (2**20, 2**20)),
        lambda: np.lib.stride_tricks.as_strided(
            np.ones(2**21 - 1, bool), shape=(2**20, 2**20), strides=(1, 1)
        ),
        lambda: torch.ones(1, dtype=torch.bool).expand(2**40),
    ],
    ids=["1d", "one-axis", "2d", "windows", "torch"],
)
def test_bool_views_of_broadcast_memory_return_at_once(ext, make):
    x = make()
    assert ext.bool_len(x) == np.prod(x.shape, dtype=object)


def test_bool_view_of_a_broadcast_bad_byte_is_refused(ext):
    bad = np.array([0, 2], np.uint8).view(bool)
    x = np.broadcast_to(bad, (2**40, 2))
    with pytest.raises(ValueError, match="invalid bool: element 1 holds byte 2"):
        ext.bool_len(x)


def test_bool_view_of_overlapping_windows_is_quick():
    # 2^40 elements over 5 MiB: byte strides (2, 3) do not divide each other. The check
    # used to visit every element (hours); it must visit each byte once.
    child = run_child(
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
    assert child.returncode == 0, child.stdout + child.stderr
    assert "refused" in child.stdout


# ---------------------------------------------------------------------------------------
# One capsule imported from many threads; one object imported twice for writing.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_version", [None, (1, 3)])
def test_concurrent_imports_of_one_capsule(ext, max_version):
    t = ext.make("float32", [3], counted=True)[0]
    capsule = t.__dlpack__(max_version=max_version)
    del t
    threads = 8
    barrier = threading.Barrier(threads)
    results = []

    def consume():
        barrier.wait()
        try:
            results.append(ext.import_ptr(capsule))
        except ValueError as err:
            results.append(err)

    workers = [threading.Thread(target=consume) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    addresses = [r for r in results if isinstance(r, int)]
    errors = [r for r in results if isinstance(r, ValueError)]
    assert len(addresses) == 1 and len(errors) == threads - 1, results
    assert all("already consumed" in str(e) for e in errors)
    del capsule
    assert ext.live_exports() == 0


def test_one_tensor_imported_twice_gives_no_mutable_view(ext):
    t = ext.make("float32", [3], counted=True)[0]
    first, second = ext.two_mutable_views(t)
    assert first.startswith("shared tensor") and second.startswith("shared tensor")
    with pytest.raises(BufferError, match="shared tensor"):
        ext.write_first(t, 5.0)


@pytest.mark.parametrize(
    "make",
    [lambda: np.zeros(3, np.float32), lambda: torch.zeros(3)],
    ids=["numpy", "torch"],
)
def test_foreign_imports_are_shared_unless_copied(ext, make):
    x = make()
    first, second = ext.two_mutable_views(x)
    assert first.startswith("shared tensor") and second.startswith("shared tensor")
    with pytest.raises(BufferError, match="shared tensor"):
        ext.write_first(x, 5.0)
    assert x[0] == 0
    # A copy flagged IS_COPIED is the importer's alone (NumPy flags it; PyTorch does
    # not, and the request alone proves nothing).
    if isinstance(x, np.ndarray):
        copied = ext.write_first(x, 5.0, copy=True)
        assert np.from_dlpack(copied)[0] == 5.0 and x[0] == 0
    else:
        with pytest.raises(BufferError, match="shared tensor"):
            ext.write_first(x, 5.0, copy=True)
    # A caller who knows nothing else uses the data may say so (unsafe in Rust).
    ext.write_first(x, 7.0, assume_exclusive=True)
    assert x[0] == 7.0


def test_a_capsule_flagged_is_copied_is_exclusive(ext):
    x = np.zeros(3, np.float32)
    capsule = x.__dlpack__(max_version=(1, 0), copy=True)
    copied = ext.write_first(capsule, 9.0)
    assert np.from_dlpack(copied)[0] == 9.0 and x[0] == 0
