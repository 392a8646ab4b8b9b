//! Guides: the rules and recipes that span several items, each on a page of its own.
//!
//! - [`import_safety`]: which imports give mutable views, and what each one trusts.
//! - [`dlpark`]: zero-copy hand-off to and from the `dlpark` crate (feature `dlpark`).
//! - [`burn`]: burn's flex tensors, zero-copy both ways (feature `burn`).
//!
//! Weights on disk are the [`safetensors`] module's page, and Python extensions the
//! [`python`] module's.
//!
#![cfg_attr(feature = "dlpark", doc = "[`dlpark`]: self::dlpark")]
#![cfg_attr(
    not(feature = "dlpark"),
    doc = "[`dlpark`]: https://docs.rs/dlpack-core/latest/dlpack_core/guide/dlpark/index.html"
)]
#![cfg_attr(feature = "burn", doc = "[`burn`]: self::burn")]
#![cfg_attr(
    not(feature = "burn"),
    doc = "[`burn`]: https://docs.rs/dlpack-core/latest/dlpack_core/guide/burn/index.html"
)]
#![cfg_attr(feature = "pyo3", doc = "[`python`]: crate::python")]
#![cfg_attr(
    not(feature = "pyo3"),
    doc = "[`python`]: https://docs.rs/dlpack-core/latest/dlpack_core/python/index.html"
)]
#![cfg_attr(feature = "safetensors", doc = "[`safetensors`]: crate::safetensors")]
#![cfg_attr(
    not(feature = "safetensors"),
    doc = "[`safetensors`]: https://docs.rs/dlpack-core/latest/dlpack_core/safetensors/index.html"
)]

#[cfg(feature = "burn")]
#[cfg_attr(docsrs, doc(cfg(feature = "burn")))]
pub mod burn;
#[cfg(feature = "dlpark")]
#[cfg_attr(docsrs, doc(cfg(feature = "dlpark")))]
pub mod dlpark;
pub mod import_safety;
