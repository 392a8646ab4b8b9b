use dlpack_core::{FromDLPack, ToDLPack};
use ndarray::Array1;

#[derive(ToDLPack, FromDLPack)]
enum Params {
    Dense(Array1<f32>),
    Sparse { values: Array1<f32> },
}

fn main() {}
