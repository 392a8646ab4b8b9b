//! The DLPack 1.3 C ABI, mirrored field for field from `dlpack.h`.
//!
//! This module holds data only. Every struct is `#[repr(C)]` with the header's type and
//! field names. The two C enums that a foreign producer fills in, `DLDeviceType` and
//! `DLDataTypeCode`, are `#[repr(transparent)]` integer newtypes with associated
//! constants: a value this crate does not know (from a newer minor version of the
//! standard, or simply garbage) is a valid value of the newtype, whereas it would be
//! undefined behaviour in a Rust `enum`.
//!
//! Use [`ManagedTensor`](crate::ManagedTensor) to own one of these structs safely.

use core::ffi::{c_char, c_int, c_void};
use core::fmt;

/// The major version of DLPack this crate implements (`DLPACK_MAJOR_VERSION`).
pub const DLPACK_MAJOR_VERSION: u32 = 1;
/// The minor version of DLPack this crate implements (`DLPACK_MINOR_VERSION`).
pub const DLPACK_MINOR_VERSION: u32 = 3;

/// The data is read-only: a consumer must not write through it (`1 << 0`).
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1 << 0;
/// The producer copied the data for this export: the consumer owns it alone (`1 << 1`).
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;
/// Sub-byte elements are padded to a byte each instead of packed (`1 << 2`).
pub const DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED: u64 = 1 << 2;

/// `DLPackVersion`: the ABI version of a [`DLManagedTensorVersioned`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DLPackVersion {
    /// Incremented when the layout of `DLManagedTensorVersioned` changes.
    pub major: u32,
    /// Incremented when new enum values are added; the layout is unchanged.
    pub minor: u32,
}

impl DLPackVersion {
    /// The version this crate implements: 1.3.
    pub const CURRENT: Self = Self {
        major: DLPACK_MAJOR_VERSION,
        minor: DLPACK_MINOR_VERSION,
    };
}

/// A C enum as a newtype, so that any value is sound: its constants from one table,
/// which also gives each known value's name in the header and the `Debug` output.
macro_rules! c_enum {
    (
        $(#[doc = $doc:literal])*
        pub struct $ty:ident(pub $repr:ty);
        $($(#[doc = $value_doc:literal])* $name:ident = $value:literal,)*
    ) => {
        $(#[doc = $doc])*
        #[repr(transparent)]
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $ty(pub $repr);

        #[allow(non_upper_case_globals)]
        impl $ty {
            $($(#[doc = $value_doc])* pub const $name: Self = Self($value);)*

            /// The header's name of a known value (the constant's own name), `None`
            /// for an unknown one.
            pub const fn name(self) -> Option<&'static str> {
                Some(match self.0 {
                    $($value => stringify!($name),)*
                    _ => return None,
                })
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(name) => f.write_str(name),
                    None => write!(f, concat!(stringify!($ty), "({})"), self.0),
                }
            }
        }
    };
}

c_enum! {
    /// `DLDeviceType`: the kind of device that holds the data.
    ///
    /// A C `enum` of `int32_t` size, modelled as a newtype so that any value is sound.
    pub struct DLDeviceType(pub i32);

    /// `kDLCPU`: ordinary host memory.
    kDLCPU = 1,
    /// `kDLCUDA`: CUDA device memory.
    kDLCUDA = 2,
    /// `kDLCUDAHost`: pinned host memory from `cudaMallocHost`, readable by the CPU.
    kDLCUDAHost = 3,
    /// `kDLOpenCL`: OpenCL device memory.
    kDLOpenCL = 4,
    /// `kDLVulkan`: Vulkan buffer.
    kDLVulkan = 7,
    /// `kDLMetal`: Metal buffer (Apple GPU).
    kDLMetal = 8,
    /// `kDLVPI`: Verilog simulator buffer.
    kDLVPI = 9,
    /// `kDLROCM`: ROCm device memory.
    kDLROCM = 10,
    /// `kDLROCMHost`: pinned host memory from `hipMallocHost`, readable by the CPU.
    kDLROCMHost = 11,
    /// `kDLExtDev`: reserved for extension devices.
    kDLExtDev = 12,
    /// `kDLCUDAManaged`: CUDA managed (unified) memory, readable by the CPU.
    kDLCUDAManaged = 13,
    /// `kDLOneAPI`: oneAPI (SYCL) unified shared memory.
    kDLOneAPI = 14,
    /// `kDLWebGPU`: WebGPU buffer.
    kDLWebGPU = 15,
    /// `kDLHexagon`: Qualcomm Hexagon DSP.
    kDLHexagon = 16,
    /// `kDLMAIA`: Microsoft MAIA device.
    kDLMAIA = 17,
    /// `kDLTrn`: AWS Trainium device.
    kDLTrn = 18,
}

/// `DLDevice`: a device type and an ordinal on it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct DLDevice {
    /// The kind of device.
    pub device_type: DLDeviceType,
    /// The device ordinal; 0 for CPU, pinned and managed memory.
    pub device_id: i32,
}

c_enum! {
    /// `DLDataTypeCode`: the kind of a scalar, stored in [`DLDataType::code`] as `uint8_t`.
    pub struct DLDataTypeCode(pub u8);

    /// `kDLInt`: signed integer.
    kDLInt = 0,
    /// `kDLUInt`: unsigned integer.
    kDLUInt = 1,
    /// `kDLFloat`: IEEE 754 floating point.
    kDLFloat = 2,
    /// `kDLOpaqueHandle`: opaque handle, for testing only.
    kDLOpaqueHandle = 3,
    /// `kDLBfloat`: bfloat16.
    kDLBfloat = 4,
    /// `kDLComplex`: complex number stored as `(re, im)`.
    kDLComplex = 5,
    /// `kDLBool`: boolean, one byte holding 0 or 1.
    kDLBool = 6,
    /// `kDLFloat8_e3m4`.
    kDLFloat8_e3m4 = 7,
    /// `kDLFloat8_e4m3`.
    kDLFloat8_e4m3 = 8,
    /// `kDLFloat8_e4m3b11fnuz`.
    kDLFloat8_e4m3b11fnuz = 9,
    /// `kDLFloat8_e4m3fn`.
    kDLFloat8_e4m3fn = 10,
    /// `kDLFloat8_e4m3fnuz`.
    kDLFloat8_e4m3fnuz = 11,
    /// `kDLFloat8_e5m2`.
    kDLFloat8_e5m2 = 12,
    /// `kDLFloat8_e5m2fnuz`.
    kDLFloat8_e5m2fnuz = 13,
    /// `kDLFloat8_e8m0fnu`.
    kDLFloat8_e8m0fnu = 14,
    /// `kDLFloat6_e2m3fn` (bits must be 6).
    kDLFloat6_e2m3fn = 15,
    /// `kDLFloat6_e3m2fn` (bits must be 6).
    kDLFloat6_e3m2fn = 16,
    /// `kDLFloat4_e2m1fn` (bits must be 4).
    kDLFloat4_e2m1fn = 17,
}

/// `DLDataType`: the type of one element, e.g. float32 is `(kDLFloat, 32, 1)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct DLDataType {
    /// The kind of scalar.
    pub code: DLDataTypeCode,
    /// Bits per lane.
    pub bits: u8,
    /// Lanes per element (1 for scalars; more for vector types).
    pub lanes: u16,
}

/// `DLTensor`: a plain, unowned description of strided memory.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    /// Opaque data pointer; element 0 is at `data + byte_offset`. NULL is allowed for
    /// a tensor with no elements.
    pub data: *mut c_void,
    /// Where the data lives.
    pub device: DLDevice,
    /// Number of dimensions; 0 for a scalar.
    pub ndim: i32,
    /// Element type.
    pub dtype: DLDataType,
    /// `ndim` extents. May be NULL when `ndim == 0` (since DLPack 1.3).
    pub shape: *mut i64,
    /// `ndim` strides in elements (not bytes). NULL means C-contiguous (before DLPack
    /// 1.2; later producers must fill it when `ndim != 0`).
    pub strides: *mut i64,
    /// Offset in bytes from `data` to element 0.
    pub byte_offset: u64,
}

/// `DLManagedTensor`: the legacy (pre-1.0) owning wrapper of a [`DLTensor`].
///
/// Deprecated by the standard in favour of [`DLManagedTensorVersioned`], but still the
/// only form some consumers (JAX) ask for.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    /// The tensor.
    pub dl_tensor: DLTensor,
    /// The producer's context, opaque to the consumer.
    pub manager_ctx: *mut c_void,
    /// Frees the tensor, this struct included; called once by the consumer. May be NULL.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// `DLManagedTensorVersioned`: the DLPack 1.x owning wrapper of a [`DLTensor`].
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// ABI version. A consumer must check `version.major` before reading anything but
    /// `manager_ctx` and `deleter`.
    pub version: DLPackVersion,
    /// The producer's context, opaque to the consumer.
    pub manager_ctx: *mut c_void,
    /// Frees the tensor, this struct included; called once by the consumer. May be NULL.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// Bitmask of `DLPACK_FLAG_BITMASK_*`.
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

/// `DLPackSetError`: how a [`DLPackManagedTensorAllocator`] reports an error (`kind` is
/// a Python exception name such as `"MemoryError"`).
pub type DLPackSetError =
    unsafe extern "C" fn(error_ctx: *mut c_void, kind: *const c_char, message: *const c_char);

/// `DLPackManagedTensorAllocator`: allocates a tensor like `prototype` (shape, dtype,
/// device); 0 on success, -1 after calling `set_error`.
pub type DLPackManagedTensorAllocator = unsafe extern "C" fn(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: Option<DLPackSetError>,
) -> c_int;

/// `DLPackManagedTensorFromPyObjectNoSync`: an owned tensor of a Python object of the
/// producer's type; 0 on success, -1 with a Python exception set. No stream
/// synchronization.
pub type DLPackManagedTensorFromPyObjectNoSync =
    unsafe extern "C" fn(py_object: *mut c_void, out: *mut *mut DLManagedTensorVersioned) -> c_int;

/// `DLPackManagedTensorToPyObjectNoSync`: a Python object of the producer's type over
/// `tensor`, whose ownership it takes; 0 on success, -1 with a Python exception set.
pub type DLPackManagedTensorToPyObjectNoSync = unsafe extern "C" fn(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int;

/// `DLPackDLTensorFromPyObjectNoSync`: a non-owning description of a Python object's
/// tensor, valid until control returns to Python; 0 on success, -1 with a Python
/// exception set.
pub type DLPackDLTensorFromPyObjectNoSync =
    unsafe extern "C" fn(py_object: *mut c_void, out: *mut DLTensor) -> c_int;

/// `DLPackCurrentWorkStream`: the producer's current stream on a device (NULL for the
/// CPU); 0 on success, -1 with a Python exception set.
pub type DLPackCurrentWorkStream = unsafe extern "C" fn(
    device_type: DLDeviceType,
    device_id: i32,
    out_current_stream: *mut *mut c_void,
) -> c_int;

/// `DLPackExchangeAPIHeader`: the stable head of a [`DLPackExchangeAPI`] table.
#[repr(C)]
#[derive(Debug)]
pub struct DLPackExchangeAPIHeader {
    /// The table's version: a consumer checks `major` before reading anything else.
    pub version: DLPackVersion,
    /// An older table of the same producer, or NULL.
    pub prev_api: *mut DLPackExchangeAPIHeader,
}

/// `DLPackExchangeAPI`: the C exchange API (DLPack 1.3), a table of functions that a
/// Python type publishes as `type(obj).__dlpack_c_exchange_api__`, a capsule named
/// `"dlpack_exchange_api"`, so that C-level consumers skip the `__dlpack__` call. The
/// table lives as long as the process.
///
/// Every entry but `dltensor_from_py_object_no_sync` must be non-NULL; a consumer
/// checks anyway, since the table comes from foreign code.
#[repr(C)]
#[derive(Debug)]
pub struct DLPackExchangeAPI {
    /// Version and chain.
    pub header: DLPackExchangeAPIHeader,
    /// Allocates a tensor like a prototype.
    pub managed_tensor_allocator: Option<DLPackManagedTensorAllocator>,
    /// An owned tensor of an object.
    pub managed_tensor_from_py_object_no_sync: Option<DLPackManagedTensorFromPyObjectNoSync>,
    /// An object over an owned tensor.
    pub managed_tensor_to_py_object_no_sync: Option<DLPackManagedTensorToPyObjectNoSync>,
    /// A borrowed description of an object's tensor (may be NULL).
    pub dltensor_from_py_object_no_sync: Option<DLPackDLTensorFromPyObjectNoSync>,
    /// The producer's current stream.
    pub current_work_stream: Option<DLPackCurrentWorkStream>,
}

/// The name of the capsule that holds a [`DLPackExchangeAPI`].
pub const DLPACK_EXCHANGE_API_CAPSULE_NAME: &core::ffi::CStr = c"dlpack_exchange_api";

// Layout checks against `dlpack.h` on 64-bit targets (gcc x86_64 LP64 offsets).
#[cfg(target_pointer_width = "64")]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<DLPackVersion>() == 8 && align_of::<DLPackVersion>() == 4);
    assert!(size_of::<DLDeviceType>() == 4);
    assert!(size_of::<DLDevice>() == 8 && offset_of!(DLDevice, device_id) == 4);
    assert!(size_of::<DLDataTypeCode>() == 1);
    assert!(size_of::<DLDataType>() == 4 && align_of::<DLDataType>() == 2);
    assert!(offset_of!(DLDataType, bits) == 1 && offset_of!(DLDataType, lanes) == 2);
    assert!(size_of::<DLTensor>() == 48 && align_of::<DLTensor>() == 8);
    assert!(offset_of!(DLTensor, data) == 0);
    assert!(offset_of!(DLTensor, device) == 8);
    assert!(offset_of!(DLTensor, ndim) == 16);
    assert!(offset_of!(DLTensor, dtype) == 20);
    assert!(offset_of!(DLTensor, shape) == 24);
    assert!(offset_of!(DLTensor, strides) == 32);
    assert!(offset_of!(DLTensor, byte_offset) == 40);
    assert!(size_of::<DLManagedTensor>() == 64);
    assert!(offset_of!(DLManagedTensor, manager_ctx) == 48);
    assert!(offset_of!(DLManagedTensor, deleter) == 56);
    assert!(size_of::<DLManagedTensorVersioned>() == 80);
    assert!(offset_of!(DLManagedTensorVersioned, manager_ctx) == 8);
    assert!(offset_of!(DLManagedTensorVersioned, deleter) == 16);
    assert!(offset_of!(DLManagedTensorVersioned, flags) == 24);
    assert!(offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
    assert!(size_of::<DLPackExchangeAPIHeader>() == 16);
    assert!(offset_of!(DLPackExchangeAPIHeader, prev_api) == 8);
    assert!(size_of::<DLPackExchangeAPI>() == 56 && align_of::<DLPackExchangeAPI>() == 8);
    assert!(offset_of!(DLPackExchangeAPI, managed_tensor_allocator) == 16);
    assert!(offset_of!(DLPackExchangeAPI, managed_tensor_from_py_object_no_sync) == 24);
    assert!(offset_of!(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync) == 32);
    assert!(offset_of!(DLPackExchangeAPI, dltensor_from_py_object_no_sync) == 40);
    assert!(offset_of!(DLPackExchangeAPI, current_work_stream) == 48);
};
