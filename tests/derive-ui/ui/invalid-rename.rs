use dlpack_core::ToDLPack;
use ndarray::Array1;

#[derive(ToDLPack)]
struct Linear {
    #[dlpack(rename = "")]
    weight: Array1<f32>,
    #[dlpack(rename = "fc1.bias")]
    bias: Array1<f32>,
    #[dlpack(rename = 3)]
    scale: Array1<f32>,
    #[dlpack(rename)]
    shift: Array1<f32>,
}

fn main() {}
