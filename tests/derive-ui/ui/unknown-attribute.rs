use dlpack_core::ToDLPack;
use ndarray::Array1;

#[derive(ToDLPack)]
#[dlpack(crate_path = "dlpack_core")]
struct Linear {
    #[dlpack(renam = "w")]
    weight: Array1<f32>,
    #[dlpack(skip_serializing)]
    bias: Array1<f32>,
    #[dlpack(dlpack::rename = "s")]
    scale: Array1<f32>,
}

fn main() {}
