"""The Python surface an extension built on dlpack-core exposes: the `Tensor` class named
after the extension that adds it, and pickling refused with what to do instead."""

import copy
import importlib
import pickle

import numpy as np
import pytest


def test_tensor_is_named_after_the_extension(ext):
    t = ext.make("float32", [2])[0]
    assert type(t) is ext.Tensor
    # The class is where its name says: the extension module that added it (maturin
    # puts the compiled module inside a package of the same name).
    module = importlib.import_module(type(t).__module__)
    assert module.__name__.split(".")[0] == "dlpack_test_ext"
    assert getattr(module, type(t).__qualname__) is type(t)
    assert isinstance(ext.roundtrip(np.zeros(2)), ext.Tensor)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickling_is_a_clear_type_error(ext, protocol):
    t = ext.make("float32", [2, 3], counted=True)[0]
    with pytest.raises(TypeError, match=r"numpy\.from_dlpack\(t, copy=True\)"):
        pickle.dumps(t, protocol=protocol)
    # The way out it names works, and nothing leaked.
    copied = np.from_dlpack(t, copy=True)
    assert pickle.loads(pickle.dumps(copied, protocol=protocol)).shape == (2, 3)


def test_copy_module_refuses_too(ext):
    t = ext.make("float32", [2])[0]
    for function in (copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="cannot pickle a DLPack Tensor"):
            function(t)
