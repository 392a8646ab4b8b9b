"""Exceptions in Python's words: the exact text of what a user of an extension sees
(shapes as tuples, names in single quotes, no Rust API, the conversion that fixes a
dtype mismatch), and the `Tensor` class never called `builtins.Tensor`."""

import warnings

import numpy as np
import pytest
import torch

# Run again against the stable-ABI build (tests/README.md).
pytestmark = pytest.mark.protocol


def test_a_dtype_mismatch_says_how_to_convert(ext):
    with pytest.raises(TypeError) as info:
        ext.sum_f32_2d(np.zeros((2, 3)))
    assert str(info.value) == (
        "expected a DLPack array of float32 with 2 dimensions, got float64 with shape "
        "(2, 3) on cpu:0 (dtype mismatch: expected float32, found float64); convert it "
        "first: a.astype(numpy.float32) for NumPy, t.to(torch.float32) for PyTorch"
    )


NUMPY25 = np.lib.NumpyVersion(np.__version__) >= "2.5.0"
before_numpy25 = pytest.mark.skipif(
    NUMPY25, reason="before NumPy 2.5 (test_ml_dtypes.py checks NumPy 2.5's texts)"
)
NO_NARROW_FLOATS = (
    f"NumPy {np.__version__} cannot exchange bfloat16 through DLPack; NumPy 2.5 and later "
    "can, with ml_dtypes 0.7 or later imported (pip install 'numpy>=2.5' 'ml_dtypes>=0.7')"
)


@before_numpy25
def test_an_ml_dtypes_array_before_numpy_2_5_names_what_to_install(ext):
    import ml_dtypes

    with pytest.raises(BufferError) as info:
        ext.typed_bf16_1d(np.zeros(4, ml_dtypes.bfloat16))
    assert str(info.value) == (
        "DLPack only supports signed/unsigned integers, float and complex dtypes: "
        + NO_NARROW_FLOATS
    )


@before_numpy25
def test_a_bfloat16_tensor_into_numpy_before_2_5_names_what_to_install(ext):
    t = ext.make("bfloat16", [3])[0]
    with pytest.raises(RuntimeError) as info:
        np.asarray(t)
    assert str(info.value) == "Unsupported dtype in DLTensor: " + NO_NARROW_FLOATS

def test_a_bf16_checkpoint_into_f32_fields_is_one_line_with_the_fix(ext, tmp_path):
    import safetensors.torch

    torch.manual_seed(0)
    state = {
        "fc1.weight": torch.randn(4, 3), "fc1.bias": torch.randn(4),
        "fc2.weight": torch.randn(2, 4), "fc2.bias": torch.randn(2),
    }
    bf16 = {k: v.to(torch.bfloat16) for k, v in state.items()}
    safetensors.torch.save_file(bf16, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError) as info:
        ext.Mlp.load(str(tmp_path))
    assert str(info.value) == (
        "state_dict does not fit: 4 tensors are bfloat16 where the value takes float32: "
        "load with 'ReadOptions::new().convert_floats(DataType::F32)' to convert them as "
        "PyTorch's '.to()' does (e.g. 'fc1.weight', 'fc1.bias', 'fc2.weight' and 1 more)"
    )


def test_a_rank_mismatch_shows_the_shape_as_a_tuple(ext):
    with pytest.raises(TypeError) as info:
        ext.sum_f32_2d(torch.zeros(3))
    assert str(info.value) == (
        "expected a DLPack array of float32 with 2 dimensions, got float32 with shape "
        "(3,) on cpu:0 (ndim mismatch: expected 2, found 1)"
    )


def test_tensor_names_must_be_str(ext):
    with pytest.raises(TypeError) as info:
        ext.load_batch({1: np.zeros(2)})
    assert str(info.value) == "tensor names must be str, got int"


SHARED = (
    "shared tensor: this function writes in place into memory that something else still "
    "reaches (for an argument, the caller's array; a copy passed from Python is shared "
    "too); the fix is in the extension: return a new array, import a copy (copy=True for "
    "NumPy; PyTorch does not flag its copies, so copy in Rust), or call assume_exclusive "
    "(Rust) on an array its caller hands over to be written "
    '(dlpack_core::python docs, "Writing into a caller\'s array, in place")'
)


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.zeros(3, np.float32),
        lambda: np.zeros(3, np.float32).copy(),
        lambda: torch.zeros(3).clone(),
    ],
    ids=["numpy", "numpy-copy", "torch-clone"],
)
def test_a_shared_tensor_tells_the_extension_author_the_fix(ext, make):
    # The advice is for the extension's author: a copy is shared as well, so telling the
    # caller to pass one would be false.
    with pytest.raises(BufferError) as info:
        ext.write_first(make(), 1.0)
    assert str(info.value) == SHARED


def test_a_shared_typed_argument_gets_the_same_advice(ext):
    with pytest.raises(BufferError) as info:
        ext.write_first_typed(np.zeros(3, np.float32), 2.0)
    assert str(info.value) == SHARED


def _read_only():
    a = np.zeros(3, np.float32)
    a.flags.writeable = False
    return a


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.broadcast_to(np.zeros(1, np.float32), (3,)),
        _read_only,
    ],
    ids=["broadcast", "writeable-false"],
)
def test_a_read_only_array_says_what_to_pass(ext, make):
    with pytest.raises(ValueError) as info:
        ext.scale_in_place(2.0, make())
    assert str(info.value) == (
        "read-only tensor: this function writes in place, and the array is read-only (a "
        "NumPy array with writeable=False, a broadcast or other read-only view, a tensor its "
        "producer flagged read-only); it needs a writable one (a.copy() for NumPy, t.clone() "
        "for PyTorch)"
    )


def test_names_are_quoted_as_python_quotes_them(ext):
    state, _ = ext.model_state()
    del state["fc2.bias"]
    with pytest.raises(KeyError) as info:
        ext.load_model(state)
    assert "`" not in str(info.value)
    assert "'fc2.bias'" in str(info.value)


def test_the_tensor_class_is_named_after_its_module(ext):
    t = ext.make("float32", [2])[0]
    # (maturin puts the compiled module inside a package of the same name.)
    assert type(t).__module__ == "dlpack_test_ext.dlpack_test_ext"
    assert repr(type(t)) == "<class 'dlpack_test_ext.dlpack_test_ext.Tensor'>"


def quantized():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8)


@pytest.mark.parametrize(
    "make",
    [
        quantized,
        lambda: torch.eye(3).to_sparse(),
        lambda: torch.tensor([1 + 1j, 2 - 1j]).conj(),
    ],
    ids=["quantized", "sparse", "conjugated"],
)
def test_what_torch_refuses_is_refused_in_its_own_words(ext, make):
    # Whichever path an import takes (torch's C exchange API first), a failure is the
    # exception and the one-line message of the protocol path.
    t = make()
    with pytest.raises(BaseException) as theirs:
        t.__dlpack__()
    with pytest.raises(type(theirs.value)) as ours:
        ext.import_ptr(t)
    assert str(ours.value) == str(theirs.value)
    assert "\n" not in str(ours.value)


def test_a_complex_tensor_imports_with_its_values(ext):
    # (complex tensors go through `__dlpack__`, which resolves nothing silently)
    t = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    assert ext.inspect(t)["values"] == [1 + 2j, 3 - 4j]


def test_a_stream_out_of_range_says_so(ext):
    t = ext.make("float32", [2])[0]
    with pytest.raises(ValueError) as info:
        t.__dlpack__(stream=2**100)
    assert str(info.value) == (
        "stream=1267650600228229401496703205376 is out of range: a stream is a 64-bit "
        "integer"
    )


def test_a_parameter_written_in_grad_mode_is_refused_with_torchs_reason(ext):
    w = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(RuntimeError) as info:
        ext.scale_in_place(2.0, w)
    assert str(info.value) == (
        "in-place write refused: the tensor requires grad and grad mode is on: autograd "
        "cannot record a write made outside torch (torch itself refuses one into a leaf such "
        "as a Parameter); write it under torch.no_grad(), as optimizer steps do"
    )


def _mlp_state():
    torch.manual_seed(0)
    return {
        "fc1.weight": torch.randn(4, 3), "fc1.bias": torch.randn(4),
        "fc2.weight": torch.randn(2, 4), "fc2.bias": torch.randn(2),
    }


def test_a_prefix_the_struct_lacks_points_to_load_at(ext, tmp_path):
    import safetensors.torch

    state = {f"model.{k}": v for k, v in _mlp_state().items()}
    safetensors.torch.save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError) as info:
        ext.Mlp.load(str(tmp_path))
    assert str(info.value) == (
        "state_dict does not fit: the checkpoint's names start with 'model.' where the "
        "struct's do not (4 tensors): load with 'Checkpoint::load_at::<T>(\"model\")', or "
        "wrap the struct in a field 'model'"
    )


def test_a_field_named_otherwise_is_one_rename(ext, tmp_path):
    import safetensors.torch

    state = {k.replace("fc2", "fc_2"): v for k, v in _mlp_state().items()}
    safetensors.torch.save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError) as info:
        ext.Mlp.load(str(tmp_path))
    assert str(info.value) == (
        "state_dict does not fit: the struct has 'fc2' where the checkpoint has 'fc_2' "
        "('fc_2.…', 2 tensors): '#[dlpack(rename = \"fc_2\")]' on the field 'fc2'"
    )


def test_a_misnamed_vec_field_that_took_nothing_is_an_error(ext, tmp_path):
    # `Net` has `layers: Vec<Block>`; the checkpoint calls them `blocks`.
    state = {
        k.replace("layers.", "blocks."): v
        for k, v in ext.Net(3, 4).state_dict().items()
    }
    ext.save_checkpoint(state, str(tmp_path), 1 << 30, {"format": "pt"})
    with pytest.raises(ValueError) as info:
        ext.Net.load(str(tmp_path))
    assert str(info.value) == (
        "state_dict does not fit: the field 'layers' (a Vec) took no items while the "
        "checkpoint has 'blocks.{0..2}.…' (24 tensors): '#[dlpack(rename = \"blocks\")]' on "
        "it if those are its items (a Vec takes 'layers.0', 'layers.1', … up to the first "
        "gap)"
    )


def test_one_shard_opened_alone_names_its_index(ext, tmp_path):
    import json

    state = _mlp_state()
    ext.save_checkpoint(state, str(tmp_path), 50, {"format": "pt"})
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 2
    first = shards[0]
    missing = [n for n in state if index["weight_map"][n] != first]
    with pytest.raises(ValueError) as info:
        ext.Mlp.load(str(tmp_path / first))
    assert str(info.value) == (
        "state_dict does not fit: missing tensors "
        + ", ".join(f"'{n}'" for n in missing)
        + f"; '{first}' is one of the {len(shards)} shards of "
        "'model.safetensors.index.json' beside it: open that index or its folder"
    )
def test_pickling_a_tensor_names_numpys_and_torchs_copy(ext, tmp_path):
    state, _ = ext.model_state()
    with pytest.raises(TypeError) as info:
        torch.save(state, tmp_path / "model.pt")
    assert str(info.value) == (
        "cannot pickle a DLPack Tensor: it shares memory with its producer; copy it into an "
        "array first, for example numpy.from_dlpack(t, copy=True) for NumPy, or "
        "torch.from_dlpack(t).clone() for PyTorch (torch.save)"
    )


def test_a_float64_state_dict_says_what_torch_would_do_and_the_fix(ext):
    m = ext.Mlp(3, 4, 2)
    sd = {k: torch.from_dlpack(v).double() for k, v in m.state_dict().items()}
    sd["fc2.bias"] = sd["fc2.bias"].float()
    with pytest.raises(RuntimeError) as info:
        m.load_state_dict(sd)
    assert str(info.value) == (
        "Error(s) in loading state_dict for Mlp:\n\t"
        "dtype mismatch for fc1.weight: copying a param of dtype float64 from checkpoint, "
        "the dtype in current model is float32.\n\t"
        "dtype mismatch for fc1.bias: copying a param of dtype float64 from checkpoint, "
        "the dtype in current model is float32.\n\t"
        "dtype mismatch for fc2.weight: copying a param of dtype float64 from checkpoint, "
        "the dtype in current model is float32.\n\t"
        "PyTorch would convert float64 to float32 here (copy_); this model converts nothing "
        "silently: convert first, {k: v.to(torch.float32) if v.dtype == torch.float64 else v "
        "for k, v in sd.items()} for PyTorch tensors, or a.astype(numpy.float32) for a NumPy "
        "array."
    )
    # The fix it names loads.
    fixed = {k: v.to(torch.float32) if v.dtype == torch.float64 else v for k, v in sd.items()}
    m.load_state_dict(fixed)
    np.testing.assert_array_equal(np.from_dlpack(m.fc1.bias), sd["fc1.bias"].float().numpy())


def test_shares_of_a_name_that_is_no_tensor_is_a_key_error(ext):
    m = ext.Mlp(3, 4, 2)
    with pytest.raises(KeyError) as info:
        m.shares(m.fc1.weight, "fc1.scale")
    assert str(info.value) == "'fc1.scale'"
