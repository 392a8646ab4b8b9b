"""NumPy arrays read in place: an import of a NumPy array reads the array's own C struct
instead of calling its ``__dlpack__``, and must give exactly what ``__dlpack__`` gives
(or raise exactly what it raises), keep the array alive, and honour every subclass that
answers ``__dlpack__`` itself. ``ext.read_in_place(a)`` says which path an import took
(a header of ours, or NumPy's)."""

import gc
import sys
import threading
import weakref

import numpy as np
import pytest

from helpers import (
    LAYOUTS,
    NUMPY_DTYPES,
    SHAPES,
    expected,
    np_ptr,
    numpy_layout,
    run_child,
    shape_id,
)

# Run again against the stable-ABI build (tests/README.md).
pytestmark = pytest.mark.protocol

as_strided = np.lib.stride_tricks.as_strided


def through_dunder(a):
    return a.__dlpack__(max_version=(1, 3))


def assert_same_as_dunder(ext, a):
    """What an import of ``a`` finds equals what its ``__dlpack__`` capsule holds (but
    the header's version: NumPy's or ours), and the import leaves no reference behind."""
    refs = sys.getrefcount(a)
    ours = ext.inspect(a)
    theirs = ext.inspect(through_dunder(a))
    assert ours.pop("version")[0] == theirs.pop("version")[0] == 1
    assert ours == theirs
    assert sys.getrefcount(a) == refs
    return ours


def assert_same_error_as_dunder(ext, a):
    """An import of ``a`` raises what NumPy's ``__dlpack__`` raises, word for word."""
    with pytest.raises(Exception) as theirs:
        through_dunder(a)
    with pytest.raises(type(theirs.value)) as ours:
        ext.inspect(a)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_every_dtype_and_layout_is_read_in_place(ext, dtype, shape, layout):
    a = numpy_layout(expected(dtype, shape), layout)
    assert ext.read_in_place(a)
    info = assert_same_as_dunder(ext, a)
    assert info["values"] == a.ravel(order="C").tolist()
    assert info["read_only"] is False and info["copied"] is False
    if a.size:
        assert info["ptr"] == np_ptr(a)


OTHER_LAYOUTS = {
    "transposed": lambda: np.arange(24, dtype=np.float32).reshape(2, 3, 4).transpose(2, 0, 1),
    "broadcast (stride 0, read-only)": lambda: np.broadcast_to(np.arange(4.0), (3, 4)),
    "overlapping windows": lambda: as_strided(np.arange(10.0), shape=(4, 3), strides=(16, 8)),
    # NumPy's own rule: a C-contiguous array, or one of one element, exports whatever
    # stride an axis of extent 1 has (divided, truncated), and so does the read.
    "extent-1 axis with an odd stride": lambda: as_strided(
        np.arange(6, dtype=np.float32), shape=(1, 6), strides=(3, 4)
    ),
    "one element, odd strides": lambda: as_strided(
        np.arange(6, dtype=np.float32), shape=(1, 1), strides=(5, 7)
    ),
    "empty, odd strides": lambda: as_strided(
        np.arange(6, dtype=np.float32), shape=(0, 3), strides=(5, 4)
    ),
    "read-only": lambda: _read_only(np.arange(6, dtype=np.int16).reshape(2, 3)),
    "field of a structured array": lambda: np.zeros(4, dtype=[("x", "<f4"), ("y", "<i4")])["y"],
    "a view of a view": lambda: np.arange(20.0).reshape(4, 5)[1:][:, ::2],
    "memory of a bytearray": lambda: np.frombuffer(bytearray(range(8)), dtype=np.uint8),
}


def _read_only(a):
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("make", OTHER_LAYOUTS.values(), ids=OTHER_LAYOUTS.keys())
def test_other_layouts_are_read_in_place(ext, make):
    a = make()
    assert ext.read_in_place(a)
    info = assert_same_as_dunder(ext, a)
    assert info["read_only"] is not a.flags.writeable
    if a.size:
        assert info["ptr"] == np_ptr(a)


def test_a_view_checks_alignment_as_for_dunder_dlpack(ext):
    # The import reads an unaligned array as `__dlpack__` gives it; the view refuses it
    # in both cases, with the same words.
    a = np.frombuffer(bytearray(17), dtype=np.float32, count=4, offset=1)
    assert ext.read_in_place(a)
    with pytest.raises(BufferError) as ours:
        ext.view_f32(a)
    with pytest.raises(BufferError) as theirs:
        ext.view_f32(through_dunder(a))
    assert str(ours.value) == str(theirs.value)
    assert "aligned" in str(ours.value)


REFUSED = {
    "byte-swapped": lambda: np.arange(4, dtype=">f4"),
    "byte-swapped integers": lambda: np.arange(4, dtype=">i8"),
    "object": lambda: np.array([1, None], dtype=object),
    "structured": lambda: np.zeros(3, dtype=[("x", "f4"), ("y", "i4")]),
    "str": lambda: np.array(["a", "bc"]),
    "bytes": lambda: np.array([b"a", b"bc"]),
    "void": lambda: np.zeros(3, dtype="V4"),
    "datetime64": lambda: np.array(["2026-12-01"], dtype="datetime64[D]"),
    "timedelta64": lambda: np.array([1, 2], dtype="timedelta64[s]"),
    "longdouble": lambda: np.arange(3, dtype=np.longdouble),
    "clongdouble": lambda: np.arange(3, dtype=np.clongdouble),
    "StringDType": lambda: np.array(["a", "bc"], dtype=np.dtypes.StringDType()),
    "strides not a multiple of the item size": lambda: as_strided(
        np.zeros(8, dtype=np.float32), shape=(3,), strides=(6,)
    ),
}


@pytest.mark.parametrize("make", REFUSED.values(), ids=REFUSED.keys())
def test_what_numpy_refuses_is_refused_with_its_words(ext, make):
    a = make()
    if a.dtype == np.longdouble and a.dtype.itemsize == 8 or (
        a.dtype == np.clongdouble and a.dtype.itemsize == 16
    ):
        # Where long double is double, NumPy exports it: so does the import.
        assert not ext.read_in_place(a)
        assert_same_as_dunder(ext, a)
        return
    assert_same_error_as_dunder(ext, a)


def test_typed_arguments_read_numpy_arrays_in_place(ext):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert ext.sum_f32_2d(a) == a.sum()
    assert ext.typed_ptr_f32_2d(a) == np_ptr(a)
    with pytest.raises(TypeError, match=r"expected a DLPack array of float32 with 2 dim"):
        ext.sum_f32_2d(a.astype(np.float64))
    with pytest.raises(BufferError, match="native byte order"):
        ext.sum_f32_2d(a.astype(">f4"))


def test_read_only_arrays_stay_read_only(ext):
    a = _read_only(np.arange(4, dtype=np.float32))
    assert ext.inspect(a)["read_only"] is True
    with pytest.raises(ValueError, match="read-only"):
        ext.write_first(a, 9.0, assume_exclusive=True)
    assert a[0] == 0.0


def test_a_write_through_the_import_lands_in_the_array(ext):
    # Only with the caller's `assume_exclusive`: an import from Python is shared.
    a = np.zeros(4, dtype=np.float32)
    with pytest.raises(BufferError, match="shared"):
        ext.write_first(a, 9.0)
    ext.write_first(a, 9.0, assume_exclusive=True)
    assert a.tolist() == [9.0, 0.0, 0.0, 0.0]


def test_arrays_numpy_made_from_dlpack_keep_their_device(ext):
    # NumPy reports the device of the DLPack tensor an array came from (its base, a
    # capsule): such arrays are imported by `__dlpack__`, which says so.
    b = np.from_dlpack(ext.make_on_device(3, 0))  # kDLCUDAHost, empty
    assert b.__dlpack_device__() == (3, 0)
    assert not ext.read_in_place(b)
    assert ext.inspect(b)["device"] == (3, 0)
    c = np.from_dlpack(ext.make("float32", [6])[0])
    assert not ext.read_in_place(c) and not ext.read_in_place(c[1:])
    assert_same_as_dunder(ext, c[1:])


# Subclasses.


class Plain(np.ndarray):
    pass


class Counting(np.ndarray):
    calls = 0

    def __dlpack__(self, **kwargs):
        type(self).calls += 1
        return super().__dlpack__(**kwargs)


class Substitute(np.ndarray):
    def __dlpack__(self, **kwargs):
        return np.full(3, 7.0).__dlpack__(**kwargs)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_subclasses_that_keep_numpys_dunder_dlpack_are_read_in_place(ext, tmp_path):
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    assert ext.read_in_place(m)
    assert assert_same_as_dunder(ext, m)["ptr"] == np_ptr(m)
    p = np.arange(6.0).view(Plain)
    assert ext.read_in_place(p)
    assert_same_as_dunder(ext, p)
    mm = np.memmap(tmp_path / "a.bin", dtype=np.float32, mode="w+", shape=(3, 4))
    mm[:] = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert ext.read_in_place(mm)
    assert assert_same_as_dunder(ext, mm)["ptr"] == np_ptr(mm)
    mm.flush()
    ro = np.memmap(tmp_path / "a.bin", dtype=np.float32, mode="r", shape=(3, 4))
    assert ext.read_in_place(ro)
    info = assert_same_as_dunder(ext, ro)
    assert info["read_only"] is True and info["values"] == list(range(12))
    del mm, ro, info


def test_a_subclass_with_its_own_dunder_dlpack_is_asked(ext):
    a = np.arange(4.0).view(Counting)
    before = Counting.calls
    assert not ext.read_in_place(a)
    assert ext.inspect(a)["values"] == [0.0, 1.0, 2.0, 3.0]
    assert Counting.calls == before + 2
    s = np.arange(4.0).view(Substitute)
    assert ext.inspect(s)["values"] == [7.0, 7.0, 7.0]


def test_an_instance_attribute_dunder_dlpack_is_honoured(ext):
    a = np.arange(4.0).view(Plain)
    a.__dlpack__ = lambda **kwargs: np.full(2, 5.0).__dlpack__(**kwargs)
    assert ext.inspect(a)["values"] == [5.0, 5.0]
    assert not ext.read_in_place(a)


def test_a_dunder_dlpack_added_to_the_class_later_is_honoured(ext):
    Late = type("Late", (np.ndarray,), {})
    a = np.arange(3.0).view(Late)
    assert ext.read_in_place(a)
    Late.__dlpack__ = lambda self, **kwargs: np.full(1, 8.0).__dlpack__(**kwargs)
    assert ext.inspect(a)["values"] == [8.0]
    del Late.__dlpack__
    assert ext.read_in_place(a)


def test_a_getattribute_that_answers_for_another_array_is_honoured(ext):
    other = np.arange(5.0)

    class Redirect(np.ndarray):
        def __getattribute__(self, name):
            if name == "__dlpack__":
                return other.__dlpack__
            return super().__getattribute__(name)

    a = np.zeros(2).view(Redirect)
    assert ext.inspect(a)["ptr"] == np_ptr(other)
    assert not ext.read_in_place(a)


def test_an_interrupt_while_looking_up_dunder_dlpack_propagates(ext):
    class Interrupting(np.ndarray):
        armed = True

        def __getattribute__(self, name):
            if name == "__dlpack__" and type(self).armed:
                type(self).armed = False
                raise KeyboardInterrupt
            return super().__getattribute__(name)

    a = np.zeros(2).view(Interrupting)
    with pytest.raises(KeyboardInterrupt):
        ext.inspect(a)
    assert ext.inspect(a)["values"] == [0.0, 0.0]


def test_a_subclass_whose_dunder_dlpack_raises_raises(ext):
    class Refusing(np.ndarray):
        def __dlpack__(self, **kwargs):
            raise BufferError("not today")

    with pytest.raises(BufferError, match="not today"):
        ext.inspect(np.zeros(2).view(Refusing))


# Lifetime and threads.


def test_the_import_keeps_the_array_alive_and_then_lets_it_go(ext):
    a = np.arange(1000, dtype=np.float64)
    alive = weakref.ref(a)
    t = ext.roundtrip(a)  # our `Tensor` over the import
    del a
    gc.collect()
    assert alive() is not None
    # Memory freed now would be reused by these.
    junk = [np.full(1000, -1.0) for _ in range(50)]
    assert np.from_dlpack(t).tolist() == list(map(float, range(1000)))
    del t, junk
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("drop", ["drop_on_thread", "drop_detached"])
def test_an_import_dropped_off_the_interpreter_releases_the_array(ext, drop):
    a = np.arange(8.0)
    refs = sys.getrefcount(a)
    getattr(ext, drop)(a)
    assert sys.getrefcount(a) == refs


def test_eight_threads_import_one_array(ext):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    refs = sys.getrefcount(a)
    errors = []
    start = threading.Barrier(8)

    def work():
        try:
            start.wait()
            for _ in range(500):
                assert ext.sum_f32_2d(a) == 66.0
                assert ext.typed_ptr_f32_2d(a) == np_ptr(a)
                assert ext.read_in_place(a)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert sys.getrefcount(a) == refs


def run_python(code):
    """Runs ``code`` in a fresh interpreter (the extension's first import there)."""
    result = run_child(code)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_eight_threads_make_the_first_import_at_once():
    out = run_python(
        """
        import threading
        import numpy as np
        import dlpack_test_ext as ext
        a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
        start = threading.Barrier(8)
        seen = []
        def work():
            start.wait()
            seen.append((ext.read_in_place(a), ext.sum_f32_2d(a)))
        threads = [threading.Thread(target=work) for _ in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print(sorted(seen))
        """
    )
    assert out.strip() == str([(True, 15.0)] * 8)


def test_imports_never_load_numpy():
    out = run_python(
        """
        import sys
        import dlpack_test_ext as ext
        t, _ = ext.make("float32", [3])

        class Producer:
            def __dlpack__(self, **kwargs):
                return t.__dlpack__(**kwargs)

        assert ext.inspect(Producer())["shape"] == [3]
        print("numpy" in sys.modules)
        import numpy as np
        print(ext.read_in_place(np.zeros(2)))
        """
    )
    assert out.split() == ["False", "True"]


# A deleter called without the GIL inside a call into the extension: DLPack lets any
# thread, attached or not, call it, and foreign code (PyTorch freeing a storage in
# `Tensor.set_`, a C consumer through ctypes) does so with the GIL released while a
# Rust function that called back into Python is still on the stack.
RELEASE_WITHOUT_THE_GIL = """
    import ctypes, sys
    import numpy as np
    import dlpack_test_ext as ext

    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    set_name = ctypes.pythonapi.PyCapsule_SetName
    set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
    DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # ctypes releases the GIL

    def consume_without_the_gil(a):
        capsule = ext.roundtrip(a).__dlpack__(max_version=(1, 3))
        managed = get_pointer(capsule, b"dltensor_versioned")
        set_name(capsule, b"used_dltensor_versioned")  # the consumer owns it now
        DELETER(ctypes.c_void_p.from_address(managed + 16).value)(managed)

    a = np.arange(3.0)
    refs = sys.getrefcount(a)
    assert ext.read_in_place(a)
    consume_without_the_gil(a)

    class Producer:
        def __dlpack__(self, **kwargs):
            consume_without_the_gil(a)  # inside ext.inspect's call
            return np.zeros(1).__dlpack__(**kwargs)

    print(ext.inspect(Producer())["values"], sys.getrefcount(a) == refs)
"""


def test_a_deleter_called_without_the_gil_inside_an_extension_call():
    assert run_python(RELEASE_WITHOUT_THE_GIL).split() == ["[0.0]", "True"]


def test_torch_freeing_an_import_without_the_gil_inside_an_extension_call():
    out = run_python(
        """
        import sys
        import numpy as np, torch
        import dlpack_test_ext as ext

        def free_in_torch(a):
            x = torch.from_dlpack(ext.roundtrip(a))
            x.set_(torch.empty(0, dtype=x.dtype))  # frees the storage without the GIL

        a = np.arange(3.0)
        refs = sys.getrefcount(a)

        class Producer:
            def __dlpack__(self, **kwargs):
                free_in_torch(a)
                return np.zeros(1).__dlpack__(**kwargs)

        print(ext.inspect(Producer())["values"], sys.getrefcount(a) == refs)
        """
    )
    assert out.split() == ["[0.0]", "True"]


def test_another_capsule_in_numpys_place_is_not_read():
    # Nameless capsules reachable from Python: NumPy's table of ufuncs (no functions at
    # the places of the array API's) and a Cython vtable of 8 bytes (in another
    # library). The import checks the table before reading or calling it, falls back
    # to `__dlpack__` meanwhile, and reads in place once NumPy's module is back.
    out = run_python(
        """
        import sys, types
        import numpy as np
        import numpy.random._mt19937
        import dlpack_test_ext as ext

        name = "numpy._core._multiarray_umath"
        real = sys.modules[name]
        a = np.arange(3.0)
        for capsule in (real._UFUNC_API, numpy.random._mt19937.MT19937.__pyx_vtable__):
            fake = types.ModuleType("fake")
            fake._ARRAY_API = capsule
            fake.ndarray = np.ndarray
            sys.modules[name] = fake
            print(ext.read_in_place(a), ext.inspect(a)["values"] == [0.0, 1.0, 2.0])
        sys.modules[name] = real
        print(ext.read_in_place(a))
        """
    )
    assert out.split() == ["False", "True", "False", "True", "True"]


def test_an_interrupt_while_looking_numpy_up_propagates():
    out = run_python(
        """
        import sys
        import dlpack_test_ext as ext

        NAME = "numpy._core._multiarray_umath"

        class Key:
            raised = 0

            def __hash__(self):
                return hash(NAME)

            def __eq__(self, other):
                Key.raised += 1
                raise KeyboardInterrupt

        sys.modules[Key()] = None
        t, _ = ext.make("float32", [3])

        class Producer:
            def __dlpack__(self, **kwargs):
                return t.__dlpack__(**kwargs)

        try:
            ext.inspect(Producer())
            print("imported")
        except KeyboardInterrupt:
            print("interrupted", Key.raised)
        """
    )
    assert out.split() == ["interrupted", "1"]
