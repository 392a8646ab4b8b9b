//! ndarray exchange: every rank and layout, our exports and foreign producers.
#![cfg(feature = "ndarray")]

#[path = "../common/mod.rs"]
mod common;

mod dtypes;
mod exports;
mod foreign;
mod reclaim;
mod writable;

fn bytes_i32(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

fn bytes_f64(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}
