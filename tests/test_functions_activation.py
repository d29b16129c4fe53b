"""F.* activations: values against plain NumPy, gradients by finite differences."""
import numpy as np
import pytest
from gradcheck import check_grad

import dpnb as nn
import dpnb.functions as F
import dpnb.parametric_functions as PF
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
    "selu": (F.selu, lambda x: 1.05070098735548 * np.where(x > 0, x, 1.673263242354377 * (np.exp(x) - 1))),
    "selu scale alpha": (lambda x: F.selu(x, scale=2.0, alpha=0.5),
                         lambda x: 2.0 * np.where(x > 0, x, 0.5 * (np.exp(x) - 1))),
    "gelu": (F.gelu, lambda x: x / 2 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    "mish": (F.mish, lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    "swish": (F.swish, lambda x: x / (1 + np.exp(-x))),
    "softplus": (F.softplus, lambda x: np.log1p(np.exp(x))),
    "softplus beta": (lambda x: F.softplus(x, beta=3.0), lambda x: np.log1p(np.exp(3 * x)) / 3),
    "softsign": (F.softsign, lambda x: x / (1 + np.abs(x))),
    "log_sigmoid": (F.log_sigmoid, lambda x: -np.log1p(np.exp(-x))),
    "hard_sigmoid": (F.hard_sigmoid, lambda x: np.clip(0.2 * x + 0.5, 0, 1)),
    "hard_tanh": (F.hard_tanh, lambda x: np.clip(x, -1, 1)),
    "tanh_shrink": (F.tanh_shrink, lambda x: x - np.tanh(x)),
}

# Inputs of these functions stay 0.1 away from their kinks (2.5 and 1 as well as 0).
KINKS = {"hard_sigmoid": (-2.5, 2.5), "hard_tanh": (-1.0, 1.0)}


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_values_and_gradients(name, rng):
    fn, ref = ELEMENTWISE[name]
    x = _away_from_zero(rng, 3, 4) * 2
    for kink in KINKS.get(name, ()):
        x = np.where(np.abs(x - kink) < 0.1, kink + 0.2, x)
    y = check_grad(fn, [x])
    np.testing.assert_allclose(y.d, ref(x), rtol=1e-12)


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_keeps_float32(name, rng):
    fn, ref = ELEMENTWISE[name]
    x = _away_from_zero(rng, 5).astype(np.float32)
    y = fn(nn.Variable.from_numpy_array(x))
    y.forward()
    assert y.dtype == np.float32
    assert (y.g.dtype if y.need_grad else y.d.dtype) == np.float32
    np.testing.assert_allclose(y.d, ref(x.astype(np.float64)), rtol=1e-6, atol=1e-7)


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


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_relu_gives_positive_zero_for_nan_and_negative_zero_as_nnabla(kernel_backend, dtype):
    """nnabla 1.39.0 gives [0, 0, 0, inf, 0, 0, 3], every zero +0 (recorded with nnabla:
    F.relu of these inputs; its max(0, x) takes 0 unless 0 < x), where NumPy's maximum
    would give NaN; a transposed view included."""
    a = np.array([-0.0, np.nan, -np.inf, np.inf, 0, -2, 3], dtype)
    for x, want in [(a, [0, 0, 0, np.inf, 0, 0, 3]),
                    (a[:6].reshape(2, 3).T, [[0, np.inf], [0, 0], [0, 0]])]:
        y = F.relu(nn.Variable.from_numpy_array(x))
        y.forward()
        assert y.d.dtype == dtype
        np.testing.assert_array_equal(y.d, want)
        assert not np.signbit(y.d).any()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_relu_gradient_is_zero_below_zero_even_for_infinite_or_nan_gradients(kernel_backend,
                                                                             dtype):
    """nnabla 1.39.0 gives [0, inf, 0, 0, -0.5] (recorded with nnabla: F.relu of x below,
    backward with these gradients); ``g * (y > 0)`` would give NaN at the first and third.
    A transposed view of the gradient takes the bit-mask path on every backend."""
    x = nn.Variable.from_numpy_array(np.array([-1, 2, -3, 0, 4], dtype), need_grad=True)
    y = F.relu(x)
    y.forward()
    y.backward(np.array([np.inf, np.inf, np.nan, 1, -0.5], dtype))
    assert x.g.dtype == dtype
    np.testing.assert_array_equal(x.g, [0, np.inf, 0, 0, -0.5])
    assert not np.signbit(x.g[[0, 2, 3]]).any()   # +0, as nnabla's
    x = nn.Variable.from_numpy_array(np.array([[-1, 2], [3, -4]], dtype), need_grad=True)
    y = F.relu(x)
    y.forward()
    y.backward(np.array([[np.nan, 5], [6, np.inf]], dtype).T)
    np.testing.assert_array_equal(x.g, [[0, 6], [5, 0]])


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


@pytest.mark.parametrize("name", GPU_CASES)
def test_gpu_matches_cpu(name, rng, gpu):
    a, w = _away_from_zero(rng, 3, 4), rng.randn(3, 4)
    cpu = _run(GPU_CASES[name], a, w)
    with nn.context_scope(get_extension_context("cudnn")):
        gpu = _run(GPU_CASES[name], a, w)
    for g, c in zip(gpu, cpu):
        np.testing.assert_allclose(g, c, rtol=1e-10, atol=1e-12)


def test_relu6_clips_at_zero_and_six(rng):
    x = np.array([-2.0, -0.5, 0.5, 3.0, 5.5, 6.5, 9.0])
    y = check_grad(F.relu6, [x])
    np.testing.assert_array_equal(y.d, np.clip(x, 0, 6))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("fn, half", [
    (lambda x, axis: F.crelu(x, axis=axis), lambda x: np.maximum(x, 0)),
    (lambda x, axis: F.celu(x, alpha=0.7, axis=axis), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x)))])
def test_concatenated_activations_join_both_signs(fn, half, axis, rng):
    x = _away_from_zero(rng, 2, 3, 4)
    y = check_grad(lambda v: fn(v, axis), [x])
    np.testing.assert_allclose(y.d, np.concatenate([half(x), half(-x)], axis=axis), rtol=1e-12)


def test_concatenated_activations_default_to_axis_1(rng):
    x = nn.Variable.from_numpy_array(_away_from_zero(rng, 2, 3))
    assert F.crelu(x).shape == (2, 6) and F.celu(x).shape == (2, 6)


@pytest.mark.parametrize("fn", [F.celu, F.crelu])
def test_concatenated_activations_reject_a_bad_axis(fn):
    with pytest.raises(DpnbError, match=r"axis must be an int in \[-1, 1\) for an input of 1 "
                                        r"dimensions, got 1"):
        fn(nn.Variable((4,)))


@pytest.mark.parametrize("slope_shape, base_axis, view", [((), 1, ()), ((1,), 1, ()), ((3,), 1, (3, 1)),
                                                          ((4,), 2, (4,)), ((2,), 0, (2, 1, 1)),
                                                          ((3,), -2, (3, 1))])
def test_prelu_slopes(slope_shape, base_axis, view, rng):
    x, w = _away_from_zero(rng, 2, 3, 4), rng.uniform(-1, 1, slope_shape)
    y = check_grad(lambda a, b: F.prelu(a, b, base_axis=base_axis), [x, w])
    slope = w.reshape(view)
    np.testing.assert_allclose(y.d, np.where(x > 0, x, slope * x), rtol=1e-12)


def test_prelu_rejects_a_slope_of_the_wrong_shape():
    x = nn.Variable((2, 3, 4))
    with pytest.raises(DpnbError, match=r"PReLU: the slope must have one value \(size 1\) or one per "
                                        r"channel, shape \(3,\) for axis 1 of the input \(2, 3, 4\), "
                                        r"got shape \(4,\); change the slope or base_axis"):
        F.prelu(x, nn.Variable((4,)))
    with pytest.raises(DpnbError, match=r"got shape \(1, 3\)"):
        F.prelu(x, nn.Variable((1, 3)))
    with pytest.raises(DpnbError, match=r"base_axis must lie in \[-3, 3\) for an input of 3 "
                                        r"dimensions, got 3"):
        F.prelu(x, nn.Variable(()), base_axis=3)


def test_softplus_rejects_beta_zero():
    with pytest.raises(DpnbError, match=r"SoftPlus: beta must not be 0"):
        F.softplus(nn.Variable((2,)), beta=0)


@pytest.mark.parametrize("fn", [F.softplus, F.log_sigmoid, F.mish, F.swish])
def test_softplus_family_is_stable_for_large_inputs(fn):
    x = nn.Variable.from_numpy_array(np.array([-1000.0, -50.0, 50.0, 1000.0]), need_grad=True)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        y = fn(x)
        y.forward()
        y.backward(np.ones(4))
    assert np.all(np.isfinite(y.d)) and np.all(np.isfinite(x.g))


def test_pf_prelu_parameters():
    x = nn.Variable.from_numpy_array(np.full((2, 3, 4), -1.0))
    y = PF.prelu(x)
    y.forward()
    params = nn.get_parameters()
    assert list(params) == ["prelu/slope"] and params["prelu/slope"].shape == ()
    np.testing.assert_allclose(y.d, -0.25)
    PF.prelu(x, base_axis=2, shared=False, name="act")
    assert nn.get_parameters()["act/prelu/slope"].shape == (4,)
    nn.clear_parameters()
    x.need_grad = True
    y = PF.prelu(x, shared=False, slope_init=np.array([1.0, 2.0, 3.0]), fix_parameters=True)
    slope = nn.get_parameters(grad_only=False)["prelu/slope"]
    np.testing.assert_array_equal(slope.d, [1, 2, 3])
    slope.g = 0
    y.forward()
    y.backward(np.ones(y.shape))
    np.testing.assert_array_equal(slope.g, 0)
    assert np.all(x.g != 0), "the input still gets its gradient"


def test_pf_prelu_rejects_bad_input():
    with pytest.raises(DpnbError, match="PF.prelu expects an nn.Variable or NdArray input, got ndarray"):
        PF.prelu(np.zeros((2, 3)))
    with pytest.raises(DpnbError, match=r"PF.prelu: base_axis must lie in \[-2, 2\)"):
        PF.prelu(nn.Variable((2, 3)), shared=False, base_axis=2)


@pytest.mark.parametrize("fn", [F.relu, F.gelu, F.softmax, F.prelu])
def test_output_arguments_only_take_their_defaults(fn):
    args = [nn.Variable((2, 3))] + ([nn.Variable(())] if fn is F.prelu else [])
    assert fn(*args, n_outputs=-1, outputs=None).shape == (2, 3)
    with pytest.raises(DpnbError, match=r"n_outputs and outputs hand in output variables, which dpnb "
                                        r"makes itself; got n_outputs=1"):
        fn(*args, n_outputs=1)
