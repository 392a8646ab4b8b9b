use dlpack_core::ToDLPack;
use ndarray::Array1;

#[derive(ToDLPack)]
struct Model {
    #[dlpack(skip, rename = "w")]
    weight: Array1<f32>,
    #[dlpack(skip, flatten)]
    inner: Inner,
    #[dlpack(flatten, rename = "x")]
    other: Inner,
}

#[derive(ToDLPack)]
struct Inner {
    scale: Array1<f32>,
}

fn main() {}
