"""Contexts, the error when a GPU is asked for where none exists, and how often a GPU
context asks CuPy for its device (a counting stand-in for CuPy, so this runs anywhere)."""
import copy
import dataclasses
import pickle
import sys
import types

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


class CountingCupy(types.ModuleType):
    """A stand-in for CuPy on machines without a GPU: arrays are NumPy's, and it counts
    the device-count queries and device switches that dpnb makes."""

    def __init__(self, devices: int = 2):
        super().__init__("cupy")
        self.counts = {"getDeviceCount": 0, "use": 0}
        self.current = 0
        counts, stub = self.counts, self

        class Device:
            def __init__(self, id: int = 0):
                self.id = id

            def use(self):
                counts["use"] += 1
                stub.current = self.id

        def get_device_count():
            counts["getDeviceCount"] += 1
            return devices

        self.cuda = types.SimpleNamespace(
            Device=Device, runtime=types.SimpleNamespace(getDeviceCount=get_device_count))

    def __getattr__(self, name):
        return getattr(np, name)


@pytest.fixture
def counting_cupy(monkeypatch):
    stub = CountingCupy()
    monkeypatch.setitem(sys.modules, "cupy", stub)
    return stub


def test_a_gpu_context_resolves_its_module_and_device_once(counting_cupy):
    ctx = get_extension_context("cudnn", device_id="1")
    queries = counting_cupy.counts["getDeviceCount"]
    assert ctx.xp is counting_cupy and counting_cupy.current == 1
    for _ in range(100):
        assert ctx.xp is counting_cupy
    assert counting_cupy.counts == {"getDeviceCount": queries + 1, "use": 1}
    ctx.device_id = "0"                              # as comm.init() sets it: resolved again
    assert ctx.xp is counting_cupy and counting_cupy.current == 0
    assert counting_cupy.counts == {"getDeviceCount": queries + 2, "use": 2}
    same_device = get_extension_context("cuda", device_id="0")
    queries = counting_cupy.counts["getDeviceCount"]
    for _ in range(10):                              # contexts on one GPU share its device
        assert ctx.xp is same_device.xp is counting_cupy
    assert counting_cupy.counts == {"getDeviceCount": queries + 1, "use": 2}


def test_context_copies_compare_by_fields_and_resolve_their_own(counting_cupy):
    ctx = get_extension_context("cuda", device_id="1")
    assert ctx.xp is counting_cupy
    for twin in (copy.copy(ctx), copy.deepcopy(ctx), pickle.loads(pickle.dumps(ctx)),
                 dataclasses.replace(ctx)):
        assert twin == ctx and repr(twin) == repr(ctx)
        assert "_resolved" not in vars(twin)
        assert twin.xp is counting_cupy
    assert ctx != get_extension_context("cuda", device_id="0")


def test_a_pass_switches_the_device_once_not_per_function(counting_cupy):
    import dpnb.functions as F

    ctx = get_extension_context("cudnn", device_id="1")
    with nn.context_scope(ctx):
        x = nn.Variable((2, 3), need_grad=True)
        x.d = np.arange(6).reshape(2, 3)
        y = F.sum(F.tanh(x * x + 1.0) * 2.0 - x)       # six functions
    y.forward()
    counting_cupy.current = 0                         # user code switched behind dpnb's back
    before = dict(counting_cupy.counts)
    for _ in range(5):
        y.forward()
        y.backward()
    assert counting_cupy.current == 1
    assert counting_cupy.counts["use"] - before["use"] == 10            # one per pass
    assert counting_cupy.counts["getDeviceCount"] == before["getDeviceCount"]
    expected = np.arange(6).reshape(2, 3)
    t = np.tanh(expected ** 2 + 1.0)
    assert np.allclose(y.d, np.sum(2 * t - expected))
    assert np.allclose(x.g, 5 * (2 * (1 - t ** 2) * 2 * expected - 1))
