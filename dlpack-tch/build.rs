//! Compiles the C++ shim over libtorch's DLPack converter, against the libtorch that
//! `torch-sys` found (it passes its library folder as `DEP_TCH_LIBTORCH_LIB`).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src/shim.cpp");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if env::var_os("CARGO_FEATURE_DOC_ONLY").is_some() {
        return;
    }
    let Some(lib) = env::var_os("DEP_TCH_LIBTORCH_LIB").map(PathBuf::from) else {
        panic!(
            "dlpack-tch: torch-sys did not say where libtorch is (DEP_TCH_LIBTORCH_LIB is \
             unset). Point torch-sys at libtorch 2.13.0: LIBTORCH_USE_PYTORCH=1 with \
             `pip install torch==2.13.0` in the active Python, or LIBTORCH=/path/to/libtorch."
        );
    };
    let include = lib.join("../include");
    // `torch-sys` builds its own C++ with the ABI of the libtorch it found; read it back
    // from the library, as a mismatch only shows at link time.
    let cxx11_abi = if libtorch_uses_cxx11_abi(&lib) {
        "1"
    } else {
        "0"
    };
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .define("_GLIBCXX_USE_CXX11_ABI", cxx11_abi)
        .file("src/shim.cpp")
        .compile("dlpack_tch_shim");
    // Tests, examples and binaries of this package find libtorch without
    // LD_LIBRARY_PATH (other crates set their own rpath or LD_LIBRARY_PATH, as with tch).
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("windows") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    }
}

/// Whether libtorch was built with the C++11 `std::string` ABI: its exported symbols
/// then name `std::__cxx11::basic_string`.
fn libtorch_uses_cxx11_abi(lib: &std::path::Path) -> bool {
    for name in ["libc10.so", "libc10.dylib"] {
        if let Ok(bytes) = std::fs::read(lib.join(name)) {
            return bytes.windows(7).any(|w| w == b"__cxx11");
        }
    }
    true
}
