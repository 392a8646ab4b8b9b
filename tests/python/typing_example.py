"""A typed program against the test extension's stub (the `Tensor` stub that
dlpack-core ships, plus the extension's functions), checked by mypy in strict mode by
scripts/test-python: what an extension's users see in their editor and type checker."""

from typing import Any, Optional, Tuple

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.dlpack import from_dlpack as torch_from_dlpack

import dlpack_test_ext as ext


def shapes() -> Tuple[Tuple[int, ...], Optional[Tuple[int, ...]], int]:
    tensor, address = ext.make("float32", [2, 3])
    assert isinstance(tensor, ext.Tensor)
    return tensor.shape, tensor.strides, tensor.ndim + address


def to_numpy() -> npt.NDArray[Any]:
    tensor, _ = ext.make("float32", [2, 3])
    return np.from_dlpack(tensor)


def to_torch() -> torch.Tensor:
    tensor = ext.roundtrip(np.zeros(3, np.float32))
    device: Tuple[int, int] = tensor.__dlpack_device__()
    assert device == (1, 0) and not tensor.read_only and tensor.dtype == "float32"
    return torch_from_dlpack(tensor)


if __name__ == "__main__":
    print(shapes(), to_numpy().shape, to_torch().shape)


def model() -> Tuple[torch.Tensor, int]:
    m = ext.Mlp(3, 4, 2)
    weight = m.fc1.weight
    assert isinstance(weight, ext.Tensor)
    keys = m.load_state_dict(m.state_dict(), strict=False)
    layer: ext.ModelView = m.fc2
    return torch_from_dlpack(weight), len(keys.missing_keys) + len(layer.state_dict())
