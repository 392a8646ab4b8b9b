"""Errors: each raises the exception NumPy raises in the same situation (checked side by
side against a NumPy array where NumPy has one), and nothing leaks (the leak check after
every test)."""

import gc

import numpy as np
import pytest
import torch

from helpers import capsule_name

# Run again against the stable-ABI build (tests/README.md).
pytestmark = pytest.mark.protocol


def numpy_float32():
    return np.arange(6, dtype=np.float32).reshape(2, 3)


def rust_float32(ext):
    return ext.make("float32", [2, 3], counted=True)[0]


# ---------------------------------------------------------------------------------------
# Consuming a capsule twice.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_rust_capsule_consumed_twice(ext, max_version):
    t = rust_float32(ext)
    capsule = t.__dlpack__(max_version=max_version)
    ext.inspect(capsule)
    name = capsule_name(capsule)
    assert name.startswith("used_")
    with pytest.raises(ValueError, match="already consumed"):
        ext.inspect(capsule)
    assert capsule_name(capsule) == name
    # PyTorch refuses the consumed capsule too (with RuntimeError), and frees nothing.
    with pytest.raises(RuntimeError, match="consumed only once"):
        torch.utils.dlpack.from_dlpack(capsule)


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_capsule_consumed_by_torch_then_by_rust(ext, max_version):
    t = rust_float32(ext)
    capsule = t.__dlpack__(max_version=max_version)
    x = torch.from_dlpack(capsule)
    with pytest.raises(ValueError, match="already consumed"):
        ext.inspect(capsule)
    del t, capsule
    assert ext.live_exports() == 1  # PyTorch's tensor holds the data
    assert x.sum().item() == -40.5
    del x


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_foreign_capsule_consumed_twice(ext, max_version):
    a = numpy_float32()
    capsule = a.__dlpack__(max_version=max_version)
    ext.inspect(capsule)
    with pytest.raises(ValueError, match="already consumed"):
        ext.inspect(capsule)
    with pytest.raises(RuntimeError):
        torch.from_dlpack(capsule)


def test_unconsumed_capsules_are_freed_by_their_destructor(ext):
    t = rust_float32(ext)
    capsules = [t.__dlpack__(), t.__dlpack__(max_version=(1, 0))]
    del t
    assert ext.live_exports() == 1
    del capsules
    assert ext.live_exports() == 0


# ---------------------------------------------------------------------------------------
# copy=False where a copy is needed; legacy + read-only.
# ---------------------------------------------------------------------------------------


def numpy_read_only():
    a = numpy_float32()
    a.flags.writeable = False
    return a


def test_legacy_read_only_with_copy_false(ext):
    t = ext.make_read_only([2, 3], counted=True)
    with pytest.raises(BufferError) as ours:
        t.__dlpack__(copy=False)
    with pytest.raises(BufferError) as numpys:
        numpy_read_only().__dlpack__(copy=False)
    assert "read-only" in str(ours.value) and "readonly" in str(numpys.value)


def test_legacy_read_only_copies_unless_forbidden(ext):
    # NumPy raises BufferError even with copy=None; the Rust side copies instead (the
    # array API allows a copy when copy is None), so JAX can read read-only tensors.
    t = ext.make_read_only([2, 3], counted=True)
    info = ext.inspect(t.__dlpack__())
    assert info["legacy"] and info["ptr"] != t.data_ptr()
    with pytest.raises(BufferError):
        numpy_read_only().__dlpack__()
    # Both copy when asked to.
    assert ext.inspect(t.__dlpack__(copy=True))["ptr"] != t.data_ptr()
    numpy_read_only().__dlpack__(copy=True)


def test_copy_false_import_of_read_only_legacy(ext):
    t = ext.make_read_only([3], counted=True)

    class LegacyOnly:
        def __dlpack__(self, **kwargs):
            kwargs.pop("max_version", None)
            return t.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return t.__dlpack_device__()

    with pytest.raises(BufferError):
        ext.import_with(LegacyOnly(), copy=False)


# ---------------------------------------------------------------------------------------
# Streams, devices, arguments.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [0, 1, 2, -1])
def test_stream_on_cpu(ext, stream):
    # RuntimeError, as NumPy 2 raises (its producer side kept RuntimeError when its
    # consumer side moved to BufferError); the array API standard names no exception.
    t = rust_float32(ext)
    with pytest.raises(RuntimeError, match="stream=None"):
        t.__dlpack__(stream=stream)
    with pytest.raises((ValueError, RuntimeError), match="stream=None"):
        numpy_float32().__dlpack__(stream=stream)


@pytest.mark.parametrize(
    "device, stream, ok",
    [
        ((2, 0), -1, True),
        ((2, 0), 1, True),
        ((2, 0), 2, True),
        ((2, 0), 0x7F00_0000_1000, True),
        ((2, 0), 0, False),
        ((2, 0), -2, False),
        ((10, 1), 0, True),
        ((10, 1), 0x7F00_0000_1000, True),
        ((10, 1), 1, False),
        ((10, 1), 2, False),
        ((8, 0), -1, False),
        ((8, 0), 3, False),
    ],
)
def test_stream_on_a_device(ext, device, stream, ok):
    # No GPU is needed: the header describes device memory that nothing reads.
    t = ext.make_on_device(*device)
    if ok:
        capsule = t.__dlpack__(stream=stream, max_version=(1, 3))
        assert type(capsule).__name__ == "PyCapsule"
    else:
        with pytest.raises(BufferError, match=f"stream={stream} is not a valid stream"):
            t.__dlpack__(stream=stream, max_version=(1, 3))


@pytest.mark.parametrize("stream", ["1", 1.0, (1,)])
def test_stream_must_be_an_integer(ext, stream):
    t = ext.make_on_device(2, 0)
    with pytest.raises(TypeError, match="stream must be None or an integer"):
        t.__dlpack__(stream=stream)


@pytest.mark.parametrize("dl_device", [(2, 0), (1, 1), (4, 0), (13, 0)])
def test_unsupported_dl_device(ext, dl_device):
    t = rust_float32(ext)
    for max_version in (None, (1, 0)):
        with pytest.raises(BufferError, match="unsupported device"):
            t.__dlpack__(max_version=max_version, dl_device=dl_device)
        with pytest.raises(BufferError, match="unsupported device"):
            numpy_float32().__dlpack__(max_version=max_version, dl_device=dl_device)


def test_tensor_on_a_device_the_cpu_cannot_reach(ext):
    t = ext.make_on_device(2, 0)  # an (empty) CUDA tensor
    assert t.__dlpack_device__() == (2, 0) and t.device == "cuda:0"
    # Exporting it as it is works: no copy is needed.
    capsule = t.__dlpack__(max_version=(1, 0))
    assert capsule_name(capsule) == "dltensor_versioned"
    # It cannot be moved to the CPU, nor copied.
    with pytest.raises(BufferError, match="unsupported device"):
        t.__dlpack__(dl_device=(1, 0))
    with pytest.raises(BufferError, match="cannot copy"):
        t.__dlpack__(copy=True)
    # Views of it are refused in Rust (as NumPy refuses it: RuntimeError before 2.5).
    with pytest.raises(BufferError, match="device"):
        ext.view_f32(capsule)
    with pytest.raises((BufferError, RuntimeError), match="(?i)device"):
        np.from_dlpack(t)


def test_bad_max_version(ext):
    t = rust_float32(ext)
    for bad in ([1, 0], (1,), "1.0"):
        with pytest.raises(TypeError):
            t.__dlpack__(max_version=bad)
        with pytest.raises(TypeError):
            numpy_float32().__dlpack__(max_version=bad)


def test_positional_arguments(ext):
    t = rust_float32(ext)
    with pytest.raises(TypeError):
        t.__dlpack__(None)
    with pytest.raises(TypeError):
        numpy_float32().__dlpack__(None)


# ---------------------------------------------------------------------------------------
# Element types.
# ---------------------------------------------------------------------------------------


def test_unsupported_dtype_export(ext):
    f8 = ext.make_float8(4)
    assert f8.dtype == "float8_e4m3fn"
    # Shared exports work (PyTorch understands float8) ...
    x = torch.from_dlpack(f8)
    assert x.dtype == torch.float8_e4m3fn and x.float().tolist() == [1.0] * 4
    # ... and so do copies of a type Rust has no element for: its bytes, copied.
    class Copy:
        def __dlpack__(self, **kwargs):
            return f8.__dlpack__(**{**kwargs, "copy": True})

        def __dlpack_device__(self):
            return f8.__dlpack_device__()

    y = torch.from_dlpack(Copy())
    assert y.dtype == torch.float8_e4m3fn and y.float().tolist() == [1.0] * 4
    assert y.data_ptr() != x.data_ptr()
    with pytest.raises(BufferError):
        np.zeros(3, np.longdouble).__dlpack__()


def test_unsupported_dtype_import(ext):
    f8 = ext.make_float8(4)
    with pytest.raises(BufferError, match="unsupported dtype"):
        ext.inspect(f8)
    # NumPy: BufferError from 2.5, RuntimeError before.
    with pytest.raises((BufferError, RuntimeError), match="(?i)unsupported dtype"):
        np.from_dlpack(f8)
    # Importing into a typed Rust array: a type NumPy and PyTorch don't exchange is a
    # BufferError, a mismatch between two exchangeable types a TypeError.
    with pytest.raises(BufferError, match="dtype"):
        ext.roundtrip_owned(torch.zeros(3, dtype=torch.float8_e5m2), "float32")
    with pytest.raises(TypeError, match="dtype mismatch"):
        ext.roundtrip_owned(np.zeros(3, np.float64), "float32")


def test_bfloat16_to_numpy(ext):
    t = ext.make("bfloat16", [3], counted=True)[0]
    with pytest.raises((BufferError, RuntimeError), match="(?i)unsupported dtype"):
        np.from_dlpack(t)


# ---------------------------------------------------------------------------------------
# Capsules and objects that are not DLPack tensors.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("major", [0, 2, 99])
def test_unsupported_major_version(ext, major):
    capsule = ext.capsule_with_major(major)
    assert ext.live_exports() == 1
    with pytest.raises(BufferError, match=f"version {major}"):
        ext.inspect(capsule)
    # Not consumed: the producer's destructor frees it (nobody called the deleter yet).
    assert capsule_name(capsule) == "dltensor_versioned"
    assert ext.live_exports() == 1
    del capsule
    gc.collect()
    assert ext.live_exports() == 0


def test_other_capsules(ext):
    with pytest.raises(TypeError, match="not_a_tensor"):
        ext.inspect(ext.foreign_capsule())


def test_objects_without_dlpack(ext):
    for obj in (object(), [1, 2, 3], 3.0, None):
        with pytest.raises(TypeError, match="__dlpack__"):
            ext.inspect(obj)
    # NumPy raises AttributeError for the same (the array API's from_dlpack does).
    with pytest.raises(AttributeError):
        np.from_dlpack(object())


def test_dlpack_returning_garbage(ext):
    class Liar:
        def __dlpack__(self, **kwargs):
            return "not a capsule"

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(TypeError, match="not a capsule"):
        ext.inspect(Liar())


def test_producer_errors_propagate(ext):
    class Failing:
        def __dlpack__(self, **kwargs):
            raise BufferError("cannot export")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(BufferError, match="cannot export"):
        ext.inspect(Failing())


def test_batch_errors_name_the_tensor(ext):
    with pytest.raises(TypeError) as err:
        ext.load_batch({"good": np.zeros(2), "bad": object()})
    assert "bad" in "".join(getattr(err.value, "__notes__", []))
    with pytest.raises(TypeError):
        ext.load_batch({1: np.zeros(2)})  # names must be strings


def test_batch_import_error_names_the_tensor(ext):
    import sys

    with pytest.raises(TypeError, match="__dlpack__") as err:
        ext.load_batch({"good": np.zeros(3), "bad": object()})
    if sys.version_info >= (3, 11):  # exceptions have notes from 3.11 on
        assert "while importing tensor 'bad'" in err.value.__notes__
