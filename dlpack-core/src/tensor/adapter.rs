//! ABI adapters: a tensor of one ABI wrapped in a header of the other, for
//! [`ManagedTensor::into_raw`] and [`ManagedTensor::into_raw_legacy`].

use core::mem::ManuallyDrop;
use core::ptr::NonNull;

use crate::layout;

use super::{Desc, ManagedTensor, Own, Raw, build};

/// The owner of an ABI adapter: the tensor it wraps.
pub(super) struct Adapter(pub(super) ManagedTensor);

/// Wraps `inner` in a header of the other ABI; the wrapper's deleter drops `inner`.
pub(super) fn wrap<M: Own>(inner: ManagedTensor) -> NonNull<M> {
    let ndim = inner.ndim();
    // SAFETY:
    // - the shape, strides and description are the wrapped tensor's own, read at the
    //   adapter's final address; its data pointer stays valid while `inner` (the owner)
    //   lives, so its producer's guarantees carry over;
    // - NULL strides become explicit C-contiguous ones, as DLPack 1.2+ requires.
    let built = unsafe {
        build::<M, Adapter>(Adapter(inner), ndim, |adapter, shape, strides| {
            let t = &adapter.0;
            layout::copy_into(t.shape(), t.strides(), shape, strides);
            Ok(Desc {
                data: t.data(),
                dtype: t.dtype(),
                device: t.device(),
                byte_offset: t.byte_offset(),
                flags: t.flags(),
            })
        })
    };
    match built {
        Ok(tensor) => match ManuallyDrop::new(tensor).raw() {
            Raw::Versioned(ptr) => ptr.cast(),
            Raw::Legacy(ptr) => ptr.cast(),
        },
        // A header of a few hundred bytes per dimension could not be allocated.
        Err(_) => std::alloc::handle_alloc_error(std::alloc::Layout::new::<M>()),
    }
}
