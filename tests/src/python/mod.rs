//! `dlpack_test_ext`: the Python extension that the pytest suite in `tests/python` drives.
//!
//! It makes arrays of every element type, rank and layout in Rust and hands them to
//! Python without copying, imports any `__dlpack__` object and reports what it found,
//! round-trips tensors, exports a small model as a `state_dict`-like batch, and counts
//! live exports so that tests can prove every deleter ran.

use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::prelude::*;

// (First: its macros, `with_dtype!` among them, serve the modules after it.)
#[macro_use]
mod elements;
mod arrow;
mod batches;
mod exports;
mod foreign;
mod imports;

pub(crate) use exports::{make, make_on_device};

/// Exports whose owner is still alive (see [`Counted`]).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// An owner that counts itself in [`LIVE`] from creation to drop.
struct Counted<T>(T);

impl<T> Counted<T> {
    fn new(value: T) -> Self {
        LIVE.fetch_add(1, Ordering::SeqCst);
        Self(value)
    }
}

impl<T> Drop for Counted<T> {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<A> AsMut<[A]> for Counted<Vec<A>> {
    fn as_mut(&mut self) -> &mut [A] {
        &mut self.0
    }
}

/// The number of counted exports whose owner is still alive.
#[pyfunction]
fn live_exports() -> usize {
    LIVE.load(Ordering::SeqCst)
}

/// The Python module. It runs without the GIL on a free-threaded build (PyO3's default,
/// said here): dlpack-core relies on no interpreter lock (its import safety guide, "Without
/// the interpreter lock"), and the module's own state is atomic counters.
#[pymodule(gil_used = false)]
fn dlpack_test_ext(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(imports::view_f32, m)?)?;
    m.add_function(wrap_pyfunction!(imports::view_f32_numpy, m)?)?;
    m.add_function(wrap_pyfunction!(exports::make, m)?)?;
    m.add_function(wrap_pyfunction!(imports::inspect, m)?)?;
    m.add_function(wrap_pyfunction!(imports::import_ptr, m)?)?;
    m.add_function(wrap_pyfunction!(imports::import_with, m)?)?;
    m.add_function(wrap_pyfunction!(imports::roundtrip, m)?)?;
    m.add_function(wrap_pyfunction!(imports::roundtrip_owned, m)?)?;
    m.add_function(wrap_pyfunction!(imports::drop_on_thread, m)?)?;
    m.add_function(wrap_pyfunction!(imports::drop_detached, m)?)?;
    crate::weights::add_functions(m)?;
    crate::checkpoints::add_functions(m)?;
    crate::models::add_classes(m)?;
    m.add_function(wrap_pyfunction!(imports::drop_on_thread_holding_gil, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::to_object_then_write, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::scale_in_place, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::write_first_typed, m)?)?;
    m.add_function(wrap_pyfunction!(
        crate::exchange::scale_on_another_thread,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(live_exports, m)?)?;
    m.add_function(wrap_pyfunction!(exports::make_read_only, m)?)?;
    m.add_class::<exports::KeptArc>()?;
    m.add_function(wrap_pyfunction!(exports::make_float8, m)?)?;
    m.add_function(wrap_pyfunction!(exports::make_on_device, m)?)?;
    m.add_function(wrap_pyfunction!(exports::capsule_with_major, m)?)?;
    m.add_function(wrap_pyfunction!(exports::foreign_capsule, m)?)?;
    m.add_function(wrap_pyfunction!(batches::model_state, m)?)?;
    m.add_function(wrap_pyfunction!(batches::load_model, m)?)?;
    m.add_function(wrap_pyfunction!(batches::load_batch, m)?)?;
    m.add_function(wrap_pyfunction!(batches::roundtrip_batch, m)?)?;
    m.add_function(wrap_pyfunction!(foreign::foreign_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(imports::bool_len, m)?)?;
    m.add_function(wrap_pyfunction!(imports::write_first, m)?)?;
    m.add_function(wrap_pyfunction!(imports::two_mutable_views, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::exchange_capsule, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::exchange_calls, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::dlpark_import, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::import_through_dunder, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::typed_ptr_f32_2d, m)?)?;
    m.add_function(wrap_pyfunction!(
        crate::exchange::typed_ptr_f32_2d_unruled,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::read_in_place, m)?)?;
    m.add_function(wrap_pyfunction!(
        crate::exchange::typed_ptr_f32_2d_numpy,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(
        crate::exchange::view_f32_through_dunder,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::sum_f32_2d, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::typed_ptr_f32_1d, m)?)?;
    m.add_function(wrap_pyfunction!(crate::exchange::typed_bf16_1d, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::rows_from_table, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::rows_from_ipc, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::typed_f32_2d, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::add_norms, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::row_norms, m)?)?;
    dlpack_core::python::add_to_module(m)?;
    Ok(())
}

#[cfg(test)]
mod tests;
