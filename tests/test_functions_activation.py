"""F.* activations: values against plain NumPy, gradients by finite differences."""
import numpy as np
import pytest
from conftest import requires_gpu
from gradcheck import check_grad

import dpnb as nn
import dpnb.functions as F
from dpnb import DpnbError
from dpnb.ext_utils import get_extension_context


def _away_from_zero(rng, *shape):
    """Values with |x| in [0.1, 2): no finite-difference step crosses the kink at 0."""
    return rng.uniform(0.1, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


def _ref_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


ELEMENTWISE = {
    "relu": (F.relu, lambda x: np.where(x > 0, x, 0)),
    "elu": (F.elu, lambda x: np.where(x > 0, x, np.exp(x) - 1)),
    "elu alpha=0.5": (lambda x: F.elu(x, alpha=0.5), lambda x: np.where(x > 0, x, 0.5 * (np.exp(x) - 1))),
    "leaky_relu": (F.leaky_relu, lambda x: np.where(x > 0, x, 0.1 * x)),
    "leaky_relu alpha=0.3": (lambda x: F.leaky_relu(x, alpha=0.3), lambda x: np.where(x > 0, x, 0.3 * x)),
    "tanh": (F.tanh, np.tanh),
    "sigmoid": (F.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
}


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_values_and_gradients(name, rng):
    fn, ref = ELEMENTWISE[name]
    x = _away_from_zero(rng, 3, 4)
    y = check_grad(fn, [x])
    np.testing.assert_allclose(y.d, ref(x), rtol=1e-12)


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_keeps_float32(name, rng):
    fn, ref = ELEMENTWISE[name]
    x = _away_from_zero(rng, 5).astype(np.float32)
    y = fn(nn.Variable.from_numpy_array(x))
    y.forward()
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.d, ref(x.astype(np.float64)), rtol=1e-6)


def test_relu_and_leaky_relu_accept_inplace(rng):
    a = _away_from_zero(rng, 4)
    x = nn.Variable.from_numpy_array(a)
    relu, leaky = F.relu(x, inplace=True), F.leaky_relu(x, alpha=0.2, inplace=True)
    relu.forward()
    leaky.forward()
    np.testing.assert_allclose(relu.d, np.maximum(a, 0))
    np.testing.assert_allclose(leaky.d, np.where(a > 0, a, 0.2 * a))
    np.testing.assert_array_equal(x.d, a)


def test_relu_gradient_is_zero_at_and_below_zero():
    x = nn.Variable.from_numpy_array(np.array([-1.0, 0.0, 2.0]), need_grad=True)
    y = F.relu(x)
    y.forward()
    y.backward(np.ones(3))
    np.testing.assert_array_equal(x.g, [0, 0, 1])


def test_sigmoid_is_stable_for_large_inputs():
    x = nn.Variable.from_numpy_array(np.array([-1000.0, -40.0, 0.0, 40.0, 1000.0]))
    with np.errstate(over="raise", invalid="raise"):
        y = F.sigmoid(x)
        y.forward()
    np.testing.assert_allclose(y.d, [0.0, np.exp(-40.0), 0.5, 1.0, 1.0], rtol=1e-12, atol=0)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, 2])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_and_log_softmax(axis, log, rng):
    x = rng.randn(2, 3, 4)
    fn = F.log_softmax if log else F.softmax
    y = check_grad(lambda v: fn(v, axis=axis), [x])
    expected = _ref_softmax(x, -1 if axis is None else axis)
    np.testing.assert_allclose(y.d, np.log(expected) if log else expected, rtol=1e-12)


def test_softmax_default_axis_is_the_last(rng):
    x = nn.Variable.from_numpy_array(rng.randn(2, 3))
    y = F.softmax(x)
    y.forward()
    np.testing.assert_allclose(y.d.sum(axis=1), [1, 1])


@pytest.mark.parametrize("log", [False, True])
def test_softmax_is_stable_for_large_inputs(log):
    x = nn.Variable.from_numpy_array(np.array([[1000.0, 0.0, -1000.0], [1e4, 1e4, 1e4]]))
    with np.errstate(over="raise", invalid="raise"):
        y = (F.log_softmax if log else F.softmax)(x)
        y.forward()
    if log:
        np.testing.assert_allclose(y.d, [[0.0, -1000.0, -2000.0], [-np.log(3)] * 3], rtol=1e-12)
    else:
        np.testing.assert_allclose(y.d, [[1.0, 0.0, 0.0], [1 / 3] * 3], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax])
def test_softmax_rejects_a_bad_axis(fn):
    with pytest.raises(DpnbError, match=r"Softmax: axis must be an int in \[-2, 2\) for an input of "
                                        r"2 dimensions, got 2"):
        fn(nn.Variable((2, 3)), axis=2)


def _run(build, a, w):
    """Forward and backward of ``build`` in the current context, as NumPy arrays."""
    x = nn.Variable.from_numpy_array(a, need_grad=True)
    y = build(x)
    y.forward()
    y.backward(w)
    return [np.asarray(v.get() if hasattr(v, "get") else v) for v in (y.d, x.g)]


GPU_CASES = dict({name: fn for name, (fn, _) in ELEMENTWISE.items()},
                 softmax=lambda x: F.softmax(x, axis=1), log_softmax=lambda x: F.log_softmax(x, axis=0))


@requires_gpu
@pytest.mark.parametrize("name", GPU_CASES)
def test_gpu_matches_cpu(name, rng):
    a, w = _away_from_zero(rng, 3, 4), rng.randn(3, 4)
    cpu = _run(GPU_CASES[name], a, w)
    with nn.context_scope(get_extension_context("cudnn")):
        gpu = _run(GPU_CASES[name], a, w)
    for g, c in zip(gpu, cpu):
        np.testing.assert_allclose(g, c, rtol=1e-10, atol=1e-12)
