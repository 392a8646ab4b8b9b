"""Expected values and layouts shared by the tests.

The Rust test extension fills element number ``i`` (C order) of every array it makes
with ``value(i)`` below; ``expected`` computes the same array with NumPy.
"""

import math
import subprocess
import sys
import textwrap

import numpy as np

# Ranks 0 to 4, and empty arrays.
NONEMPTY_SHAPES = [(), (5,), (3, 4), (2, 3, 4), (2, 3, 2, 3)]
SHAPES = [*NONEMPTY_SHAPES, (0,), (3, 0), (0, 2, 3)]
# Memory layouts the extension can make: C order, Fortran order, a slice cutting one
# element off each side of every axis, every other element, every axis reversed.
LAYOUTS = ["c", "f", "sliced", "stepped", "negative"]

INTS = ["int8", "int16", "int32", "int64"]
UINTS = ["uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "float32", "float64"]
COMPLEX = ["complex64", "complex128"]
ALL_DTYPES = ["bool", *INTS, *UINTS, *FLOATS, "bfloat16", *COMPLEX]
NUMPY_DTYPES = ["bool", *INTS, *UINTS, *FLOATS, *COMPLEX]  # no bfloat16 in NumPy


def shape_id(shape):
    return "x".join(map(str, shape)) if shape else "scalar"


def expected(dtype, shape):
    """The values the extension puts in an array of ``dtype`` and ``shape`` (bfloat16
    as float32, which holds every such value exactly)."""
    return np.asarray(_expected(dtype, shape))


def _expected(dtype, shape):
    i = np.arange(math.prod(shape)).reshape(shape)
    floats = (i % 64) * 0.5 - 8.0
    if dtype == "bool":
        return i % 3 == 0
    if dtype in INTS:
        return ((i % 100) - 50).astype(dtype)
    if dtype in UINTS:
        return (i % 200).astype(dtype)
    if dtype in FLOATS:
        return floats.astype(dtype)
    if dtype == "bfloat16":
        return floats.astype("float32")
    if dtype in COMPLEX:
        return (floats - 1j * (i % 16)).astype(dtype)
    raise ValueError(dtype)


def _index(slices):
    # A trailing Ellipsis keeps 0-d results arrays instead of scalars.
    return tuple(slices) + (Ellipsis,)


def numpy_layout(values, layout):
    """A NumPy array equal to ``values`` with the given memory layout."""
    shape = values.shape
    if layout == "c":
        return np.array(values, order="C")
    if layout == "f":
        return np.array(values, order="F")
    if layout == "sliced":
        big = np.zeros(tuple(n + 2 for n in shape), values.dtype)
        view = big[_index(slice(1, n + 1) for n in shape)]
    elif layout == "stepped":
        big = np.zeros(tuple(2 * n for n in shape), values.dtype)
        view = big[_index(slice(None, None, 2) for n in shape)]
    elif layout == "negative":
        big = np.zeros(shape, values.dtype)
        view = big[_index(slice(None, None, -1) for n in shape)]
    else:
        raise ValueError(layout)
    view[...] = values
    return view


def np_ptr(a):
    """Address of the first element of a NumPy array."""
    return a.__array_interface__["data"][0]


def capsule_name(capsule):
    """The name of a capsule, from its repr."""
    return repr(capsule).split('"')[1]


def rss_bytes():
    """Resident set size of this process now (not the peak)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def run_child(code, timeout=120):
    """Runs `code` in a new interpreter (where the test extension is imported afresh);
    the finished process, whose output is text. A hang fails the test after `timeout`
    seconds, and a crash fails only the test. (No pytest here: check_numpy1.py imports
    this module where pytest is not installed.)"""
    try:
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the child process hung for {timeout} s") from None
