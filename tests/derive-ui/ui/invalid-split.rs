use dlpack_core::FromDLPack;
use ndarray::Array2;

#[derive(FromDLPack)]
struct Attention {
    #[dlpack(split = -1)]
    q: Array2<f32>,
    #[dlpack(split = "0")]
    k: Array2<f32>,
    #[dlpack(split)]
    v: Array2<f32>,
    #[dlpack(split = 1u8)]
    o: Array2<f32>,
    #[dlpack(split = 0, split = 1)]
    up: Array2<f32>,
    #[dlpack(split = 0, skip)]
    down: Array2<f32>,
}

fn main() {}
