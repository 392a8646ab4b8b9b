"""Arrow columns as tensors, against the real libraries: pyarrow arrays, chunked arrays,
tables and record batches, Polars Series and DataFrames, Hugging Face `datasets`
batches and a Ray Data pipeline reach Rust through Arrow's PyCapsule interface without
a copy (proven by the Arrow buffers' own addresses), tensors go back as Arrow arrays
without a copy, and every column a tensor cannot be is refused with the fix."""

import gc
import os

import numpy as np
import pyarrow as pa
import pytest

# Capsules, imports and errors: run again against the stable-ABI build.
pytestmark = pytest.mark.protocol

NUMERIC = [
    (pa.int8(), np.int8),
    (pa.int16(), np.int16),
    (pa.int32(), np.int32),
    (pa.int64(), np.int64),
    (pa.uint8(), np.uint8),
    (pa.uint16(), np.uint16),
    (pa.uint32(), np.uint32),
    (pa.uint64(), np.uint64),
    (pa.float16(), np.float16),
    (pa.float32(), np.float32),
    (pa.float64(), np.float64),
]


def values_address(array, itemsize):
    """Where the first element of a primitive array lies: its values buffer's address
    plus its offset."""
    return array.buffers()[1].address + array.offset * itemsize


def first_element_address(array):
    """The address of the first element a (nested) fixed-size list or primitive array
    reaches: the leaf values buffer, plus every level's offset scaled to items."""
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    index = 0
    while pa.types.is_fixed_size_list(array.type):
        index = (index + array.offset) * array.type.list_size
        # `.values` is the whole child (its own offset kept), not the parent's slice.
        array = array.values
    width = array.type.bit_width // 8
    return array.buffers()[1].address + (array.offset + index) * width


@pytest.mark.parametrize("arrow_type,dtype", NUMERIC, ids=lambda t: str(t))
def test_a_primitive_array_of_every_numeric_type_is_read_in_place(ext, arrow_type, dtype):
    array = pa.array(np.arange(12).astype(dtype), type=arrow_type)
    info = ext.inspect(array)
    assert info["ptr"] == values_address(array, np.dtype(dtype).itemsize)
    assert info["shape"] == [12]
    assert info["dtype"] == str(np.dtype(dtype))
    assert info["read_only"]
    assert info["values"] == list(np.arange(12).astype(dtype).tolist())


def test_a_sliced_array_keeps_its_offset(ext):
    array = pa.array(np.arange(20, dtype=np.float32)).slice(5, 7)
    info = ext.inspect(array)
    assert info["ptr"] == values_address(array, 4)
    assert info["values"] == list(range(5, 12))


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_nested_fixed_size_lists_are_n_d_tensors_read_in_place(ext, depth):
    shape = (6, 2, 3, 4)[: depth + 1]
    flat = np.arange(np.prod(shape), dtype=np.float32)
    array = pa.array(flat)
    for size in reversed(shape[1:]):
        array = pa.FixedSizeListArray.from_arrays(array, size)
    info = ext.inspect(array)
    assert info["shape"] == list(shape)
    assert info["ptr"] == first_element_address(array)
    assert info["values"] == flat.tolist()


def test_slices_at_every_level_are_honoured(ext):
    inner = pa.array(np.arange(200, dtype=np.float32)).slice(4)  # offset in the leaf
    middle = pa.FixedSizeListArray.from_arrays(inner, 4).slice(1)  # in the middle
    outer = pa.FixedSizeListArray.from_arrays(middle, 2).slice(3, 5)  # at the top
    expected = np.asarray(outer.flatten().flatten())
    info = ext.inspect(outer)
    assert info["shape"] == [5, 2, 4]
    assert info["ptr"] == first_element_address(outer)
    assert info["values"] == expected.tolist()


def test_a_fixed_size_list_column_is_a_typed_argument(ext):
    embeddings = np.random.default_rng(0).random((8, 16), dtype=np.float32)
    column = pa.FixedSizeListArray.from_arrays(pa.array(embeddings.ravel()), 16)
    ptr, shape = ext.typed_f32_2d(column)
    assert (ptr, shape) == (first_element_address(column), [8, 16])
    assert np.allclose(np.asarray(ext.row_norms(column)), np.linalg.norm(embeddings, axis=1))


def test_a_fixed_shape_tensor_column_is_read_in_place_with_its_permutation(ext):
    data = np.arange(4 * 2 * 3, dtype=np.float32).reshape(4, 2, 3)
    array = pa.FixedShapeTensorArray.from_numpy_ndarray(data)
    info = ext.inspect(array)
    assert info["shape"] == [4, 2, 3]
    assert info["values"] == data.ravel().tolist()
    assert info["ptr"] == first_element_address(array.storage)
    # A permuted cell: the storage holds each cell's axes in the permutation's order.
    kind = pa.fixed_shape_tensor(pa.float32(), (2, 3), permutation=[1, 0])
    storage = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(24, dtype=np.float32)), 6)
    permuted = pa.ExtensionArray.from_storage(kind, storage)
    info = ext.inspect(permuted)
    assert info["shape"] == [4, 2, 3]
    assert info["strides"] == [6, 1, 2]
    assert info["ptr"] == first_element_address(storage)


def test_a_chunked_array_of_one_chunk_is_read_and_of_several_refused(ext):
    chunk = pa.array(np.arange(6, dtype=np.float64))
    assert ext.import_ptr(pa.chunked_array([chunk])) == values_address(chunk, 8)
    with pytest.raises(ValueError, match=r"more than one chunk.*combine_chunks"):
        ext.import_ptr(pa.chunked_array([chunk, chunk]))


def test_an_endless_stream_is_refused_at_its_second_chunk(ext):
    batch = pa.record_batch({"x": pa.array(np.arange(4, dtype=np.float32))})
    pulled = []

    def batches():
        while True:
            pulled.append(1)
            yield batch

    endless = pa.RecordBatchReader.from_batches(batch.schema, batches())
    with pytest.raises(ValueError, match="more than one chunk"):
        ext.load_batch(endless)
    assert len(pulled) <= 3


@pytest.mark.parametrize(
    "column,words",
    [
        (pa.array([1.0, None, 3.0]), "null"),
        (pa.array(["a", "b"]), "strings"),
        (pa.array([True, False]), "uint8"),
        (pa.array([[1.0], [2.0, 3.0]]), "fixed-size list"),
        (pa.array(["a", "b"]).dictionary_encode(), "decode"),
        (pa.array([1, 2], type=pa.decimal128(5, 2)), "cast"),
        (pa.array([1, 2], type=pa.timestamp("s")), "cast"),
    ],
    ids=["nulls", "strings", "booleans", "lists", "dictionary", "decimal", "timestamps"],
)
def test_columns_that_are_not_tensors_are_refused_with_the_fix(ext, column, words):
    with pytest.raises((TypeError, ValueError), match=words):
        ext.import_ptr(column)


def test_nulls_inside_a_fixed_size_list_are_refused_at_both_levels(ext):
    items = pa.array([1.0, None, 3.0, 4.0], type=pa.float32())
    with pytest.raises(ValueError, match="null"):
        ext.import_ptr(pa.FixedSizeListArray.from_arrays(items, 2))
    rows = pa.array([[1.0, 2.0], None], type=pa.list_(pa.float32(), 2))
    with pytest.raises(ValueError, match="null"):
        ext.import_ptr(rows)


def test_a_validity_buffer_without_nulls_is_fine(ext):
    array = pa.array([1.0, 2.0, None], type=pa.float32()).slice(0, 2)
    assert array.buffers()[0] is not None and array.null_count == 0
    assert ext.inspect(array)["values"] == [1.0, 2.0]


def test_a_table_is_a_batch_and_a_derived_struct(ext):
    rng = np.random.default_rng(1)
    x = rng.random((10, 4), dtype=np.float32)
    x_col = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 4)
    y_col = pa.array(np.arange(10, dtype=np.int64))
    table = pa.table({"x": x_col, "y": y_col})
    loaded = {name: (dtype, shape, ptr) for name, dtype, shape, ptr in ext.load_batch(table)}
    assert loaded["x"] == ("float32", [10, 4], first_element_address(x_col))
    assert loaded["y"] == ("int64", [10], values_address(y_col, 8))
    assert ext.rows_from_table(table) == (
        first_element_address(x_col),
        values_address(y_col, 8),
        [10, 4],
    )
    # A record batch speaks `__arrow_c_array__`: the same.
    assert ext.rows_from_table(table.to_batches()[0])[:2] == ext.rows_from_table(table)[:2]


def test_an_ipc_file_written_by_pyarrow_is_a_derived_struct(ext, tmp_path):
    x = np.random.default_rng(5).random((6, 4), dtype=np.float32)
    table = pa.table({
        "x": pa.FixedShapeTensorArray.from_numpy_ndarray(x),
        "y": pa.array(np.arange(6, dtype=np.int64)),
    })
    path = tmp_path / "rows.arrow"
    with pa.ipc.new_file(path, table.schema) as writer:
        writer.write_table(table)
    shape, values, labels = ext.rows_from_ipc(path)
    assert shape == [6, 4]
    assert values == x.ravel().tolist()
    assert labels == list(range(6))
    with pa.ipc.new_file(path, table.schema) as writer:
        writer.write_table(table)
        writer.write_table(table)
    with pytest.raises(ValueError, match="2 record batches"):
        ext.rows_from_ipc(path)


def test_a_table_where_one_tensor_is_expected_names_the_fix(ext):
    table = pa.table({"a": [1.0], "b": [2.0]})
    with pytest.raises(TypeError, match=r"table of 2 columns \(a, b\).*table\['name'\]"):
        ext.import_ptr(table)
    with pytest.raises(TypeError, match="one column"):
        ext.load_batch(pa.array([1.0]))


def test_a_string_column_in_a_table_is_named(ext):
    table = pa.table({"text": ["a"], "x": [1.0]})
    with pytest.raises(TypeError, match="column 'text'"):
        ext.load_batch(table)


def test_polars_series_and_dataframes(ext):
    pl = pytest.importorskip("polars")
    series = pl.Series("a", np.arange(10, dtype=np.float32))
    address = series.to_arrow().buffers()[1].address
    assert ext.import_ptr(series) == address
    x = np.random.default_rng(2).random((5, 3), dtype=np.float32)
    frame = pl.DataFrame({"x": pl.Series(x, dtype=pl.Array(pl.Float32, 3)), "y": np.arange(5)})
    x_address = first_element_address(frame["x"].to_arrow())
    assert ext.typed_f32_2d(frame["x"]) == (x_address, [5, 3])
    assert ext.rows_from_table(frame)[0] == x_address
    chunked = pl.concat([series, series], rechunk=False)
    with pytest.raises(ValueError, match="rechunk"):
        ext.import_ptr(chunked)


def test_a_hugging_face_datasets_batch_is_a_derived_struct(ext):
    datasets = pytest.importorskip("datasets")
    x = np.random.default_rng(3).random((12, 8), dtype=np.float32)
    features = datasets.Features(
        {"x": datasets.List(datasets.Value("float32"), length=8), "y": datasets.Value("int64")}
    )
    dataset = datasets.Dataset.from_dict({"x": x, "y": np.arange(12)}, features=features)
    batch = dataset.with_format("arrow")[2:6]
    assert isinstance(batch, pa.Table)
    x_ptr, y_ptr, shape = ext.rows_from_table(batch)
    assert shape == [4, 8]
    assert x_ptr == first_element_address(batch.column("x").chunk(0))
    assert np.allclose(np.asarray(ext.row_norms(batch.column("x"))), np.linalg.norm(x[2:6], axis=1))


def test_a_returned_tensor_is_an_arrow_array_without_a_copy(ext):
    tensor, ptr = ext.make("float32", [10])
    array = pa.array(tensor)
    assert array.type == pa.float32()
    assert array.buffers()[1].address == ptr
    assert array.to_pylist() == np.asarray(tensor).tolist()
    matrix, ptr = ext.make("int64", [4, 3])
    array = pa.array(matrix)
    assert isinstance(array.type, pa.FixedShapeTensorType)
    assert array.type.shape == [3]
    assert first_element_address(array.storage) == ptr
    assert np.array_equal(array.to_numpy_ndarray(), np.asarray(matrix))
    # And back: the tensor's own memory, still.
    assert ext.import_ptr(array) == ptr


def test_a_read_only_tensor_of_rust_memory_reaches_arrow_as_a_copy(ext):
    kept = ext.KeptArc(6)  # Rust keeps another handle: consumers get copies
    tensor = kept.export()
    assert tensor.copies_read_only and tensor.data_ptr() == kept.data_ptr()
    array = pa.array(tensor)
    assert array.buffers()[1].address != kept.data_ptr()
    assert array.to_pylist() == kept.values()
    # A read-only tensor handed over as it is (no Rust reader left) is shared.
    plain = ext.make_read_only([6])
    assert pa.array(plain).buffers()[1].address == plain.data_ptr()


def test_a_capsule_is_imported_once(ext):
    source = pa.array(np.arange(4, dtype=np.float32))
    schema, array = source.__arrow_c_array__()

    class Twice:
        def __arrow_c_array__(self, requested_schema=None):
            return schema, array

    assert ext.import_ptr(Twice()) == values_address(source, 4)
    with pytest.raises(ValueError, match="already consumed"):
        ext.import_ptr(Twice())


@pytest.mark.parametrize(
    "answer",
    [lambda s, a: (a, s), lambda s, a: (s,), lambda s, a: "no", lambda s, a: (s, 1)],
    ids=["swapped", "one", "a string", "not a capsule"],
)
def test_a_producer_that_answers_wrongly_gets_a_type_error(ext, answer):
    source = pa.array(np.arange(4, dtype=np.float32))

    class Liar:
        def __arrow_c_array__(self, requested_schema=None):
            return answer(*source.__arrow_c_array__())

    with pytest.raises(TypeError):
        ext.import_ptr(Liar())


def test_every_imported_buffer_is_released(ext):
    gc.collect()
    before = pa.total_allocated_bytes()
    for _ in range(20):
        array = pa.array(np.arange(1000, dtype=np.float64))
        table = pa.table({"x": array})
        ext.import_ptr(array)
        ext.load_batch(table)
        with pytest.raises(ValueError):
            ext.import_ptr(pa.array([1.0, None]))
        del array, table
    gc.collect()
    assert pa.total_allocated_bytes() == before


def listening_sockets():
    """Every listening TCP socket of the machine, as `(address, port)` of
    /proc/net/tcp and tcp6 (hex, as the kernel writes them)."""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    sockets.add(tuple(fields[1].split(":")))
    return sockets


LOOPBACK = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}


def test_a_ray_data_pipeline_runs_a_rust_function(ext):
    # Ray binds its servers to the node's address; on Linux it takes the machine's
    # outward one unless clusters are off, which makes the node loopback (127.0.0.1).
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray = pytest.importorskip("ray")
    before = listening_sockets()
    ray.init(
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        configure_logging=False,
    )
    try:
        opened = listening_sockets() - before
        assert opened, "Ray listens on something"
        assert {address for address, _ in opened} <= LOOPBACK, opened
        x = np.random.default_rng(4).random((64, 8), dtype=np.float32)
        embedding = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 8)
        table = pa.table({"embedding": embedding, "id": np.arange(64)})
        # The batch function is the Rust one itself (pickled by reference: each worker
        # imports the extension).
        out = (
            ray.data.from_arrow(table)
            .map_batches(ext.add_norms, batch_format="pyarrow", batch_size=16)
            .to_arrow_refs()
        )
        result = pa.concat_tables(ray.get(out)).sort_by("id")
        assert np.allclose(result.column("norm").to_numpy(), np.linalg.norm(x, axis=1))
        # A 2-d tensor goes back as a fixed-shape tensor column over the same storage.
        assert result.column("embedding").combine_chunks().storage.equals(embedding)
    finally:
        ray.shutdown()


def test_a_rust_batch_function_returns_the_tensors_memory_as_a_table(ext):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    embedding = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 3)
    out = ext.add_norms(pa.table({"embedding": embedding}))
    assert isinstance(out, pa.Table)
    # The input column goes back as the producer's memory, not a copy.
    assert first_element_address(out.column("embedding").chunk(0)) == first_element_address(embedding)
    assert np.allclose(out.column("norm").to_numpy(), np.linalg.norm(x, axis=1))


# A producer whose C structs lie: made here with ctypes, with release callbacks that
# count, so that any field can be wrong. Each lie is refused with a ValueError or
# TypeError (never a crash), and the moved-out array is released exactly once.

import ctypes

RELEASE_ARRAY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
RELEASE_SCHEMA = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class CSchema(ctypes.Structure):
    pass


CSchema._fields_ = [
    ("format", ctypes.c_char_p),
    ("name", ctypes.c_char_p),
    ("metadata", ctypes.c_void_p),
    ("flags", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("children", ctypes.c_void_p),
    ("dictionary", ctypes.c_void_p),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
]


class CArray(ctypes.Structure):
    _fields_ = [
        ("length", ctypes.c_int64),
        ("null_count", ctypes.c_int64),
        ("offset", ctypes.c_int64),
        ("n_buffers", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("buffers", ctypes.c_void_p),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Forged:
    """An Arrow producer built by hand: a float32 column of 8 elements (or a fixed-size
    list of them, `format=b"+w:4"`), whose structs the test edits before the import."""

    def __init__(self, format=b"f"):
        self.released = 0
        self.data = (ctypes.c_float * 16)(*range(16))
        self.pointers = (ctypes.c_void_p * 2)(None, ctypes.addressof(self.data))
        self.child_pointers = (ctypes.c_void_p * 1)(None)
        self.array = CArray(8, 0, 0, 2, 0, ctypes.addressof(self.pointers), None, None)
        self.schema = CSchema(format, b"x", None, 0, 0, None, None)
        self._release_array = RELEASE_ARRAY(self._on_release)
        self._release_schema = RELEASE_SCHEMA(lambda _: None)
        self.array.release = ctypes.cast(self._release_array, ctypes.c_void_p).value
        self.schema.release = ctypes.cast(self._release_schema, ctypes.c_void_p).value
        if format.startswith(b"+w:"):
            self.child_schema = CSchema(b"f", b"item", None, 2, 0, None, None)
            self.child_schema.release = self.schema.release
            self.child_schema_pointers = (ctypes.c_void_p * 1)(ctypes.addressof(self.child_schema))
            self.schema.n_children = 1
            self.schema.children = ctypes.addressof(self.child_schema_pointers)
            self.child = CArray(8, 0, 0, 2, 0, ctypes.addressof(self.pointers), None, None)
            self.child.release = self.array.release
            self.child_pointers[0] = ctypes.addressof(self.child)
            self.array.length = 2
            self.array.n_buffers = 1
            self.array.n_children = 1
            self.array.children = ctypes.addressof(self.child_pointers)

    def _on_release(self, pointer):
        self.released += 1
        ctypes.cast(pointer, ctypes.POINTER(CArray)).contents.release = None

    def __arrow_c_array__(self, requested_schema=None):
        return (
            _capsule_new(ctypes.addressof(self.schema), b"arrow_schema", None),
            _capsule_new(ctypes.addressof(self.array), b"arrow_array", None),
        )


def test_a_forged_producer_that_tells_the_truth_is_read_in_place(ext):
    forged = Forged()
    info = ext.inspect(forged)
    assert info["ptr"] == ctypes.addressof(forged.data)
    assert info["values"] == list(range(8))
    del info
    gc.collect()
    assert forged.released == 1
    nested = Forged(b"+w:4")
    assert ext.inspect(nested)["shape"] == [2, 4]
    gc.collect()
    assert nested.released == 1


LIES = {
    # A float32 column.
    "negative length": (b"f", lambda f: setattr(f.array, "length", -1)),
    "offset past the end": (b"f", lambda f: setattr(f.array, "offset", 2**62)),
    "null count below -1": (b"f", lambda f: setattr(f.array, "null_count", -7)),
    "three buffers": (b"f", lambda f: setattr(f.array, "n_buffers", 3)),
    "a child": (b"f", lambda f: setattr(f.array, "n_children", 1)),
    "no buffers": (b"f", lambda f: setattr(f.array, "buffers", None)),
    "no values": (b"f", lambda f: f.pointers.__setitem__(1, None)),
    "misaligned values": (b"f", lambda f: f.pointers.__setitem__(1, ctypes.addressof(f.data) + 1)),
    "a dictionary": (b"f", lambda f: setattr(f.array, "dictionary", ctypes.addressof(f.array))),
    # Fixed-size lists of 4 float32.
    "too few items": (b"+w:4", lambda f: setattr(f.child, "length", 7)),
    "no children": (b"+w:4", lambda f: setattr(f.array, "children", None)),
    "a NULL child": (b"+w:4", lambda f: f.child_pointers.__setitem__(0, None)),
    "two children": (b"+w:4", lambda f: setattr(f.array, "n_children", 2)),
    "a list with values": (b"+w:4", lambda f: setattr(f.array, "n_buffers", 2)),
    "a child with a negative length": (b"+w:4", lambda f: setattr(f.child, "length", -5)),
}


@pytest.mark.parametrize("lie", LIES, ids=list(LIES))
def test_a_forged_array_that_lies_is_refused_and_released_once(ext, lie):
    format, edit = LIES[lie]
    forged = Forged(format)
    edit(forged)
    with pytest.raises((ValueError, TypeError)):
        ext.import_ptr(forged)
    gc.collect()
    assert forged.released == 1


SCHEMA_LIES = {
    "no format": lambda f: setattr(f.schema, "format", None),
    "a format that is not UTF-8": lambda f: setattr(f.schema, "format", b"\xff"),
    "an unknown format": lambda f: setattr(f.schema, "format", b"?!"),
    "a name that is not UTF-8": lambda f: setattr(f.schema, "name", b"\xfe"),
    "negative children": lambda f: setattr(f.schema, "n_children", -1),
    "children without a list": lambda f: setattr(f.schema, "n_children", 2),
    "released": lambda f: setattr(f.schema, "release", None),
    "a list without its item": lambda f: setattr(f.schema, "format", b"+w:4"),
    "a variable list without its item": lambda f: setattr(f.schema, "format", b"+l"),
    "a map without its entries": lambda f: setattr(f.schema, "format", b"+m"),
    "a run-end encoding with one child": lambda f: (
        setattr(f.schema, "format", b"+r"),
        setattr(f.schema, "n_children", 1),
        setattr(f, "kid", CSchema(b"i", b"k", None, 0, 0, None, None, f.schema.release)),
        setattr(f, "kids", (ctypes.c_void_p * 1)(ctypes.addressof(f.kid))),
        setattr(f.schema, "children", ctypes.addressof(f.kids)),
    ),
    "a primitive with children": lambda f: (
        setattr(f.schema, "n_children", 1),
        setattr(f, "kid", CSchema(b"i", b"k", None, 0, 0, None, None, f.schema.release)),
        setattr(f, "kids", (ctypes.c_void_p * 1)(ctypes.addressof(f.kid))),
        setattr(f.schema, "children", ctypes.addressof(f.kids)),
    ),
    "metadata with a negative count": lambda f: (
        setattr(f, "meta", (ctypes.c_int32 * 1)(-3)),
        setattr(f.schema, "metadata", ctypes.addressof(f.meta)),
    ),
    "metadata that is not UTF-8": lambda f: (
        setattr(f, "meta", ctypes.create_string_buffer(b"\x01\0\0\0\x01\0\0\0\xff\x01\0\0\0a")),
        setattr(f.schema, "metadata", ctypes.addressof(f.meta)),
    ),
}


@pytest.mark.parametrize("lie", SCHEMA_LIES, ids=list(SCHEMA_LIES))
def test_a_forged_schema_that_lies_is_refused(ext, lie):
    forged = Forged()
    SCHEMA_LIES[lie](forged)
    with pytest.raises((ValueError, TypeError)):
        ext.import_ptr(forged)
    gc.collect()
    # Refused before the array was taken: the capsule keeps it, unreleased.
    assert forged.released == 0


def test_a_schema_whose_children_alias_into_a_huge_tree_is_refused(ext):
    # Three levels of 1,024 children, each level one struct: 2^30 fields for 4 structs.
    forged = Forged()
    leaf = CSchema(b"f", b"v", None, 2, 0, None, None, forged.schema.release)
    keep = [leaf]
    node = leaf
    for _ in range(3):
        children = (ctypes.c_void_p * 1024)(*([ctypes.addressof(node)] * 1024))
        node = CSchema(b"+s", b"s", None, 0, 1024, ctypes.addressof(children), None,
                       forged.schema.release)
        keep += [children, node]
    forged.schema = node
    with pytest.raises(ValueError, match="more than"):
        ext.import_ptr(forged)
    assert forged.released == 0


def test_a_released_array_capsule_is_refused(ext):
    forged = Forged()
    forged.array.release = None
    with pytest.raises(ValueError, match="already consumed"):
        ext.import_ptr(forged)
