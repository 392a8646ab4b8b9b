"""Python-side timings of a Rust model as a Python object (`#[pymodel]`), each beside its
reference in one run (medians per call, alternating, as `python -m timeit` reports):

- an attribute read, `m.weight`: ours (a `Tensor` sharing an `ArcArray` field) vs a
  rust-numpy getter returning `PyArray::borrow_from_array` of the same field (the
  `unsafe` incumbent) vs `torch.nn.Linear(...).weight`;
- the same one level down, `m.fc1.weight` (ours: a group object, then the tensor;
  rust-numpy: a `Py<...>` field's getter, then the array; torch: a submodule);
- `m.state_dict()` of a model shaped as GPT-2 (148 tensors, `transformers`' names) vs
  `GPT2Model.state_dict()` of `transformers` (148 tensors, the same names).

Run with `scripts/bench-python --model` (which builds the extension in release mode).
"""

import statistics
import timeit

import torch

import dlpack_test_ext as ext

REPEAT = 31


def medians(stmts, env, number):
    """Median seconds per call of each statement over REPEAT timings of `number` calls,
    alternating between them so that all see the same machine."""
    timers = [timeit.Timer(s, globals=env) for s in stmts]
    times = [[] for _ in stmts]
    for _ in range(REPEAT):
        for t, out in zip(timers, times):
            out.append(t.timeit(number) / number)
    return [statistics.median(t) for t in times]


def fmt(seconds):
    return f"{seconds * 1e9:,.0f} ns" if seconds < 1e-5 else f"{seconds * 1e6:,.2f} µs"


class TorchMlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 64)
        self.fc2 = torch.nn.Linear(64, 64)


def gpt2_torch():
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(
        n_embd=8, n_layer=12, n_head=2, vocab_size=16, n_positions=8, bos_token_id=0, eos_token_id=0
    )
    return GPT2Model(config)


def main():
    ours = ext.Dense(64, 64)
    numpy_ = ext.NumpyLinear(64, 64)
    torch_ = torch.nn.Linear(64, 64)
    mlp, numpy_mlp, torch_mlp = ext.Mlp(64, 64, 64), ext.NumpyMlp(64, 64, 64), TorchMlp()
    g, tg = ext.Gpt2Shape(8), gpt2_torch()
    assert list(g.state_dict()) == list(tg.state_dict()), "not the same names"
    assert len(g.state_dict()) == 148
    env = dict(globals(), **locals())
    for label, stmts in [
        ("attribute read m.weight", ["ours.weight", "numpy_.weight", "torch_.weight"]),
        ("attribute read m.fc1.weight", ["mlp.fc1.weight", "numpy_mlp.fc1.weight",
                                         "torch_mlp.fc1.weight"]),
    ]:
        med = medians(stmts, env, 20_000)
        print(f"{label}: ours {fmt(med[0])}, rust-numpy borrow_from_array {fmt(med[1])} "
              f"(ours/theirs {med[0] / med[1]:.2f}), torch.nn.Module {fmt(med[2])} "
              f"(ours/torch {med[0] / med[2]:.2f})")
    med = medians(["g.state_dict()", "tg.state_dict()"], env, 200)
    print(f"state_dict of 148 tensors (GPT-2's names): ours {fmt(med[0])}, "
          f"transformers GPT2Model {fmt(med[1])} (ours/torch {med[0] / med[1]:.2f})")


if __name__ == "__main__":
    main()
