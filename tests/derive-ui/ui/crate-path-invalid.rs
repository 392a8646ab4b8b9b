use dlpack_core::ToDLPack;
use ndarray::Array1;

#[derive(ToDLPack)]
#[dlpack(crate = "dlpack core")]
struct A {
    weight: Array1<f32>,
}

#[derive(ToDLPack)]
#[dlpack(crate = dlpack_core)]
struct B {
    weight: Array1<f32>,
}

#[derive(ToDLPack)]
#[dlpack(crate = "dlpack_core::<f32>")]
struct C {
    weight: Array1<f32>,
}

fn main() {}
