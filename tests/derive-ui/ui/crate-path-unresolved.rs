use dlpack_core::ToDLPack;
use ndarray::Array1;

#[derive(ToDLPack)]
#[dlpack(crate = "dlpack")]
struct Linear {
    weight: Array1<f32>,
}

fn main() {}
