use dlpack_core::ToDLPack;
use ndarray::Array1;

#[derive(ToDLPack)]
#[dlpack(crate = "dlpack_core")]
#[dlpack(crate = "dlpack_core", bound = "", bound = "")]
struct Linear {
    #[dlpack(rename = "w", rename = "weights")]
    weight: Array1<f32>,
    #[dlpack(skip)]
    #[dlpack(skip)]
    steps: u64,
    #[dlpack(flatten, flatten)]
    extra: Extra,
}

#[derive(ToDLPack)]
struct Extra {
    scale: Array1<f32>,
}

fn main() {}
