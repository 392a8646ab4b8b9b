//! Bridges to other crates' arrays and tensors.

#[cfg(feature = "burn")]
pub(crate) mod burn;
#[cfg(feature = "dlpark")]
pub(crate) mod dlpark;
#[cfg(feature = "ndarray")]
pub(crate) mod ndarray;
#[cfg(feature = "safetensors")]
pub mod safetensors;
