use dlpack_core::{FromDLPack, ToDLPack};
use ndarray::Array1;

#[derive(ToDLPack, FromDLPack)]
struct Model {
    weight: Array1<f32>,
    name: String,
    values: Vec<f32>,
}

fn main() {}
