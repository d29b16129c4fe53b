"""dpnb.cluster.engine.nnabla_programs without a cluster, in fresh interpreters where a
package named nnabla stands for a real installation (as in tests/test_nnabla_alias.py):
the real nnabla's MonitorSeries is followed whenever it is imported, the helpers read
the parameters of whichever library holds them, and never both. The same code against
the real nnabla 1.39 on a 2-engine cluster is tests/test_beside_nnabla.py."""
import os
import subprocess
import sys
import textwrap

import pytest

MONITOR = '''
import numpy as np
class MonitorSeries:
    """nnabla's series."""
    def __init__(self, name, monitor=None, interval=1, verbose=True):
        self.name, self.buf = name, []
    def add(self, index, value):
        self.buf.append(value)
'''
INIT = '''
from collections import OrderedDict
_params = OrderedDict()
def get_parameters(grad_only=True):
    return OrderedDict(_params)
'''


@pytest.fixture
def stand_in(tmp_path):
    (tmp_path / "nnabla").mkdir()
    (tmp_path / "nnabla" / "__init__.py").write_text(INIT)
    (tmp_path / "nnabla" / "monitor.py").write_text(MONITOR)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))


def python(code: str, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env=env)


@pytest.mark.parametrize("imported_first", [False, True])
def test_the_real_monitor_series_feeds_the_series_listeners(stand_in, imported_first):
    done = python(f"""
        import inspect, sys
        if {imported_first}:
            import nnabla.monitor
        from dpnb.monitor import add_series_listener
        from dpnb.cluster.engine.nnabla_programs import follow_nnabla_monitor_series
        from dpnb.nnabla_alias import use_as_nnabla_unless_installed
        assert use_as_nnabla_unless_installed() is False
        follow_nnabla_monitor_series()
        follow_nnabla_monitor_series()           # twice: still one notification per add
        heard = []
        add_series_listener(lambda *a: heard.append(a))
        from nnabla.monitor import MonitorSeries
        s = MonitorSeries("Training loss")
        s.add(1, 0.5)
        s.add(2, [1.0, 2.0])
        s.add(3, "text")                          # nnabla takes it; the curve cannot
        assert s.buf == [0.5, [1.0, 2.0], "text"]  # nnabla's own add ran
        assert heard == [("Training loss", 1, 0.5), ("Training loss", 2, 1.5)], heard
        assert MonitorSeries.__module__ == "nnabla.monitor" and MonitorSeries.__doc__ == "nnabla's series."
        assert "class MonitorSeries" in inspect.getsource(sys.modules["nnabla.monitor"])
        print("ok")
    """, stand_in)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_parameters_come_from_the_library_that_holds_them(stand_in):
    done = python("""
        import numpy as np
        import dpnb
        from dpnb.cluster.engine import calls
        from dpnb.cluster.engine.nnabla_programs import parameters, real_nnabla
        assert real_nnabla() is None              # not imported yet
        import nnabla
        assert real_nnabla() is nnabla and list(parameters(True)) == []

        class Variable:                           # a Variable of nnabla's: .d, .g, need_grad
            __module__ = "nnabla._variable"
            def __init__(self, d, g):
                self.d, self.g, self.need_grad, self.shape = d, g, True, d.shape
        nnabla._params["fc/W"] = Variable(np.arange(6.0).reshape(2, 3), np.ones((2, 3)))
        nnabla._params["fc/b"] = Variable(np.array([0.5, 1.5]), np.array([2.0, 3.0]))
        names = [n for n, _ in calls.unpack(calls.gradients())]
        assert names == ["fc/W", "fc/b"], names
        grads = dict(calls.unpack(calls.gradients()))
        assert (grads["fc/b"] == [2.0, 3.0]).all() and grads["fc/W"].shape == (2, 3)
        values = dict(calls.unpack(calls.parameter_values(["fc/W"])))
        assert (values["fc/W"] == np.arange(6.0).reshape(2, 3)).all()
        copy = calls.to_host(nnabla._params["fc/b"])
        copy[0] = 9.0
        assert nnabla._params["fc/b"].d[0] == 0.5  # the helpers get a copy
        assert [n for n, _ in calls.checksums()] == ["fc/W", "fc/b"]

        dpnb.get_parameter_or_create("mine", (2,), np.zeros(2))
        try:
            calls.checksums()
        except dpnb.DpnbError as e:
            assert "both dpnb (1) and the real nnabla (2)" in str(e), e
        else:
            raise AssertionError("both registries holding parameters went unnoticed")
        nnabla._params.clear()
        assert [n for n, _ in calls.checksums()] == ["mine"]
        print("ok")
    """, stand_in)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
