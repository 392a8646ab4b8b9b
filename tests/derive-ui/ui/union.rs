use dlpack_core::ToDLPack;

#[derive(ToDLPack)]
union Bits {
    int: u32,
    float: f32,
}

fn main() {}
