use dlpack_core::{FromDLPack, ToDLPack};

struct Opaque;

mod opaque {
    // No `to_dlpack_into` / `from_dlpack_in` here.
}

#[derive(ToDLPack, FromDLPack)]
struct Model {
    #[dlpack(with = "opaque")]
    field: Opaque,
}

fn main() {}
