# The typing stub of a Rust model shared with Python (`#[pymodel]`): the `ModelView` of a
# group of tensors and the `IncompatibleKeys` of `load_state_dict`. Include it after the
# `Tensor` stub in the `.pyi` file of an extension that adds them
# (`dlpack_core::python::add_to_module`), and describe each model class there with the
# methods `#[pymodel]` adds (see `dlpack_core::python::model`). PyO3 makes `__getattr__`
# a slot of the type, not an attribute: mypy's stubtest wants it allowlisted
# (`your_extension\.\w+\.__getattr__`).
from typing import Any, Iterator, List, NamedTuple, Union, final

class IncompatibleKeys(NamedTuple):
    """What `load_state_dict(..., strict=False)` did not match, as PyTorch returns it."""

    missing_keys: List[str]
    unexpected_keys: List[str]

@final
class ModelView:
    """A group of a model's tensors (`m.fc1`, `m.layers[3]`): tensors and subgroups by
    attribute, index or key."""

    def __getattr__(self, name: str, /) -> Union[Tensor, "ModelView"]: ...
    def __setattr__(self, name: str, value: Any, /) -> None: ...
    def __delattr__(self, name: str, /) -> None: ...
    def __getitem__(self, key: Union[int, str], /) -> Union[Tensor, "ModelView"]: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Union[Tensor, "ModelView"]]: ...
    def __dir__(self) -> List[str]: ...
    def state_dict(self, *, prefix: str = ...) -> dict[str, Tensor]:
        """The group's tensors by name relative to the group, sharing the model's memory."""
