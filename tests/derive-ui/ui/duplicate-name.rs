use dlpack_core::ToDLPack;
use ndarray::Array1;

#[derive(ToDLPack)]
struct Linear {
    weight: Array1<f32>,
    #[dlpack(rename = "weight")]
    kernel: Array1<f32>,
    #[dlpack(rename = "bias")]
    offset: Array1<f32>,
    bias: Array1<f32>,
    // Skipped and flattened fields have no name of their own: no error for these.
    #[dlpack(skip)]
    weight_decay: f32,
    #[dlpack(flatten)]
    extra: Extra,
}

#[derive(ToDLPack)]
struct Extra {
    weight: Array1<f32>,
}

#[derive(ToDLPack)]
struct Pair(Array1<f32>, #[dlpack(rename = "0")] Array1<f32>);

fn main() {}
