"""NumPy arrays read in place under NumPy 1.x (whose ABI and `__dlpack__` differ from
NumPy 2's): every dtype, shape and layout of the pytest suite is read in place and
describes what NumPy 1's `__dlpack__` describes (the same elements at the same
addresses; NumPy 1 gives a legacy header, without strides for contiguous arrays), what
NumPy 1 refuses is refused with its words, read-only arrays are read and flagged,
subclasses are honoured, and eight threads import one array.

Run by `scripts/test-python --numpy1` in a venv of scripts/requirements/numpy1.txt
(NumPy 1.26 alone: no pytest, no JAX), with the test extension on PYTHONPATH:

    PYTHONPATH=<dir of dlpack_test_ext>:tests/python python tests/python/check_numpy1.py
"""

import itertools
import sys
import threading

import numpy as np

import dlpack_test_ext as ext
from helpers import LAYOUTS, NUMPY_DTYPES, SHAPES, expected, numpy_layout


def error_of(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001 (compared, not handled)
        return type(e), str(e)
    return None


def main():
    assert np.__version__.startswith("1."), np.__version__
    problems = []
    cases = list(itertools.product(NUMPY_DTYPES, SHAPES, LAYOUTS))
    for dtype, shape, layout in cases:
        a = numpy_layout(expected(dtype, shape), layout)
        where = f"{dtype} {shape} {layout}"
        if not ext.read_in_place(a):
            problems.append(f"not read in place: {where}")
            continue
        ours, theirs = ext.inspect(a), ext.inspect(a.__dlpack__())
        for key in ("dtype", "shape", "ptr", "values", "device", "read_only"):
            if ours[key] != theirs[key]:
                problems.append(f"{key}: {where}: {ours[key]} / {theirs[key]}")
        if theirs["strides"] is not None and ours["strides"] != theirs["strides"]:
            problems.append(f"strides: {where}: {ours['strides']} / {theirs['strides']}")
    refused = [
        np.arange(4, dtype=">f4"),
        np.array([1, None], dtype=object),
        np.zeros(3, dtype=[("x", "f4"), ("y", "i4")]),
        np.array(["a", "bc"]),
        np.array(["2026-12-01"], dtype="datetime64[D]"),
        np.lib.stride_tricks.as_strided(np.zeros(8, np.float32), (3,), (6,)),
    ]
    for a in refused:
        theirs = error_of(a.__dlpack__)
        ours = error_of(lambda: ext.inspect(a))
        if theirs is None or ours != theirs:
            problems.append(f"refusal of {a.dtype}: {ours} / {theirs}")
    read_only = np.arange(3.0)
    read_only.flags.writeable = False
    if not (ext.read_in_place(read_only) and ext.inspect(read_only)["read_only"]):
        problems.append("a read-only array is not read in place, flagged")
    if not ext.read_in_place(np.matrix([[1.0, 2.0]])):
        problems.append("np.matrix is not read in place")

    class Own(np.ndarray):
        def __dlpack__(self, **kwargs):
            return np.full(2, 7.0).__dlpack__()

    if ext.inspect(np.zeros(3).view(Own))["values"] != [7.0, 7.0]:
        problems.append("a subclass's own __dlpack__ is not called")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    refs = sys.getrefcount(a)
    sums = []

    def work():
        sums.extend(ext.sum_f32_2d(a) for _ in range(300))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if sums != [66.0] * 2400 or sys.getrefcount(a) != refs:
        problems.append("eight threads importing one array")
    for problem in problems:
        print(problem)
    print(
        f"NumPy {np.__version__}: {len(cases)} arrays read in place as __dlpack__ "
        f"describes them, {len(refused)} refusals, subclasses, threads: "
        f"{len(problems)} problems"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
