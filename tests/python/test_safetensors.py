"""Weights on disk, against the real libraries: files written by `safetensors.torch`,
`safetensors.numpy` and the Rust crate load here bit for bit (read and mapped), files
written here load there bit for bit, metadata and names with dots included; a PyTorch
`state_dict` goes into a derived Rust struct and back; mapped tensors are writable in
PyTorch without touching the file; float8 passes through."""

import gc

import numpy as np
import pytest
import safetensors
import safetensors.numpy
import safetensors.torch
import torch
from safetensors import safe_open

from helpers import np_ptr

LOADERS = ["load_safetensors", "map_safetensors"]

TORCH_DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.uint16,
    torch.int16,
    torch.uint32,
    torch.int32,
    torch.uint64,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.float8_e4m3fnuz,
    torch.float8_e5m2fnuz,
    torch.float8_e8m0fnu,
]


def torch_tensors():
    """One tensor of every dtype safetensors.torch writes, with dotted names, plus
    0-d, empty and non-contiguous ones."""
    gen = torch.Generator().manual_seed(0)
    tensors = {}
    for i, dtype in enumerate(TORCH_DTYPES):
        raw = torch.randint(0, 256, (2, 3, 4 * dtype.itemsize), generator=gen, dtype=torch.uint8)
        if dtype == torch.bool:
            t = raw[..., :4] % 2 == 1
        else:
            t = raw.view(dtype)
        tensors[f"layers.{i}.{str(dtype).removeprefix('torch.')}"] = t
    tensors["scalar"] = torch.tensor(3.5, dtype=torch.float64)
    tensors["empty"] = torch.zeros(0, 5)
    return tensors


def bits(t):
    """A tensor's bytes (bit-identity, whatever its dtype)."""
    t = t.contiguous().reshape(-1)
    return t.view(torch.uint8).tolist() if t.dtype != torch.bool else t.tolist()


@pytest.mark.parametrize("loader", LOADERS)
def test_torch_files_load_bit_for_bit(ext, tmp_path, loader):
    path = tmp_path / "torch.safetensors"
    tensors = torch_tensors()
    safetensors.torch.save_file(tensors, path, metadata={"format": "pt", "step": "7"})
    loaded, metadata = getattr(ext, loader)(path)
    assert metadata == {"format": "pt", "step": "7"}
    assert sorted(loaded) == sorted(tensors)
    for name, expected in tensors.items():
        got = torch.from_dlpack(loaded[name])
        assert got.dtype == expected.dtype, name
        assert got.shape == expected.shape, name
        assert bits(got) == bits(expected), name


@pytest.mark.parametrize("loader", LOADERS)
def test_numpy_files_load_bit_for_bit(ext, tmp_path, loader):
    path = tmp_path / "numpy.safetensors"
    rng = np.random.default_rng(0)
    arrays = {
        "a.bool": rng.integers(0, 2, (3, 4)).astype(np.bool_),
        "a.u8": rng.integers(0, 255, (7,)).astype(np.uint8),
        "a.i16": rng.integers(-1000, 1000, (2, 5)).astype(np.int16),
        "a.u64": rng.integers(0, 2**62, (3,)).astype(np.uint64),
        "b.f16": rng.standard_normal((4, 4)).astype(np.float16),
        "b.f32": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "b.f64": rng.standard_normal((5,)),
        "b.c64": (rng.standard_normal(3) + 1j * rng.standard_normal(3)).astype(np.complex64),
        "scalar": np.array(2.5, np.float32),
        "empty": np.zeros((0, 3), np.int32),
    }
    safetensors.numpy.save_file(arrays, path, metadata={"source": "numpy"})
    loaded, metadata = getattr(ext, loader)(path)
    assert metadata == {"source": "numpy"}
    for name, expected in arrays.items():
        got = np.from_dlpack(loaded[name])
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        assert got.tobytes() == expected.tobytes(), name


def test_files_written_here_load_in_torch_and_numpy(ext, tmp_path):
    path = tmp_path / "ours.safetensors"
    tensors = torch_tensors()
    # Non-contiguous layouts are written in C order.
    tensors["strided.transposed"] = torch.arange(12.0).reshape(3, 4).t()
    tensors["strided.stepped"] = torch.arange(20, dtype=torch.int32)[::3]
    tensors["strided.broadcast"] = torch.arange(3.0).expand(4, 3)
    tensors["strided.flipped"] = torch.from_numpy(np.arange(6.0)[::-1].copy())
    ext.save_safetensors(tensors, path, {"format": "pt"})
    with safe_open(path, "pt") as f:
        assert f.metadata() == {"format": "pt"}
    loaded = safetensors.torch.load_file(path)
    assert sorted(loaded) == sorted(tensors)
    for name, expected in tensors.items():
        got = loaded[name]
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        assert bits(got) == bits(expected), name
    numpy_path = tmp_path / "for-numpy.safetensors"
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "m": np.array([True, False])}
    ext.save_safetensors(arrays, numpy_path)
    got = safetensors.numpy.load_file(numpy_path)
    for name, expected in arrays.items():
        np.testing.assert_array_equal(got[name], expected)
        assert got[name].dtype == expected.dtype


def test_torch_numpy_and_rust_read_the_same_file_alike(ext, tmp_path):
    # The file the Rust `safetensors` crate would write has the same bytes as
    # safetensors.torch's (both the reference format): a round trip here keeps them.
    path = tmp_path / "torch.safetensors"
    again = tmp_path / "again.safetensors"
    tensors = {"a.weight": torch.arange(8.0).reshape(2, 4), "a.bias": torch.ones(2, dtype=torch.float64)}
    safetensors.torch.save_file(tensors, path, metadata={"k": "v"})
    loaded, metadata = ext.load_safetensors(path)
    ext.save_safetensors(loaded, again, metadata)
    assert path.read_bytes() == again.read_bytes()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 2)


def test_a_state_dict_goes_through_a_derived_rust_struct_and_back(ext, tmp_path):
    torch.manual_seed(0)
    net = Net()
    source = tmp_path / "net.safetensors"
    target = tmp_path / "stepped.safetensors"
    safetensors.torch.save_file(net.state_dict(), source)
    # Read into owned ndarray fields without a copy, changed in Rust, saved.
    assert ext.step_net_file(source, target) is True
    stepped = Net()
    stepped.load_state_dict(safetensors.torch.load_file(target))
    for name, value in net.state_dict().items():
        expected = value * 2 if name.endswith("weight") else value + 1
        assert torch.equal(stepped.state_dict()[name], expected), name


def test_a_state_dict_that_does_not_fit_names_every_tensor(ext, tmp_path):
    state = Net().state_dict()
    del state["fc2.bias"]
    state["fc3.weight"] = torch.zeros(1)
    source = tmp_path / "wrong.safetensors"
    safetensors.torch.save_file(state, source)
    with pytest.raises(ValueError) as info:
        ext.step_net_file(source, tmp_path / "never.safetensors")
    assert "fc2.bias" in str(info.value) and "fc3.weight" in str(info.value)
    assert not (tmp_path / "never.safetensors").exists()


def test_mapped_tensors_are_writable_in_torch_and_the_file_stays(ext, tmp_path):
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_file({"w": torch.arange(6.0).reshape(2, 3)}, path)
    before = path.read_bytes()
    loaded, _ = ext.map_safetensors(path)
    w = torch.from_dlpack(loaded["w"])
    assert w.data_ptr() == loaded["w"].data_ptr(), "no copy"
    w.mul_(10)  # writable, as safetensors.torch.load_file's tensors are
    assert torch.from_dlpack(loaded["w"])[1, 2] == 50.0
    a = np.from_dlpack(loaded["w"])
    assert np_ptr(a) == w.data_ptr() and a.flags.writeable
    assert path.read_bytes() == before, "writes went to private pages"
    del w, a, loaded
    gc.collect()


def test_float8_passes_through_a_save_and_a_map(ext, tmp_path):
    path = tmp_path / "f8.safetensors"
    tensors = {
        "e4m3": torch.tensor([0.5, -1.0, 448.0]).to(torch.float8_e4m3fn),
        "e5m2": torch.tensor([0.25, -2.0, 57344.0]).to(torch.float8_e5m2),
    }
    ext.save_safetensors(tensors, path)
    loaded, _ = ext.map_safetensors(path)
    for name, expected in tensors.items():
        got = torch.from_dlpack(loaded[name])
        assert got.dtype == expected.dtype
        assert torch.equal(got.float(), expected.float())


@pytest.mark.parametrize("loader", LOADERS)
def test_hostile_files_are_python_errors(ext, tmp_path, loader):
    load = getattr(ext, loader)
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        load(tmp_path / "missing.safetensors")
    with pytest.raises(IsADirectoryError):
        load(tmp_path)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    with pytest.raises(ValueError, match="bad.safetensors"):
        load(bad)
    bad.write_bytes((2**20).to_bytes(8, "little"))
    with pytest.raises(ValueError, match="past the end"):
        load(bad)


def test_saving_a_cuda_tensor_or_a_wrong_name_is_an_error(ext, tmp_path):
    path = tmp_path / "x.safetensors"
    with pytest.raises(BufferError, match="cuda"):
        ext.save_safetensors({"gpu": ext.make_on_device(2, 0)}, path)
    with pytest.raises(ValueError, match="__metadata__"):
        ext.save_safetensors({"__metadata__": np.zeros(2)}, path)
    with pytest.raises(TypeError, match="names must be str|'int' object"):
        ext.save_safetensors({1: np.zeros(2)}, path)
    assert list(tmp_path.iterdir()) == []


def test_a_file_larger_than_memory_maps(ext, tmp_path):
    # A private mapping reserves no swap: a sparse file twice the size of memory and swap
    # together maps (pages are read when touched; none is, but the header's).
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
    size = 2 * (info["MemTotal"] + info.get("SwapTotal", 0))
    header = ('{"big":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}' % (size, size)).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "big.safetensors"
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + size)
    loaded, _ = ext.map_safetensors(path)
    assert loaded["big"].shape == (size,)
    del loaded
    gc.collect()
