"""Ownership under load: 100,000 export/import round trips with NumPy and with PyTorch
keep the resident set flat and release every Rust export; deleters run on any thread,
after a subinterpreter existed, and while the thread holding the GIL waits for them
(those in a child process, so that a crash or a hang fails its test, not the suite)."""

import gc
import sys
import threading

import numpy as np
import pytest
import torch

from helpers import np_ptr, rss_bytes, run_child

# Run again against the stable-ABI build (tests/README.md).
pytestmark = pytest.mark.protocol

ROUNDS = 100_000
WARMUP = 5_000
MAX_GROWTH = 4 * 1024 * 1024  # bytes


def measure(capsys, label, step):
    for _ in range(WARMUP):  # allocator and interpreter caches settle first
        step()
    gc.collect()
    before = rss_bytes()
    for _ in range(ROUNDS):
        step()
    gc.collect()
    after = rss_bytes()
    with capsys.disabled():
        print(
            f"\n{label}: {ROUNDS} round trips, RSS {before / 2**20:.1f} MiB -> "
            f"{after / 2**20:.1f} MiB ({(after - before) / 2**10:+.0f} KiB)"
        )
    assert after - before < MAX_GROWTH


def test_numpy_round_trips_keep_rss_flat(ext, capsys):
    host = np.arange(64, dtype=np.float64)
    host_refs = sys.getrefcount(host)

    def step():
        t, ptr = ext.make("float32", [16, 16], counted=True)  # Rust -> NumPy
        a = np.from_dlpack(t)
        assert np_ptr(a) == ptr
        assert ext.import_ptr(a) == ptr  # NumPy (viewing Rust) -> Rust
        b = np.from_dlpack(ext.roundtrip(host))  # NumPy -> Rust -> NumPy
        assert np_ptr(b) == np_ptr(host)

    measure(capsys, "numpy", step)
    assert ext.live_exports() == 0  # every Rust deleter ran
    assert sys.getrefcount(host) == host_refs  # every NumPy deleter ran


def test_torch_round_trips_keep_rss_flat(ext, capsys):
    host = torch.arange(64, dtype=torch.float64)

    def step():
        t, ptr = ext.make("float32", [16, 16], counted=True)  # Rust -> PyTorch
        x = torch.from_dlpack(t)
        assert x.data_ptr() == ptr
        assert ext.import_ptr(x) == ptr  # PyTorch (viewing Rust) -> Rust
        y = torch.from_dlpack(ext.roundtrip(host))  # PyTorch -> Rust -> PyTorch
        assert y.data_ptr() == host.data_ptr()

    measure(capsys, "torch", step)
    assert ext.live_exports() == 0


def test_deleters_run_on_other_threads(ext):
    # Rust drops imports on a thread without the GIL: NumPy's deleter takes it itself.
    a = np.arange(10.0)
    refs = sys.getrefcount(a)
    for _ in range(100):
        ext.drop_on_thread(a)
        ext.drop_on_thread(torch.from_dlpack(a))
    assert sys.getrefcount(a) == refs
    # Python consumers release Rust exports on their own threads.
    arrays = [np.from_dlpack(ext.make("int64", [8], counted=True)[0]) for _ in range(100)]
    tensors = [torch.from_dlpack(ext.make("int64", [8], counted=True)[0]) for _ in range(100)]
    assert ext.live_exports() == 200

    def release(items):
        while items:
            items.pop()

    threads = [threading.Thread(target=release, args=(x,)) for x in (arrays, tensors)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ext.live_exports() == 0


def test_drop_after_a_subinterpreter_detached_and_on_a_thread():
    # Once a subinterpreter exists, `PyGILState_Check` answers 1 on every thread: the
    # release of an imported tensor must ask whether this thread is attached instead.
    child = run_child(
        """
        import numpy as np
        import dlpack_test_ext as ext
        try:
            import _interpreters as interpreters  # 3.13+
        except ImportError:
            import _xxsubinterpreters as interpreters  # 3.11, 3.12
        interpreters.destroy(interpreters.create())
        interpreters.create()
        for _ in range(3):
            ext.drop_detached(np.arange(3.0))
            ext.drop_on_thread(np.arange(3.0))
        print("dropped")
        """
    )
    assert child.returncode == 0, child.stdout + child.stderr
    assert "dropped" in child.stdout


def test_drop_on_a_thread_while_the_gil_holder_joins_it():
    # Neither our own tensors nor a foreign deleter that needs no Python may wait for
    # the GIL (the stable-ABI build used to take it for every Python import).
    child = run_child(
        """
        import dlpack_test_ext as ext
        t, _ = ext.make("float32", [4], "c", True)
        ext.drop_on_thread_holding_gil(t)
        ext.drop_on_thread_holding_gil(ext.foreign_tensor(4))
        print("returned")
        """,
        timeout=60,
    )
    assert child.returncode == 0, child.stdout + child.stderr
    assert "returned" in child.stdout


@pytest.mark.parametrize("copy", [None, True])
def test_copies_are_released(ext, copy):
    for _ in range(1000):
        t = ext.make_read_only([32], counted=True)
        np.from_dlpack(t, copy=copy)
        ext.inspect(t.__dlpack__(copy=copy))  # a legacy request copies
    del t
    assert ext.live_exports() == 0
