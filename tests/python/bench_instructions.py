"""One exchange repeated, for instruction counts under valgrind's callgrind
(`scripts/bench-instructions`, which runs it with 0 and with N iterations and divides the
difference by N): deterministic where timings on a shared machine are not.

    python bench_instructions.py <case> <producer> <iterations>

case: `numpy` (`np.from_dlpack(x)`), `torch` (`torch.from_dlpack(x)`) or `view` (a NumPy
array imported into a Rust ndarray view); producer: `ours` (a Rust array exported by
this crate; for `view`, the DLPack import) or `reference` (a NumPy array; for `view`,
rust-numpy's `as_array`). Arrays have 10 float32 elements.
"""

import sys

import numpy as np

import dlpack_test_ext as ext


def main():
    case, producer, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ours = producer == "ours"
    if case == "view":
        x = np.zeros(10, np.float32)
        f = ext.view_f32 if ours else ext.view_f32_numpy
    else:
        x = ext.make("float32", [10])[0] if ours else np.zeros(10, np.float32)
        if case == "torch":
            import torch

            f = torch.from_dlpack
        else:
            f = np.from_dlpack
    f(x)  # warm: first-call set-up is not part of the count
    for _ in range(iterations):
        f(x)


if __name__ == "__main__":
    main()
