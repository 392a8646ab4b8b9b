"""The extension from NumPy and PyTorch: run `python example.py` after
`maturin develop --release`. Every check below is an assertion."""

import numpy as np

import dlpack_example as ext

# A typed argument: any float32 matrix, read in place.
a = np.arange(6, dtype=np.float32).reshape(2, 3)
assert ext.total(a) == 15.0
try:
    ext.total(a.astype(np.float64))
    raise AssertionError("a float64 array was taken as float32")
except TypeError as e:  # says what came and how to convert it
    assert "expected a DLPack array of float32" in str(e) and "astype" in str(e)

# An array made in Rust: NumPy views it without a copy.
i = np.from_dlpack(ext.eye(3))
assert (i == np.eye(3, dtype=np.float32)).all()
assert isinstance(ext.eye(2), ext.Tensor)

# A Rust model as a Python object: attributes NumPy views in place, and setters.
m = ext.Mlp(3, 4, 2)
assert np.from_dlpack(m.fc2.weight).shape == (2, 4)
m.fc1.bias = np.full(4, 0.5, dtype=np.float32)  # checked: dtype and shape
assert (np.from_dlpack(m.fc1.bias) == 0.5).all()
assert list(m.state_dict()) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]

# In place, in NumPy's memory.
v = np.ones(4, dtype=np.float32)
ext.scale(2.5, v)
assert (v == 2.5).all()

# A table of Arrow columns as a struct, read in place: pyarrow, then Polars.
try:
    import pyarrow as pa
except ImportError:
    pa = None
    print("(pyarrow is not installed: its part is skipped)")

if pa is not None:
    embedding = np.arange(12, dtype=np.float32).reshape(6, 2)
    table = pa.table({
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(embedding.ravel()), 2),
        "label": pa.array([0, 1, 0, 1, 0, 1], type=pa.int64()),
    })
    means = ext.mean_by_label(table, 2)
    assert (np.from_dlpack(means) == [[4, 5], [6, 7]]).all()
    # A returned tensor is an Arrow array too, without a copy (rows of the first axis).
    assert pa.array(means).type.shape == [2]
    try:
        import polars as pl
    except ImportError:
        pl = None
    if pl is not None:
        frame = pl.from_arrow(table)
        assert (np.from_dlpack(ext.mean_by_label(frame, 2)) == [[4, 5], [6, 7]]).all()
    try:
        ext.mean_by_label(pa.table({"embedding": [[1.0], [2.0, 3.0]], "label": [0, 1]}), 2)
        raise AssertionError("a column of lists of any length was taken as a matrix")
    except TypeError as e:  # names the column and the fix
        assert "'embedding'" in str(e) and "fixed-size list" in str(e)

try:
    import torch
except ImportError:
    torch = None
    print("(PyTorch is not installed: its part is skipped)")

if torch is not None:
    # A Rust model as a Python object: its tensors are attributes, the Rust memory.
    m = ext.Mlp(4, 8, 2)
    w = torch.from_dlpack(m.fc1.weight)
    assert w.shape == (8, 4)

    def torch_mlp():
        net = torch.nn.Sequential()
        net.fc1, net.relu, net.fc2 = torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)
        return net

    # Its state_dict as a PyTorch module's parameters, with no copy (assign=True).
    net = torch_mlp()
    net.load_state_dict({k: torch.from_dlpack(v) for k, v in m.state_dict().items()}, assign=True)
    assert net.fc1.weight.data_ptr() == w.data_ptr()
    x = torch.arange(4, dtype=torch.float32)
    assert torch.allclose(torch.from_dlpack(m.forward(x)), net(x).detach())
    # A PyTorch optimizer step on that module is what the next Rust forward reads.
    before = torch.from_dlpack(m.forward(x)).clone()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net(x).square().sum().backward()
    opt.step()
    y = torch.from_dlpack(m.forward(x))
    assert not torch.allclose(y, before) and torch.allclose(y, net(x).detach())
    # ... and back: another module's own tensors loaded into the Rust model.
    other = torch_mlp()
    m.load_state_dict(other.state_dict())
    assert torch.allclose(torch.from_dlpack(m.forward(x)), other(x).detach())
    # Saved as a checkpoint in shards (the layout `transformers` writes), loaded back as
    # a new model in one call.
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        m.save(folder, 100)
        n = ext.Mlp.load(folder)
        loaded = {k: torch.from_dlpack(t) for k, t in ext.load_checkpoint(folder).items()}
    assert torch.allclose(torch.from_dlpack(n.forward(x)), other(x).detach())
    assert all(torch.equal(loaded[k], v) for k, v in other.state_dict().items())
    # In place, in PyTorch's memory.
    t = torch.ones(3)
    ext.scale(4.0, t)
    assert t.tolist() == [4.0, 4.0, 4.0]
    # Into a parameter, torch's own rule: refused in grad mode, written under no_grad
    # (where optimizer steps run).
    p = torch.nn.Parameter(torch.ones(3))
    try:
        ext.scale(2.0, p)
        raise AssertionError("a parameter was written in place in grad mode")
    except RuntimeError as e:
        assert "torch.no_grad()" in str(e)
    with torch.no_grad():
        ext.scale(2.0, p)
    assert p.tolist() == [2.0, 2.0, 2.0]

print("ok: NumPy" + (" and PyTorch" if torch is not None else ""))
