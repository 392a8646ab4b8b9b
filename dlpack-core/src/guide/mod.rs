//! Guides: the rules and recipes that span several items, each on a page of its own.
//!
//! - [`import_safety`]: which imports give mutable views, and what each one trusts.
#![cfg_attr(
    feature = "dlpark",
    doc = "- [`dlpark`]: zero-copy hand-off to and from the `dlpark` crate."
)]
#![cfg_attr(
    feature = "burn",
    doc = "- [`burn`]: burn's flex tensors, zero-copy both ways."
)]
//!
//! Weights on disk are the `safetensors` module's page (feature `safetensors`), and
//! Python extensions the `python` module's (feature `pyo3`); the crate's front page
//! links every guide.

#[cfg(feature = "burn")]
#[cfg_attr(docsrs, doc(cfg(feature = "burn")))]
pub mod burn;
#[cfg(feature = "dlpark")]
#[cfg_attr(docsrs, doc(cfg(feature = "dlpark")))]
pub mod dlpark;
pub mod import_safety;
