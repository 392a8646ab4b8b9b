"""bfloat16 and float8 arrays in NumPy, through `ml_dtypes`: NumPy 2.5 lets a dtype package
register the DLPack types it exchanges (`np.dtypes.register_dlpack_dtype`), and
`ml_dtypes` 0.7 registers bfloat16 and its float8 types when imported. The crate registers
nothing: it exports these types as DLPack defines them, and reads NumPy's arrays of them
in place once NumPy's own export has said which DLPack type the array's (user) type
number is.

`scripts/test-python --numpy25` runs this file in a Python 3.12 venv of NumPy 2.5,
`ml_dtypes` and JAX (scripts/requirements/numpy25.txt), with `DLPACK_NUMPY25=1`, so that
the tests below that need NumPy 2.5 fail there rather than skip; the main run (NumPy 2.4)
checks the refusals that name what to install (test_messages.py)."""

import json
import os
import struct

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from helpers import expected, np_ptr

NUMPY25 = np.lib.NumpyVersion(np.__version__) >= "2.5.0"
if os.environ.get("DLPACK_NUMPY25") == "1":
    assert NUMPY25, f"this run is for NumPy 2.5 and later, found {np.__version__}"
needs_numpy25 = pytest.mark.skipif(
    not NUMPY25, reason="NumPy exchanges ml_dtypes' types through DLPack from 2.5 (run by --numpy25)"
)


@needs_numpy25
def test_a_bfloat16_export_is_an_ml_dtypes_array_without_a_copy(ext):
    t, ptr = ext.make("bfloat16", [3, 4], counted=True)
    a = np.from_dlpack(t)
    assert a.dtype == np.dtype(ml_dtypes.bfloat16)
    assert np_ptr(a) == ptr == t.data_ptr()
    assert np.array_equal(a.astype(np.float32), expected("bfloat16", (3, 4)))
    # np.asarray goes through the same import (the tensor's __array__).
    b = np.asarray(t)
    assert b.dtype == a.dtype and np_ptr(b) == ptr


@needs_numpy25
@pytest.mark.parametrize(
    "kind, dtype", [("e4m3fn", ml_dtypes.float8_e4m3fn), ("e5m2", ml_dtypes.float8_e5m2)]
)
def test_a_float8_export_is_an_ml_dtypes_array_without_a_copy(ext, kind, dtype):
    t = ext.make_float8(4, kind)
    a = np.from_dlpack(t)
    assert a.dtype == np.dtype(dtype)
    assert np_ptr(a) == t.data_ptr()
    assert a.astype(np.float32).tolist() == [1.0] * 4


@needs_numpy25
def test_an_ml_dtypes_bfloat16_array_is_a_typed_argument_without_a_copy(ext):
    a = (np.arange(6, dtype=np.float32) - 2.5).astype(ml_dtypes.bfloat16)
    # The first array of a user type goes through NumPy's __dlpack__, which says what
    # DLPack type the type number is; the next ones are read in place, the same way.
    for _ in range(3):
        ptr, values = ext.typed_bf16_1d(a)
        assert ptr == np_ptr(a)
        assert values == a.astype(np.float32).tolist()
    assert ext.read_in_place(a), "after the first, read in place (NumPy's fast path)"
    assert ext.read_in_place(np.zeros((2, 3), ml_dtypes.bfloat16)[:, ::2])
    # Views and read-only arrays follow NumPy's export too.
    view = a[1::2]
    ptr, values = ext.typed_bf16_1d(view)
    assert ptr == np_ptr(view) and values == view.astype(np.float32).tolist()
    a.flags.writeable = False
    assert ext.typed_bf16_1d(a)[0] == np_ptr(a)


@needs_numpy25
def test_another_user_type_is_not_taken_for_bfloat16(ext):
    # float16's size, another type: a dtype mismatch, never a reinterpretation.
    f8 = np.ones(4, ml_dtypes.float8_e4m3fn)
    with pytest.raises((TypeError, BufferError), match="dtype"):
        ext.typed_bf16_1d(f8)
    with pytest.raises((TypeError, BufferError), match="dtype"):
        ext.typed_bf16_1d(np.ones(4, np.float16))


@needs_numpy25
def test_a_type_nothing_registered_names_the_registration(ext):
    # ml_dtypes registers bfloat16 and its float8 types, not int4.
    a = np.zeros(4, ml_dtypes.int4)
    with pytest.raises(BufferError) as info:
        ext.typed_bf16_1d(a)
    assert str(info.value).endswith(
        ": NumPy exchanges int4 through DLPack only once a package registers the type "
        "(np.dtypes.register_dlpack_dtype): ml_dtypes 0.7 or later registers bfloat16 "
        "and the float8 types when imported"
    )


@needs_numpy25
def test_a_jax_bfloat16_array_is_a_typed_argument_without_a_copy(ext):
    x = jnp.arange(8, dtype=jnp.bfloat16)
    ptr, values = ext.typed_bf16_1d(x)
    assert ptr == x.unsafe_buffer_pointer()
    assert values == [float(v) for v in range(8)]
    # And NumPy and JAX exchange the same memory as bfloat16.
    a = np.from_dlpack(x)
    assert a.dtype == np.dtype(ml_dtypes.bfloat16) and np_ptr(a) == ptr


def write_bf16_file(path, tensors):
    """A safetensors file of bfloat16 tensors (NumPy arrays of ml_dtypes.bfloat16),
    its header padded so that the data starts on a 64-byte boundary: JAX imports host
    memory without a copy only when it is 64-byte aligned (a page-aligned mapping plus
    the data's offset)."""
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        blob = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 64)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


@needs_numpy25
def test_a_mapped_bfloat16_checkpoint_reaches_numpy_and_jax_without_a_copy(ext, tmp_path):
    w = (np.arange(64 * 48, dtype=np.float32).reshape(64, 48) / 7).astype(ml_dtypes.bfloat16)
    path = tmp_path / "model.safetensors"
    write_bf16_file(path, {"w": w})
    loaded, _ = ext.map_safetensors(path)
    t = loaded["w"]
    assert t.dtype == "bfloat16"
    a = np.from_dlpack(t)
    assert a.dtype == np.dtype(ml_dtypes.bfloat16)
    assert np_ptr(a) == t.data_ptr()
    assert np.array_equal(a.view(np.uint16), w.view(np.uint16)), "bit for bit"
    j = jax.dlpack.from_dlpack(t)
    assert j.dtype == jnp.bfloat16
    assert j.unsafe_buffer_pointer() == t.data_ptr()
    del a, j, t, loaded
