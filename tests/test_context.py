"""Contexts and the error when a GPU is asked for where none exists."""
import sys

import numpy as np
import pytest

import dpnb as nn
from dpnb import DpnbError
from dpnb.ext_utils import get_extension_context
from conftest import gpu_available


def test_cpu_context():
    ctx = get_extension_context("cpu")
    assert ctx.backend == ["cpu:float"] and ctx.xp is np and ctx.dtype == np.float32
    assert get_extension_context("cpu", type_config="double").dtype == np.float64


def test_context_scope_sets_the_dtype_of_new_variables():
    with nn.context_scope(get_extension_context("cpu", type_config="double")):
        assert nn.Variable((2,)).dtype == np.float64
        assert nn.get_parameter_or_create("w", (2,)).dtype == np.float64
    assert nn.Variable((2,)).dtype == np.float32


def test_device_id_is_a_string_like_nnabla():
    ctx = get_extension_context("cpu", device_id=3)
    assert ctx.device_id == ""  # nnabla's CPU extension ignores device_id
    assert get_extension_context("cpu", type_config="half").backend == ["cpu:half", "cpu:float"]
    ctx.device_id = "1"
    assert ctx.device_id == "1"


def test_bad_names_are_refused():
    with pytest.raises(DpnbError, match="unknown extension 'gpu'"):
        get_extension_context("gpu")
    with pytest.raises(DpnbError, match="unknown type_config"):
        get_extension_context("cpu", type_config="int8")
    with pytest.raises(DpnbError, match="expects a Context"):
        nn.set_default_context("cpu")


@pytest.mark.skipif(gpu_available(), reason="checks the error on machines without a GPU")
@pytest.mark.parametrize("ext", ["cuda", "cudnn"])
def test_gpu_context_without_gpu_says_how_to_fix_it(ext, monkeypatch):
    if "cupy" not in sys.modules:
        monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(DpnbError, match=r"dpnb\[gpu\]|no GPU|no CUDA device"):
        get_extension_context(ext)
    assert nn.default_extension() == "cpu"
