# The typing stub of dlpack-core's `Tensor` class: include it in the `.pyi` file of an
# extension that exposes the class (`dlpack_core::python::add_to_module`).
from typing import Any, ClassVar, Dict, NoReturn, Optional, Tuple, final

@final
class Tensor:
    """A Rust tensor that any DLPack consumer accepts (NumPy, PyTorch, JAX, ...)."""

    __dlpack_c_exchange_api__: ClassVar[Any]
    """The DLPack C exchange API: a capsule named "dlpack_exchange_api"."""

    def __dlpack__(
        self,
        *,
        stream: Optional[Any] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """Exports the tensor as a DLPack capsule (Python array API `__dlpack__`)."""

    def __array__(self, dtype: Optional[Any] = None, copy: Optional[bool] = None) -> Any:
        """The tensor as a NumPy array (`np.asarray`), through `numpy.from_dlpack`."""

    def __jax_array__(self) -> Any:
        """The tensor as a JAX array (`jnp.asarray`), through `jax.dlpack.from_dlpack`."""

    def __arrow_c_array__(self, requested_schema: Optional[Any] = None) -> Tuple[Any, Any]:
        """Arrow's PyCapsule interface (an extension built with dlpack-core's `arrow`
        feature): `(schema, array)` capsules of the tensor as an Arrow array, 1-d as a
        primitive array, n-d as `arrow.fixed_shape_tensor`, so `pa.array(t)` takes it."""

    @classmethod
    def __torch_function__(
        cls,
        func: Any,
        types: Any,
        args: Optional[Tuple[Any, ...]] = None,
        kwargs: Optional[Dict[str, Any]] = None,
    ) -> Any:
        """PyTorch's protocol for tensor-like objects: `func` called with every `Tensor`
        converted by `torch.from_dlpack` (no copy)."""

    def __dlpack_device__(self) -> Tuple[int, int]:
        """`(device_type, device_id)` in DLPack numbering: `(1, 0)` for the CPU."""

    @property
    def shape(self) -> Tuple[int, ...]:
        """The extents."""

    @property
    def strides(self) -> Optional[Tuple[int, ...]]:
        """The strides in elements, or `None` (C-contiguous) if the producer gave none."""

    @property
    def ndim(self) -> int:
        """The number of dimensions."""

    @property
    def dtype(self) -> str:
        """The element type, named as NumPy names it (`"float32"`, `"bool"`, ...)."""

    @property
    def device(self) -> str:
        """The device, as `"cpu:0"`, `"cuda:1"`, ..."""

    @property
    def read_only(self) -> bool:
        """Whether the producer forbids writes."""

    @property
    def copies_read_only(self) -> bool:
        """Whether consumers get copies: read-only memory that Rust code also reads,
        which a consumer that ignores the read-only flag (PyTorch) could write."""

    def data_ptr(self) -> int:
        """The address of the first element."""

    def __reduce__(self) -> NoReturn:
        """Refuses to pickle (and `copy`) the tensor, with what to do instead."""
