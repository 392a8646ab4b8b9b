use dlpack_core::{FromDLPack, ToDLPack};
use ndarray::Array1;

mod opaque {}

#[derive(ToDLPack, FromDLPack)]
struct Model {
    // Not a path.
    #[dlpack(with = "not a path")]
    a: Array1<f32>,
    // `with` and `skip` exclude each other.
    #[dlpack(with = "opaque", skip)]
    b: Array1<f32>,
}

fn main() {}
