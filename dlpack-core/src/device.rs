//! Where a tensor's memory lives.

use core::fmt;

use crate::ffi::{DLDevice, DLDeviceType};

/// A device: a DLPack device type and an ordinal.
///
/// Displays like PyTorch names devices: `cpu:0`, `cuda:1`, `cuda_host:0`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    /// The kind of device.
    pub device_type: DLDeviceType,
    /// The ordinal of the device (0 for host memory).
    pub device_id: i32,
}

impl Device {
    /// Ordinary host memory, `(kDLCPU, 0)`.
    pub const CPU: Self = Self {
        device_type: DLDeviceType::kDLCPU,
        device_id: 0,
    };

    /// A device from its parts.
    pub const fn new(device_type: DLDeviceType, device_id: i32) -> Self {
        Self {
            device_type,
            device_id,
        }
    }

    /// Whether the CPU can read and write this memory directly: `kDLCPU`, `kDLCUDAHost`,
    /// `kDLROCMHost` and `kDLCUDAManaged`, as NumPy accepts.
    pub const fn is_cpu_accessible(self) -> bool {
        matches!(
            self.device_type,
            DLDeviceType::kDLCPU
                | DLDeviceType::kDLCUDAHost
                | DLDeviceType::kDLROCMHost
                | DLDeviceType::kDLCUDAManaged
        )
    }

    /// The raw C struct.
    pub const fn to_raw(self) -> DLDevice {
        DLDevice {
            device_type: self.device_type,
            device_id: self.device_id,
        }
    }

    /// The device of a raw C struct; any value is accepted.
    pub const fn from_raw(raw: DLDevice) -> Self {
        Self::new(raw.device_type, raw.device_id)
    }

    fn type_name(self) -> Option<&'static str> {
        Some(match self.device_type {
            DLDeviceType::kDLCPU => "cpu",
            DLDeviceType::kDLCUDA => "cuda",
            DLDeviceType::kDLCUDAHost => "cuda_host",
            DLDeviceType::kDLOpenCL => "opencl",
            DLDeviceType::kDLVulkan => "vulkan",
            DLDeviceType::kDLMetal => "metal",
            DLDeviceType::kDLVPI => "vpi",
            DLDeviceType::kDLROCM => "rocm",
            DLDeviceType::kDLROCMHost => "rocm_host",
            DLDeviceType::kDLExtDev => "ext_dev",
            DLDeviceType::kDLCUDAManaged => "cuda_managed",
            DLDeviceType::kDLOneAPI => "oneapi",
            DLDeviceType::kDLWebGPU => "webgpu",
            DLDeviceType::kDLHexagon => "hexagon",
            DLDeviceType::kDLMAIA => "maia",
            DLDeviceType::kDLTrn => "trn",
            _ => return None,
        })
    }
}

impl Default for Device {
    fn default() -> Self {
        Self::CPU
    }
}

impl From<DLDevice> for Device {
    fn from(raw: DLDevice) -> Self {
        Self::from_raw(raw)
    }
}

impl From<Device> for DLDevice {
    fn from(device: Device) -> Self {
        device.to_raw()
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.type_name() {
            Some(name) => write!(f, "{name}:{}", self.device_id),
            None => write!(f, "device_type{}:{}", self.device_type.0, self.device_id),
        }
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Device({self})")
    }
}
