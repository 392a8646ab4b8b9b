//! Bridges to other crates' arrays and tensors: ndarray's arrays, dlpark's tensors
//! (candle, image, cudarc through it), burn's flex tensors. (File formats are not
//! bridges: safetensors is `crate::safetensors`.)

#[cfg(feature = "burn")]
pub(crate) mod burn;
#[cfg(feature = "dlpark")]
pub(crate) mod dlpark;
#[cfg(feature = "ndarray")]
pub(crate) mod ndarray;
