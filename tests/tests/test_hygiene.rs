//! The generated code names everything by absolute path: it compiles without the
//! prelude and with the prelude's names taken by unrelated local items, and it trips no
//! lint that a strict user crate might deny.
#![no_implicit_prelude]
#![forbid(unsafe_code)]
#![deny(
    unused_qualifications,
    unused_results,
    unused_import_braces,
    trivial_casts,
    clippy::all,
    clippy::pedantic
)]
#![allow(dead_code, non_camel_case_types)]

// Try to trip up the generated code if it reaches for the prelude.
struct Result;
struct Option;
struct Ok;
struct Err;
struct Some;
struct None;
struct String;
struct Default;
struct Vec;
struct Box;
struct ToDLPack;
struct FromDLPack;
struct TensorBatch;
struct dlpack_core;

#[derive(::dlpack_core::ToDLPack, ::dlpack_core::FromDLPack)]
struct Linear {
    weight: ::ndarray::Array2<f32>,
    bias: ::std::option::Option<::ndarray::Array1<f32>>,
}

#[derive(::std::default::Default)]
struct Steps(u64);

#[derive(::dlpack_core::ToDLPack, ::dlpack_core::FromDLPack)]
struct Model<T: ::dlpack_core::Element> {
    #[dlpack(rename = "embedding")]
    embed: ::ndarray::Array2<T>,
    layers: ::std::vec::Vec<Linear>,
    #[dlpack(flatten)]
    head: Linear,
    #[dlpack(skip)]
    steps: Steps,
}

#[derive(::dlpack_core::ToDLPack, ::dlpack_core::FromDLPack)]
struct Pair(::ndarray::Array1<i32>, #[dlpack(skip)] Steps);

#[derive(::dlpack_core::ToDLPack, ::dlpack_core::FromDLPack)]
struct Unit;

#[test]
fn derives_without_prelude() {
    use ::dlpack_core::{FromDLPack as _, ToDLPack as _};
    use ::std::iter::Iterator as _;

    let linear = || Linear {
        weight: ::ndarray::Array2::zeros((2, 2)),
        bias: ::std::option::Option::None,
    };
    let model = Model::<f32> {
        embed: ::ndarray::Array2::zeros((3, 2)),
        layers: ::std::vec![linear()],
        head: linear(),
        steps: Steps(5),
    };
    let batch = model.to_dlpack().unwrap();
    let names: ::std::vec::Vec<&str> = batch.names().collect();
    ::std::assert_eq!(names, ["embedding", "layers.0.weight", "weight"]);
    let back = Model::<f32>::from_dlpack(batch).unwrap();
    ::std::assert_eq!(back.steps.0, 0);
    ::std::assert_eq!(back.layers.len(), 1);

    let ones = || ::ndarray::Array1::from_elem(2, 1);
    let pair = Pair::from_dlpack(Pair(ones(), Steps(1)).to_dlpack().unwrap());
    ::std::assert_eq!(pair.unwrap().0, ones());
    ::std::assert!(Unit::from_dlpack(Unit.to_dlpack().unwrap()).is_ok());
}
