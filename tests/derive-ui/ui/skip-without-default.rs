use dlpack_core::{FromDLPack, ToDLPack};
use ndarray::Array1;

struct Optimizer;

#[derive(ToDLPack, FromDLPack)]
struct Model {
    weight: Array1<f32>,
    #[dlpack(skip)]
    optimizer: Optimizer,
}

fn main() {}
