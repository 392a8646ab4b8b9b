//! With the `pyo3` feature: the target Python's version and ABI as cfgs, so that the
//! Python module can use CPython's vectorcall methods where the ABI has them; PyO3's
//! `pyo3_disable_reference_pool` switch, declared.

fn main() {
    #[cfg(feature = "pyo3")]
    pyo3_build_config::use_pyo3_cfgs();
    // PyO3's own switch (set with RUSTFLAGS by the application): where it is on, a
    // Python reference is never left to PyO3 on a thread that is not attached.
    println!("cargo:rustc-check-cfg=cfg(pyo3_disable_reference_pool)");
}
