use dlpack_core::ToDLPack;
use ndarray::Array1;

// Every mistake in one input is reported in one compilation.
#[derive(ToDLPack)]
#[dlpack(crate = "not a path", bound = "T", strict)]
struct Model {
    #[dlpack(renam = "w", skip, skip)]
    weight: Array1<f32>,
    #[dlpack(rename = "fc.bias", flatten = true)]
    bias: Array1<f32>,
    #[dlpack(rename = "")]
    scale: Array1<f32>,
    #[dlpack(skip, rename = "steps")]
    steps: u64,
    #[dlpack(rename = "head")]
    head_a: Array1<f32>,
    #[dlpack(rename = "head")]
    head_b: Array1<f32>,
}

fn main() {}
