"""Python-side timings of weights on disk, each beside its reference in one run, on a
GPT-2-small-shaped file written by this script (148 float32 tensors, 124 M parameters,
about 475 MiB; nothing is downloaded), with a warm page cache. Medians of repeated runs,
alternating ours and the reference:

- `map_safetensors` (the Rust map and the `dict` of tensors) vs
  `safetensors.torch.load_file`;
- the mapped `dict` turned into torch tensors (`torch.from_dlpack` of each) vs
  `safetensors.torch.load_file`;
- the mapped `dict` turned into NumPy arrays (`np.from_dlpack` of each) vs
  `safetensors.numpy.load_file`;
- `load_safetensors` (a read into buffers of their own) vs
  `safetensors.torch.load_file(..., backend="pread")`, where that backend exists;
- `save_safetensors` of a `state_dict` vs `safetensors.torch.save_file`.

Run with `scripts/bench-python --safetensors` (which builds the extension in release
mode). `DLPACK_BENCH_DIR` picks the folder of the file (by default a temporary one).
"""

import os
import statistics
import tempfile
import time

import numpy as np
import safetensors.numpy
import safetensors.torch
import torch

import dlpack_test_ext as ext

REPEAT = 7


def gpt2_state_dict():
    d, vocab = 768, 50257
    shapes = {"wte.weight": (vocab, d), "wpe.weight": (1024, d)}
    for i in range(12):
        p = f"h.{i}."
        shapes |= {
            p + "ln_1.weight": (d,),
            p + "ln_1.bias": (d,),
            p + "attn.c_attn.weight": (d, 3 * d),
            p + "attn.c_attn.bias": (3 * d,),
            p + "attn.c_proj.weight": (d, d),
            p + "attn.c_proj.bias": (d,),
            p + "ln_2.weight": (d,),
            p + "ln_2.bias": (d,),
            p + "mlp.c_fc.weight": (d, 4 * d),
            p + "mlp.c_fc.bias": (4 * d,),
            p + "mlp.c_proj.weight": (4 * d, d),
            p + "mlp.c_proj.bias": (d,),
        }
    shapes |= {"ln_f.weight": (d,), "ln_f.bias": (d,)}
    gen = torch.Generator().manual_seed(0)
    return {name: torch.rand(shape, generator=gen) for name, shape in shapes.items()}


def median_pair(mine, theirs, repeat=REPEAT):
    """Median seconds of `mine()` and `theirs()`, alternating."""
    times_a, times_b = [], []
    for _ in range(repeat):
        for fn, times in ((mine, times_a), (theirs, times_b)):
            start = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - start)
            del result
    return statistics.median(times_a), statistics.median(times_b)


def fmt(seconds):
    return f"{seconds * 1e3:,.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:,.1f} µs"


def main():
    folder = os.environ.get("DLPACK_BENCH_DIR") or tempfile.mkdtemp()
    path = os.path.join(folder, "gpt2-python.safetensors")
    state = gpt2_state_dict()
    if not os.path.exists(path):
        safetensors.torch.save_file(state, path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:  # warm the page cache
        while f.read(1 << 24):
            pass
    print(f"file: {len(state)} tensors, {size / 2**20:,.1f} MiB\n")
    rows = []

    def row(what, reference, mine, theirs, repeat=REPEAT):
        a, b = median_pair(mine, theirs, repeat)
        rows.append((what, reference, a, b))
        print(f"{what:<48} {fmt(a):>12}   {reference:<44} {fmt(b):>12}   {a / b:6.3f}")

    row(
        "map_safetensors (Rust map + dict)",
        "safetensors.torch.load_file",
        lambda: ext.map_safetensors(path),
        lambda: safetensors.torch.load_file(path),
    )
    row(
        "mapped dict -> torch.from_dlpack of each",
        "safetensors.torch.load_file",
        lambda: {k: torch.from_dlpack(v) for k, v in ext.map_safetensors(path)[0].items()},
        lambda: safetensors.torch.load_file(path),
    )
    row(
        "mapped dict -> np.from_dlpack of each",
        "safetensors.numpy.load_file",
        lambda: {k: np.from_dlpack(v) for k, v in ext.map_safetensors(path)[0].items()},
        lambda: safetensors.numpy.load_file(path),
        repeat=5,
    )
    try:
        safetensors.torch.load_file(path, backend="pread")
        pread = lambda: safetensors.torch.load_file(path, backend="pread")  # noqa: E731
        reference = 'load_file(backend="pread")'
    except TypeError:
        pread = lambda: safetensors.numpy.load_file(path)  # noqa: E731
        reference = "safetensors.numpy.load_file"
    row(
        "load_safetensors (read, own buffers) -> torch",
        reference,
        lambda: {k: torch.from_dlpack(v) for k, v in ext.load_safetensors(path)[0].items()},
        pread,
        repeat=5,
    )
    out = os.path.join(folder, "out-python.safetensors")
    row(
        "save_safetensors(state_dict)",
        "safetensors.torch.save_file",
        lambda: ext.save_safetensors(state, out),
        lambda: safetensors.torch.save_file(state, out),
        repeat=5,
    )
    os.remove(out)


if __name__ == "__main__":
    main()
