"""The ``__dlpack__`` protocol of Rust tensors: capsule kinds, versions, flags, copies,
devices, attributes."""

import numpy as np
import pytest
import torch

from helpers import capsule_name, expected, np_ptr

# Run again against the stable-ABI build (tests/README.md).
pytestmark = pytest.mark.protocol


def sliced(ext):
    # Not a fixture: pytest keeps fixture values alive until after the leak check.
    return ext.make("float32", [2, 3], "sliced", counted=True)


def test_attributes(ext):
    t, ptr = sliced(ext)
    assert t.shape == (2, 3)
    assert t.strides == (5, 1)
    assert t.ndim == 2
    assert t.dtype == "float32"
    assert t.device == "cpu:0"
    assert t.read_only is False
    assert t.data_ptr() == ptr
    assert t.__dlpack_device__() == (1, 0)
    assert repr(t) == "Tensor(shape=(2, 3), dtype=float32, device=cpu:0)"
    # Named after the extension that adds it (test_surface.py checks the rest).
    assert type(t).__module__.split(".")[0] == "dlpack_test_ext"
    assert type(t).__name__ == "Tensor"


def test_repr_of_vector_and_scalar(ext):
    assert repr(ext.make("int8", [4])[0]).startswith("Tensor(shape=(4,), dtype=int8")
    assert repr(ext.make("bool", [])[0]).startswith("Tensor(shape=(), dtype=bool")


@pytest.mark.parametrize(
    "max_version, name",
    [
        (None, "dltensor"),
        ((0, 8), "dltensor"),
        ((1, 0), "dltensor_versioned"),
        ((1, 3), "dltensor_versioned"),
        ((1, 99), "dltensor_versioned"),
        ((2, 0), "dltensor_versioned"),
    ],
)
def test_capsule_kind_follows_max_version(ext, max_version, name):
    t, ptr = sliced(ext)
    capsule = t.__dlpack__(max_version=max_version)
    assert capsule_name(capsule) == name
    info = ext.inspect(capsule)
    assert info["legacy"] is (name == "dltensor")
    assert info["version"] == (None if name == "dltensor" else (1, 3))
    assert info["ptr"] == ptr and info["copied"] is False
    assert info["values"] == expected("float32", (2, 3)).ravel().tolist()
    assert capsule_name(capsule) == "used_" + name


def test_exported_any_number_of_times(ext):
    t, ptr = sliced(ext)
    arrays = [np.from_dlpack(t) for _ in range(10)]
    capsules = [t.__dlpack__(max_version=(1, 0)) for _ in range(10)]
    del t  # every capsule and every array keeps the data alive on its own
    assert ext.live_exports() == 1
    assert all(np_ptr(a) == ptr for a in arrays)
    del arrays
    assert ext.live_exports() == 1
    assert [ext.inspect(c)["ptr"] for c in capsules[:5]] == [ptr] * 5
    del capsules  # five consumed, five never consumed: all freed
    assert ext.live_exports() == 0


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_copy_true_copies(ext, max_version):
    t, ptr = sliced(ext)
    info = ext.inspect(t.__dlpack__(max_version=max_version, copy=True))
    assert info["ptr"] != ptr
    assert info["values"] == expected("float32", (2, 3)).ravel().tolist()
    assert info["strides"] == [3, 1]  # a fresh C-order buffer
    # IS_COPIED where the capsule can carry flags.
    assert info["copied"] is (max_version is not None)


def test_copy_false_and_none_share(ext):
    t, ptr = sliced(ext)
    for copy in (False, None):
        for max_version in (None, (1, 0)):
            info = ext.inspect(t.__dlpack__(max_version=max_version, copy=copy))
            assert info["ptr"] == ptr and info["copied"] is False


def test_consumers_forward_copy(ext):
    t, ptr = sliced(ext)
    a = np.from_dlpack(t, copy=True)
    assert np_ptr(a) != ptr
    np.testing.assert_array_equal(a, expected("float32", (2, 3)))
    assert np_ptr(np.from_dlpack(t, copy=False)) == ptr
    assert torch.from_dlpack(t, copy=True).data_ptr() != ptr


def test_shared_export_clears_is_copied(ext):
    # A tensor flagged IS_COPIED (here: a copy made by a first export) is shared by every
    # later export of the same object, so those must not claim sole ownership.
    t, _ = ext.make("int32", [3], counted=True)
    copied = ext.roundtrip(t.__dlpack__(max_version=(1, 0), copy=True))
    assert ext.inspect(copied.__dlpack__(max_version=(1, 0)))["copied"] is False


def test_read_only(ext):
    t = ext.make_read_only([2, 3], counted=True)
    assert t.read_only and "read_only=True" in repr(t)
    a = np.from_dlpack(t)  # NumPy asks for a versioned capsule: the flag arrives
    assert not a.flags.writeable
    assert np_ptr(a) == t.data_ptr()
    info = ext.inspect(t.__dlpack__(max_version=(1, 0)))
    assert info["read_only"] is True and info["ptr"] == t.data_ptr()
    # A legacy capsule cannot say "read-only": with copy=None the Rust side copies.
    info = ext.inspect(t.__dlpack__())
    assert info["legacy"] is True and info["ptr"] != t.data_ptr()
    assert info["values"] == expected("float32", (2, 3)).ravel().tolist()


@pytest.mark.parametrize("dl_device", [None, (1, 0)])
def test_cpu_dl_device(ext, dl_device):
    t, ptr = sliced(ext)
    info = ext.inspect(t.__dlpack__(max_version=(1, 0), dl_device=dl_device))
    assert info["device"] == (1, 0) and info["ptr"] == ptr


def test_numpy_device_argument(ext):
    t, ptr = sliced(ext)
    assert np_ptr(np.from_dlpack(t, device="cpu")) == ptr


def test_cpu_accessible_device(ext):
    # Pinned host memory (kDLCUDAHost) is CPU memory: exported as it is, or as (1, 0)
    # when the consumer asks for the CPU.
    t = ext.make_on_device(3, 0)
    assert t.__dlpack_device__() == (3, 0) and t.device == "cuda_host:0"
    assert ext.inspect(t.__dlpack__(max_version=(1, 0)))["device"] == (3, 0)
    info = ext.inspect(t.__dlpack__(max_version=(1, 0), dl_device=(1, 0)))
    assert info["device"] == (1, 0) and info["shape"] == [0]
    assert np.from_dlpack(t, device="cpu").shape == (0,)
    # A copy lives in ordinary host memory.
    info = ext.inspect(t.__dlpack__(max_version=(1, 0), copy=True))
    assert info["device"] == (1, 0) and info["copied"] is True
    with pytest.raises(BufferError, match="unsupported device"):
        t.__dlpack__(copy=True, dl_device=(3, 0))


def test_python_to_rust_copy_request(ext):
    a = np.arange(6.0).reshape(2, 3)
    info = ext.import_with(a, copy=True)
    assert info["ptr"] != np_ptr(a) and info["copied"] is True
    assert info["values"] == a.ravel().tolist()
    assert ext.import_with(a, copy=False)["ptr"] == np_ptr(a)
    assert ext.import_with(a)["ptr"] == np_ptr(a)


def test_old_producer_without_max_version(ext):
    # A producer from before DLPack 1.0: `__dlpack__` takes no keywords.
    calls = []

    class Old:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            calls.append(stream)
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return (1, 0)

    a = np.arange(4, dtype=np.int16)
    info = ext.inspect(Old(a))
    assert info["legacy"] is True and info["ptr"] == np_ptr(a)
    assert info["values"] == [0, 1, 2, 3] and calls == [None]
    # With an explicit copy request there is no silent retry without keywords.
    with pytest.raises(TypeError):
        ext.import_with(Old(a), copy=True)


def test_raw_capsules_are_accepted(ext):
    a = np.arange(3.0)
    assert ext.inspect(a.__dlpack__())["legacy"] is True
    assert ext.inspect(a.__dlpack__(max_version=(1, 0)))["legacy"] is False
    x = torch.arange(3)
    assert ext.inspect(torch.utils.dlpack.to_dlpack(x))["ptr"] == x.data_ptr()


def test_batch_from_any_mapping(ext):
    import collections.abc

    class Mapping(collections.abc.Mapping):
        def __init__(self, d):
            self.d = d

        def __getitem__(self, k):
            return self.d[k]

        def __iter__(self):
            return iter(self.d)

        def __len__(self):
            return len(self.d)

    a, b = np.zeros((2, 2), np.float32), torch.ones(3, dtype=torch.int64)
    got = ext.load_batch(Mapping({"a": a, "b": b, "c": a.__dlpack__()}))
    assert got == [
        ("a", "float32", [2, 2], np_ptr(a)),
        ("b", "int64", [3], b.data_ptr()),
        ("c", "float32", [2, 2], np_ptr(a)),
    ]
    back = ext.roundtrip_batch({"x": a})
    assert isinstance(back, dict) and np_ptr(np.from_dlpack(back["x"])) == np_ptr(a)


# ---------------------------------------------------------------------------------------
# How `__dlpack__` takes its arguments (a hand-written vectorcall method).
# ---------------------------------------------------------------------------------------


def test_dlpack_is_a_method_with_a_signature(ext):
    import inspect

    t, _ = sliced(ext)
    method = type(t).__dict__["__dlpack__"]
    assert type(method).__name__ == "method_descriptor"
    params = inspect.signature(t.__dlpack__).parameters
    assert list(params) == ["stream", "max_version", "dl_device", "copy"]
    assert all(p.kind is p.KEYWORD_ONLY and p.default is None for p in params.values())
    assert "DLPack capsule" in t.__dlpack__.__doc__
    # The unbound method checks its `self`, as CPython's own methods do.
    with pytest.raises(TypeError):
        type(t).__dlpack__(np.zeros(3))
    assert capsule_name(type(t).__dlpack__(t)) == "dltensor"


def test_keywords_in_any_form(ext):
    t, ptr = sliced(ext)
    # Names that are not interned (built at run time) are found by their text.
    name = "".join(["max_", "version"])
    assert capsule_name(t.__dlpack__(**{name: (1, 0)})) == "dltensor_versioned"
    # Keywords through a dict, in any order, all of them.
    kwargs = {"copy": None, "dl_device": (1, 0), "max_version": (1, 3), "stream": None}
    capsule = t.__dlpack__(**kwargs)
    assert capsule_name(capsule) == "dltensor_versioned"
    assert ext.inspect(capsule)["ptr"] == ptr
    # Integer-like versions (NumPy integers) are integers; bools are ints in Python.
    assert capsule_name(t.__dlpack__(max_version=(np.int64(1), np.int8(2)))) == (
        "dltensor_versioned"
    )
    assert capsule_name(t.__dlpack__(max_version=(0, np.uint16(9)))) == "dltensor"
    # NumPy's bool is a bool.
    capsule = t.__dlpack__(max_version=(1, 0), copy=np.bool_(True))
    assert ext.inspect(capsule)["copied"] is True


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"device": None}, "unexpected keyword argument 'device'"),
        ({"max_version": (1, "0")}, "two integers"),
        ({"max_version": (1.0, 0)}, "two integers"),
        ({"max_version": (1, 0, 0)}, "two integers, got tuple"),
        ({"dl_device": [1, 0]}, "two integers, got list"),
        ({"dl_device": (1, 2**40)}, "two integers"),
        ({"copy": 1}, "copy must be None or a bool, got int"),
        ({"copy": "yes"}, "copy must be None or a bool, got str"),
    ],
)
def test_bad_keywords_are_type_errors(ext, kwargs, match):
    t, _ = sliced(ext)
    with pytest.raises(TypeError, match=match):
        t.__dlpack__(**kwargs)


def test_positional_arguments_are_refused(ext):
    t, _ = sliced(ext)
    with pytest.raises(TypeError, match="positional"):
        t.__dlpack__(None)
    with pytest.raises(TypeError, match="positional"):
        t.__dlpack__(None, max_version=(1, 0))


def test_exception_in_flight_survives_a_dying_capsule(ext):
    # NumPy drops the capsule of a dtype it cannot take while its exception is set: the
    # capsule's destructor frees the tensor and leaves that exception as it was.
    t, _ = ext.make("bfloat16", [3], counted=True)
    with pytest.raises(RuntimeError, match="Unsupported dtype"):
        np.from_dlpack(t)
    # The capsule let go of the tensor: only `t` keeps it alive now.
    assert ext.live_exports() == 1
    del t
    assert ext.live_exports() == 0
