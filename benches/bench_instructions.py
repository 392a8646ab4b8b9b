"""One exchange repeated, for instruction counts under valgrind's callgrind
(`scripts/bench-instructions`, which runs it with 0 and with N iterations and divides the
difference by N): deterministic where timings on a shared machine are not.

    python bench_instructions.py <case> <side> <iterations>

Each case is a pair, `ours` beside `reference`; arrays have 10 float32 elements:

- `numpy`: `np.from_dlpack(x)`, x a Rust array exported by this crate / a NumPy array;
- `torch`: `torch.from_dlpack(x)`, likewise;
- `view`: a NumPy array into a Rust ndarray view, DLPack / rust-numpy's `as_array`;
- `typed`: a 2-d NumPy array as a typed argument, `DLPackArray<f32, Ix2>` / rust-numpy's
  `PyReadonlyArray2<f32>`, then its view's address;
- `typed-rule-numpy`, `typed-rule-torch`, `typed-rule-parameter`: a 2-d NumPy array, torch
  tensor and `Parameter` as a typed argument / the same import and checks with no
  in-place rule read (`DLPackArray::new` of a `ManagedTensor`): what torch's rule costs
  a read;
- `numpy-import`: a NumPy array into a `ManagedTensor`, read in place / by `__dlpack__`
  and a capsule (the protocol path, which every import of a NumPy array took before);
- `torch-import`: a torch tensor into a `ManagedTensor` / dlpark 0.10's `from_dlpack`;
- `torch-import-dunder`: the same import through the C exchange API / by `__dlpack__`
  and a capsule (the path without the C exchange API);
- `torch-view`: a torch tensor into a Rust view, through the C exchange API / by
  `__dlpack__`;
- `dlpark-consumer`: dlpark 0.10's `from_dlpack` of our tensor / of a torch tensor;
- `model-attribute`: `m.fc1.weight` of a `#[pymodel]` model (a zero-copy tensor of the
  field) / of a PyTorch `nn.Module` of the same layers (its `Parameter`).
"""

import sys

import numpy as np

import dlpack_test_ext as ext


def case_function(case, ours):
    """The function to call and its argument."""
    if case == "view":
        return (ext.view_f32 if ours else ext.view_f32_numpy), np.zeros(10, np.float32)
    if case == "typed":
        f = ext.typed_ptr_f32_2d if ours else ext.typed_ptr_f32_2d_numpy
        return f, np.zeros((2, 5), np.float32)
    if case.startswith("typed-rule-"):
        f = ext.typed_ptr_f32_2d if ours else ext.typed_ptr_f32_2d_unruled
        producer = case.removeprefix("typed-rule-")
        if producer == "numpy":
            return f, np.zeros((2, 5), np.float32)
        import torch

        t = torch.zeros(2, 5, dtype=torch.float32)
        return f, (torch.nn.Parameter(t) if producer == "parameter" else t)
    if case == "numpy-import":
        f = ext.import_ptr if ours else ext.import_through_dunder
        return f, np.zeros(10, np.float32)
    if case in ("numpy", "torch"):
        x = ext.make("float32", [10])[0] if ours else np.zeros(10, np.float32)
        if case == "numpy":
            return np.from_dlpack, x
        import torch

        return torch.from_dlpack, x
    import torch

    if case == "model-attribute":
        from operator import attrgetter

        if ours:
            return attrgetter("fc1.weight"), ext.Mlp(3, 4, 2)
        model = torch.nn.Module()
        model.fc1 = torch.nn.Linear(3, 4)
        model.fc2 = torch.nn.Linear(4, 2)
        return attrgetter("fc1.weight"), model
    t = torch.zeros(10, dtype=torch.float32)
    if case == "torch-import":
        return (ext.import_ptr if ours else ext.dlpark_import), t
    if case == "torch-import-dunder":
        return (ext.import_ptr if ours else ext.import_through_dunder), t
    if case == "torch-view":
        return (ext.view_f32 if ours else ext.view_f32_through_dunder), t
    if case == "dlpark-consumer":
        return ext.dlpark_import, (ext.make("float32", [10])[0] if ours else t)
    raise SystemExit(f"unknown case {case}")


def main():
    case, side, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3])
    f, x = case_function(case, side == "ours")
    f(x)  # warm: first-call set-up is not part of the count
    for _ in range(iterations):
        f(x)


if __name__ == "__main__":
    main()
