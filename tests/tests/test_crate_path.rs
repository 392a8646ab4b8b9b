//! `#[dlpack(crate = "...")]`: the generated code reaches `dlpack_core` through the given
//! path only, as it must when the crate is re-exported or renamed.

use dlpack_core::{FromDLPack, ToDLPack};
use ndarray::{Array1, array};

/// What a crate that re-exports `dlpack_core` (and its derives) would offer.
mod reexport {
    pub(crate) use ::dlpack_core as dlpack;
}

/// Only the private module, to show that the generated code needs nothing else.
mod minimal {
    pub(crate) mod __private {
        pub(crate) use ::dlpack_core::__private::*;
    }
}

#[derive(Debug, PartialEq, reexport::dlpack::ToDLPack, reexport::dlpack::FromDLPack)]
#[dlpack(crate = "reexport::dlpack")]
struct ViaReexport {
    weight: Array1<f32>,
}

#[derive(Debug, PartialEq, ToDLPack, FromDLPack)]
#[dlpack(crate = "crate::minimal")]
struct ViaMinimal {
    inner: ViaReexport,
    #[dlpack(rename = "b")]
    bias: Option<Array1<f32>>,
}

#[derive(Debug, PartialEq, ToDLPack, FromDLPack)]
#[dlpack(crate = "::dlpack_core")]
struct ViaAbsolute(ViaMinimal);

mod nested {
    use ndarray::Array1;

    /// A path relative to the module where the derive is used.
    #[derive(dlpack_core::ToDLPack, dlpack_core::FromDLPack)]
    #[dlpack(crate = "super::reexport::dlpack")]
    pub(crate) struct ViaSuper {
        pub(crate) data: Array1<u8>,
    }
}

#[test]
fn crate_paths() {
    let value = ViaAbsolute(ViaMinimal {
        inner: ViaReexport {
            weight: array![1.0, 2.0],
        },
        bias: Some(array![3.0]),
    });
    let batch = value.to_dlpack().unwrap();
    assert_eq!(batch.names().collect::<Vec<_>>(), ["0.inner.weight", "0.b"]);
    let back = ViaAbsolute::from_dlpack(batch).unwrap();
    assert_eq!(back.0.inner.weight, array![1.0, 2.0]);
    assert_eq!(back.0.bias, Some(array![3.0]));

    let batch = nested::ViaSuper { data: array![7u8] }.to_dlpack().unwrap();
    assert_eq!(
        nested::ViaSuper::from_dlpack(batch).unwrap().data,
        array![7]
    );
}
