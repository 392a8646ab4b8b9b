"""Python-side timings of the DLPack exchange, each beside its reference in one run.

Medians of repeated timings (as `python -m timeit` reports), per call:

- `np.from_dlpack(ours)` vs `np.from_dlpack(np_array)`;
- `torch.from_dlpack(ours)` vs `torch.from_dlpack(np_array)`;
- import of a NumPy array into a Rust ndarray view: DLPack (`view_f32`) vs rust-numpy's
  `PyReadonlyArray::as_array` (`view_f32_numpy`), the non-DLPack zero-copy path;
- a 2-d NumPy array as a typed argument, `DLPackArray<f32, Ix2>` vs rust-numpy's
  `PyReadonlyArray2<f32>`, as a user's `#[pyfunction]` takes it;
- a NumPy array into a `ManagedTensor`, read in place vs by `__dlpack__` and a capsule;
- import of a torch tensor into a `ManagedTensor` (through torch's C exchange API) vs
  dlpark 0.10's `from_dlpack`, and vs the same import by `__dlpack__` and a capsule;
- a torch tensor into a Rust view, through the C exchange API vs by `__dlpack__`;
- dlpark 0.10's `from_dlpack` of our tensor vs of a torch tensor;

at n = 10 and n = 10^8 float32 elements (arrays are made outside the timed part), then
a memory check: a 1 GiB Rust array crosses to NumPy, to PyTorch and back to Rust while
peak RSS is watched.

Run with `scripts/bench-python` (which builds the extension in release mode).
"""

import gc
import resource
import statistics
import sys
import timeit

import numpy as np
import torch

import dlpack_test_ext as ext

REPEAT = 31


def per_call(mine, theirs, number):
    """Median seconds per call of `mine` and of `theirs` over REPEAT timings of `number`
    calls each, alternating between the two so that both see the same machine."""
    a, b = timeit.Timer(mine), timeit.Timer(theirs)
    times_a, times_b = [], []
    for _ in range(REPEAT):
        times_a.append(a.timeit(number) / number)
        times_b.append(b.timeit(number) / number)
    return statistics.median(times_a), statistics.median(times_b)


def fmt(seconds):
    return f"{seconds * 1e9:,.0f} ns" if seconds < 1e-5 else f"{seconds * 1e6:,.2f} µs"


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timings():
    rows = []
    for n in (10, 10**8):
        number = 20_000 if n == 10 else 2_000
        ours, _ = ext.make("float32", [n])
        reference = np.zeros(n, dtype=np.float32)
        matrix = reference.reshape(2, n // 2)
        assert ext.typed_ptr_f32_2d(matrix) == ext.typed_ptr_f32_2d_numpy(matrix)
        assert np.from_dlpack(ours).__array_interface__["data"][0] == ext.import_ptr(ours)

        cases = [
            ("`np.from_dlpack(ours)`", "np.from_dlpack(np_array)",
             lambda: np.from_dlpack(ours), lambda: np.from_dlpack(reference)),
            ("`torch.from_dlpack(ours)`", "torch.from_dlpack(np_array)",
             lambda: torch.from_dlpack(ours), lambda: torch.from_dlpack(reference)),
            ("NumPy array -> Rust view (DLPack)", "rust-numpy `as_array`",
             lambda: ext.view_f32(reference), lambda: ext.view_f32_numpy(reference)),
            ("NumPy array -> `DLPackArray<f32, Ix2>`", "rust-numpy `PyReadonlyArray2<f32>`",
             lambda: ext.typed_ptr_f32_2d(matrix), lambda: ext.typed_ptr_f32_2d_numpy(matrix)),
            ("NumPy array -> `ManagedTensor`", "the same by `__dlpack__`",
             lambda: ext.import_ptr(reference), lambda: ext.import_through_dunder(reference)),
        ]
        if n == 10:
            t = torch.zeros(n, dtype=torch.float32)
            assert ext.import_ptr(t) == ext.dlpark_import(t) == t.data_ptr()
            cases += [
                ("torch tensor -> `ManagedTensor`", "dlpark `from_dlpack`",
                 lambda: ext.import_ptr(t), lambda: ext.dlpark_import(t)),
                ("torch tensor -> `ManagedTensor`", "the same by `__dlpack__`",
                 lambda: ext.import_ptr(t), lambda: ext.import_through_dunder(t)),
                ("torch tensor -> Rust view", "the same by `__dlpack__`",
                 lambda: ext.view_f32(t), lambda: ext.view_f32_through_dunder(t)),
                ("dlpark `from_dlpack(ours)`", "dlpark `from_dlpack(torch)`",
                 lambda: ext.dlpark_import(ours), lambda: ext.dlpark_import(t)),
            ]
        for name, reference_name, mine, theirs in cases:
            a, b = per_call(mine, theirs, number)
            rows.append((name, reference_name, n, a, b))
        del ours, reference, matrix
        gc.collect()
    return rows


def memory_check():
    n = (1 << 30) // 4  # 1 GiB of float32
    ours, ptr = ext.make("float32", [n])  # filled by Rust: every page is resident
    gc.collect()
    before = peak_rss_mib()
    a = np.from_dlpack(ours)
    assert a.__array_interface__["data"][0] == ptr
    t = torch.from_dlpack(ours)
    assert t.data_ptr() == ptr
    back = ext.import_ptr(t)  # torch -> Rust
    assert back == ptr
    assert ext.view_f32(a) == ptr  # numpy -> Rust view
    after = peak_rss_mib()
    del a, t, ours
    gc.collect()
    return before, after


def main():
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, torch {torch.__version__}")
    print(f"median of {REPEAT} repeats, alternating ours and the reference, per call\n")
    print("| operation | n | ours | reference | ratio (ours / ref) |")
    print("|---|---|---|---|---|")
    for name, reference_name, n, a, b in timings():
        print(f"| {name} vs {reference_name} | {n:.0e} | {fmt(a)} | {fmt(b)} | {a / b:.2f} |")
    before, after = memory_check()
    growth = (after - before) / before * 100
    print(
        f"\n1 GiB array Rust -> NumPy -> PyTorch -> Rust: peak RSS {before:,.1f} MiB "
        f"before, {after:,.1f} MiB after ({growth:+.2f} %)"
    )
    assert growth < 1.0, "a zero-copy exchange must not grow peak RSS"


if __name__ == "__main__":
    main()
