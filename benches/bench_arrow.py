"""Python-side timings of Arrow columns as tensors, each beside its reference in one run.

Medians of repeated timings (as `python -m timeit` reports), per call, alternating ours
and the reference:

- a pyarrow `FixedSizeListArray` column (rows of 16 float32) into a typed argument,
  `DLPackArray<f32, Ix2>`, vs pyarrow's own zero-copy route to a NumPy view of the same
  column, `flatten().to_numpy(zero_copy_only=True).reshape(-1, 16)`;
- a pyarrow primitive column into a `ManagedTensor` vs `to_numpy(zero_copy_only=True)`;
- a Polars `Array(Float32, 16)` Series into the typed argument vs Polars' `to_numpy()`
  (zero-copy for a numeric Series without nulls);
- a tensor returned by Rust into `pa.array(t)` vs `pa.array(np_array)`;

each at a 64-byte column (one row of 16 float32) and a 256 MiB one: the import is O(1)
in the column's length, so the two sizes must cost the same.

Run with `scripts/bench-python --arrow` (which builds the extension in release mode).
"""

import gc
import sys

import numpy as np
import polars as pl
import pyarrow as pa

import dlpack_test_ext as ext
from bench_exchange import REPEAT, fmt, per_call

WIDTH = 16


def timings():
    rows = []
    for size in (64, 256 << 20):
        n = size // 4
        values = np.arange(n, dtype=np.float32)
        column = pa.FixedSizeListArray.from_arrays(pa.array(values), WIDTH)
        flat = pa.array(values)
        series = pl.Series("x", values.reshape(-1, WIDTH), dtype=pl.Array(pl.Float32, WIDTH))
        tensor, _ = ext.make("float32", [n])
        reference = np.zeros(n, dtype=np.float32)
        address = column.values.buffers()[1].address
        assert ext.typed_f32_2d(column) == (address, [n // WIDTH, WIDTH])
        pyarrow_view = column.flatten().to_numpy(zero_copy_only=True).reshape(-1, WIDTH)
        assert pyarrow_view.__array_interface__["data"][0] == address
        assert ext.import_ptr(flat) == flat.buffers()[1].address
        assert pa.array(tensor).buffers()[1].address == tensor.data_ptr()
        cases = [
            ("pyarrow column -> `DLPackArray<f32, Ix2>`",
             "`flatten().to_numpy(zero_copy_only=True).reshape(...)`",
             lambda: ext.typed_f32_2d(column),
             lambda: column.flatten().to_numpy(zero_copy_only=True).reshape(-1, WIDTH)),
            ("pyarrow primitive column -> `ManagedTensor`", "`to_numpy(zero_copy_only=True)`",
             lambda: ext.import_ptr(flat), lambda: flat.to_numpy(zero_copy_only=True)),
            ("Polars `Array` Series -> `DLPackArray<f32, Ix2>`", "Polars `to_numpy()`",
             lambda: ext.typed_f32_2d(series), lambda: series.to_numpy()),
            ("`pa.array(t)`, t a Rust tensor", "`pa.array(np_array)`",
             lambda: pa.array(tensor), lambda: pa.array(reference)),
        ]
        number = 20_000 if size == 64 else 2_000
        for name, reference_name, mine, theirs in cases:
            a, b = per_call(mine, theirs, number)
            rows.append((name, reference_name, size, a, b))
        del column, flat, series, tensor, reference, pyarrow_view
        gc.collect()
    return rows


def main():
    print(f"python {sys.version.split()[0]}, pyarrow {pa.__version__}, polars {pl.__version__}")
    print(f"median of {REPEAT} repeats, alternating ours and the reference, per call\n")
    print("| operation | column | ours | reference | ratio (ours / ref) |")
    print("|---|---|---|---|---|")
    rows = timings()
    for name, reference_name, size, a, b in rows:
        label = "64 B" if size == 64 else f"{size >> 20} MiB"
        print(f"| {name} vs {reference_name} | {label} | {fmt(a)} | {fmt(b)} | {a / b:.2f} |")
    print("\nO(1) in the column's length (ours, 256 MiB / 64 B):")
    half = len(rows) // 2
    for small, large in zip(rows[:half], rows[half:]):
        print(f"- {small[0]}: {large[3] / small[3]:.2f}")


if __name__ == "__main__":
    main()
