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

# In place, in NumPy's memory.
v = np.ones(4, dtype=np.float32)
ext.scale(2.5, v)
assert (v == 2.5).all()

try:
    import torch
except ImportError:
    torch = None
    print("(PyTorch is not installed: its part is skipped)")

if torch is not None:
    # A model made in Rust, as a PyTorch state_dict over the same memory.
    state = {k: torch.from_dlpack(t) for k, t in ext.init_model(4, 8, 2).items()}
    net = torch.nn.Sequential()
    net.fc1, net.relu, net.fc2 = torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)
    net.load_state_dict(state, assign=True)  # assign: run on the Rust memory itself
    x = torch.arange(4, dtype=torch.float32)
    expected = net(x)
    # ... and back into Rust, from PyTorch's own state_dict.
    y = torch.from_dlpack(ext.forward(net.state_dict(), x))
    assert torch.allclose(y, expected.detach())
    # Saved as a checkpoint in shards (the layout `transformers` writes), loaded back.
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        ext.save_checkpoint(net.state_dict(), folder, 100)
        loaded = {k: torch.from_dlpack(t) for k, t in ext.load_checkpoint(folder).items()}
    assert all(torch.equal(loaded[k], v) for k, v in net.state_dict().items())
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
