"""Shared fixtures: the test extension, JAX on the CPU with 64-bit types, and a leak check
after every test (every counted Rust export must have been released)."""

import gc
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest

import dlpack_test_ext


def pytest_configure(config):
    # JAX canonicalises 64-bit types to 32-bit (a copy) unless this is on.
    import jax

    jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="session")
def ext():
    return dlpack_test_ext


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.call_failed = report.failed
    return report


@pytest.fixture(autouse=True)
def every_deleter_ran(request):
    """After each test, no counted export is alive: every deleter ran exactly once
    (a second run would be a double free, and would wrap the counter)."""
    yield
    if getattr(request.node, "call_failed", False):
        return  # the failure's traceback still holds the test's objects
    if dlpack_test_ext.live_exports():
        gc.collect()
    assert dlpack_test_ext.live_exports() == 0, "a Rust export leaked"
