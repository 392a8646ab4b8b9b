//! With the `pyo3` feature: the target Python's version and ABI as cfgs, so that the
//! Python module can use CPython's vectorcall methods where the ABI has them.

fn main() {
    #[cfg(feature = "pyo3")]
    pyo3_build_config::use_pyo3_cfgs();
}
