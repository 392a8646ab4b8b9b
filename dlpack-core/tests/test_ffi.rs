//! The C ABI against `dlpack.h` 1.3: the constants, device types and type codes, and
//! their names. Sizes, alignments and field offsets are checked at compile time, on
//! every 64-bit build, beside the structs (`src/ffi.rs`); the few layout facts that check
//! does not state are asserted here.
#![cfg(target_pointer_width = "64")]

use std::mem::{align_of, offset_of, size_of};

use dlpack_core::ffi::*;

#[test]
fn layout_beyond_the_compile_time_check() {
    assert_eq!(align_of::<DLDevice>(), 4);
    assert_eq!(align_of::<DLManagedTensor>(), 8);
    assert_eq!(align_of::<DLManagedTensorVersioned>(), 8);
    // A nullable C function pointer is pointer-sized.
    assert_eq!(
        size_of::<Option<unsafe extern "C" fn(*mut DLManagedTensor)>>(),
        8
    );
    assert_eq!(offset_of!(DLPackVersion, major), 0);
    assert_eq!(offset_of!(DLPackVersion, minor), 4);
    assert_eq!(offset_of!(DLDevice, device_type), 0);
    assert_eq!(offset_of!(DLDataType, code), 0);
    assert_eq!(offset_of!(DLManagedTensor, dl_tensor), 0);
    assert_eq!(offset_of!(DLManagedTensorVersioned, version), 0);
}

#[test]
fn constants_match_the_header() {
    assert_eq!((DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION), (1, 3));
    assert_eq!(DLPACK_FLAG_BITMASK_READ_ONLY, 1);
    assert_eq!(DLPACK_FLAG_BITMASK_IS_COPIED, 2);
    assert_eq!(DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, 4);
    let devices = [
        (DLDeviceType::kDLCPU, 1),
        (DLDeviceType::kDLCUDA, 2),
        (DLDeviceType::kDLCUDAHost, 3),
        (DLDeviceType::kDLOpenCL, 4),
        (DLDeviceType::kDLVulkan, 7),
        (DLDeviceType::kDLMetal, 8),
        (DLDeviceType::kDLVPI, 9),
        (DLDeviceType::kDLROCM, 10),
        (DLDeviceType::kDLROCMHost, 11),
        (DLDeviceType::kDLExtDev, 12),
        (DLDeviceType::kDLCUDAManaged, 13),
        (DLDeviceType::kDLOneAPI, 14),
        (DLDeviceType::kDLWebGPU, 15),
        (DLDeviceType::kDLHexagon, 16),
        (DLDeviceType::kDLMAIA, 17),
        (DLDeviceType::kDLTrn, 18),
    ];
    for (device, value) in devices {
        assert_eq!(device.0, value);
        assert!(device.name().is_some());
    }
    assert_eq!(DLDeviceType(5).name(), None);
    let codes = [
        (DLDataTypeCode::kDLInt, 0),
        (DLDataTypeCode::kDLUInt, 1),
        (DLDataTypeCode::kDLFloat, 2),
        (DLDataTypeCode::kDLOpaqueHandle, 3),
        (DLDataTypeCode::kDLBfloat, 4),
        (DLDataTypeCode::kDLComplex, 5),
        (DLDataTypeCode::kDLBool, 6),
        (DLDataTypeCode::kDLFloat8_e3m4, 7),
        (DLDataTypeCode::kDLFloat8_e4m3, 8),
        (DLDataTypeCode::kDLFloat8_e4m3b11fnuz, 9),
        (DLDataTypeCode::kDLFloat8_e4m3fn, 10),
        (DLDataTypeCode::kDLFloat8_e4m3fnuz, 11),
        (DLDataTypeCode::kDLFloat8_e5m2, 12),
        (DLDataTypeCode::kDLFloat8_e5m2fnuz, 13),
        (DLDataTypeCode::kDLFloat8_e8m0fnu, 14),
        (DLDataTypeCode::kDLFloat6_e2m3fn, 15),
        (DLDataTypeCode::kDLFloat6_e3m2fn, 16),
        (DLDataTypeCode::kDLFloat4_e2m1fn, 17),
    ];
    for (code, value) in codes {
        assert_eq!(code.0, value);
        assert!(code.name().is_some());
    }
    assert_eq!(DLDataTypeCode(18).name(), None);
}
