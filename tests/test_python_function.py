"""nnabla.function.PythonFunction, a user's function written in Python on variables, in
nnabla's idiom: values against NumPy, gradients by central differences in float64,
backward's accumulation as nnabla's, and nnabla's clear_called flag recorder."""
import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
from dpnb.context import context_scope
from dpnb.ext_utils import get_extension_context
from dpnb.function import PythonFunction
from dpnb.testing import clear_called_flag_recorder
from gradcheck import check_grad


class ScaledProduct(PythonFunction):
    """y0 = a * x0 * x1, y1 = x0 + x1: two inputs, two outputs, an argument."""

    def __init__(self, a, ctx=None):
        super().__init__(ctx)
        self.a = a

    @property
    def name(self):
        return "ScaledProduct"

    @property
    def args(self):
        return {"a": self.a}

    def min_outputs(self):
        return 2

    def grad_depends_output_data(self, i, o):
        return False

    def setup_impl(self, inputs, outputs):
        for y in outputs:
            y.reset_shape(inputs[0].shape, True)

    def forward_impl(self, inputs, outputs):
        outputs[0].d = self.a * inputs[0].d * inputs[1].d
        outputs[1].d = inputs[0].d + inputs[1].d

    def backward_impl(self, inputs, outputs, propagate_down, accum):
        g0, g1 = outputs[0].g, outputs[1].g
        for i, other in ((0, 1), (1, 0)):
            if not propagate_down[i]:
                continue
            grad = self.a * inputs[other].d * g0 + g1
            if accum[i]:
                inputs[i].g += grad
            else:
                inputs[i].g = grad


def test_values_and_gradients_in_a_graph():
    rng = np.random.RandomState(0)
    a, b = rng.randn(3, 4), rng.randn(3, 4)
    with context_scope(get_extension_context("cpu", type_config="double")):
        y = check_grad(lambda x0, x1: F.sin(F.add2(*ScaledProduct(1.5)(x0, F.tanh(x1)))),
                       [a, b])
    np.testing.assert_allclose(y.d, np.sin(1.5 * a * np.tanh(b) + a + np.tanh(b)), rtol=1e-12)
    assert y.parent.inputs[0].parent.inputs[0].parent.name == "ScaledProduct"


def test_eager_mode_and_the_function_object():
    x0 = nn.Variable.from_numpy_array(np.array([1.0, 2.0], np.float32), need_grad=True)
    x1 = nn.Variable.from_numpy_array(np.array([3.0, -1.0], np.float32), need_grad=True)
    with nn.auto_forward():
        y0, y1 = ScaledProduct(2.0)(x0, x1)
    np.testing.assert_array_equal(y0.d, [6.0, -4.0])
    np.testing.assert_array_equal(y1.d, [4.0, 1.0])
    f = y0.parent
    y0.g, y1.g = 1.0, 0.0
    x0.g, x1.g = 10.0, 10.0
    f.backward([x0, x1], [y0, y1], [True, False])   # x0 accumulates, x1 is overwritten
    np.testing.assert_array_equal(x0.g, [16.0, 8.0])
    np.testing.assert_array_equal(x1.g, [2.0, 4.0])


def test_a_missing_method_says_which():
    class NoOutputs(PythonFunction):
        pass

    with pytest.raises(NotImplementedError, match="NoOutputs must say its number of outputs"):
        NoOutputs()(nn.Variable((2,)))


def test_the_recorder_gives_what_each_step_released():
    """nnabla's own answer for this graph (test_graph.py, test_clear_input_if_no_need_grad2):
    identity's leaf input stays, tanh's input goes, add_scalar's stays (tanh's backward
    reads it)."""
    x = nn.Variable((1, 5), need_grad=True)
    y = F.add_scalar(F.tanh(F.identity(x)))
    clear_called_flag_recorder.activate_clear_called_flag_recorder()
    try:
        y.forward(clear_no_need_grad=True)
        flags = clear_called_flag_recorder.get_input_clear_called_flags()
    finally:
        clear_called_flag_recorder.deactivate_clear_called_flag_recorder()
    assert [[data for data, _ in step] for step in flags] == [[False], [True], [False]]
    with pytest.raises(RuntimeError, match="not active"):
        clear_called_flag_recorder.get_input_clear_called_flags()
