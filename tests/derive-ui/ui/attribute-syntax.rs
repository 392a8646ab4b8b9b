use dlpack_core::ToDLPack;
use ndarray::Array1;

#[derive(ToDLPack)]
#[dlpack]
#[dlpack = "x"]
#[dlpack(bound = "T")]
struct Model<T> {
    #[dlpack(skip = true)]
    steps: u64,
    #[dlpack(flatten(deep))]
    inner: Inner<T>,
    #[dlpack(rename "w")]
    weight: Array1<f32>,
}

#[derive(ToDLPack)]
struct Inner<T> {
    data: Array1<T>,
}

fn main() {}
