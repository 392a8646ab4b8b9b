// What a model shared with Python (`TensorFields`) refuses: an `Array` field (its buffer
// would be freed under Python's view), and a field exchanged through a `with` module.
use dlpack_core::{FromDLPack, Parameter1, TensorBatch, ToDLPack};
use dlpack_core::implement::TensorFields;
use ndarray::Array1;

#[derive(ToDLPack, FromDLPack)]
struct Owned {
    weight: Array1<f32>,
}

#[derive(ToDLPack, FromDLPack)]
struct WithModule {
    weight: Parameter1<f32>,
    #[dlpack(with = "plain")]
    extra: Array1<f32>,
}

mod plain {
    use dlpack_core::{FromDLPack, Result, TensorBatch, ToDLPack};
    use ndarray::Array1;

    pub fn to_dlpack_into(value: Array1<f32>, prefix: &str, batch: &mut TensorBatch) -> Result<()> {
        value.to_dlpack_into(prefix, batch)
    }

    pub fn from_dlpack_in(prefix: &str, batch: &mut TensorBatch) -> Result<Array1<f32>> {
        Array1::from_dlpack_in(prefix, batch)
    }
}

fn shareable<T: TensorFields>() {}

fn main() {
    let _ = TensorBatch::new();
    shareable::<Owned>();
    shareable::<WithModule>();
}
