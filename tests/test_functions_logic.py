"""F.* comparisons, logical functions and where: what the shared nnabla cases leave out
(dtypes, the absent gradient, where's shapes, bad input)."""
import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
from dpnb import DpnbError
from dpnb.ext_utils import get_extension_context

BINARY = {
    "equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
    "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
}
SCALAR = {
    "equal_scalar": np.equal, "not_equal_scalar": np.not_equal, "greater_scalar": np.greater,
    "greater_equal_scalar": np.greater_equal, "less_scalar": np.less,
    "less_equal_scalar": np.less_equal, "logical_and_scalar": np.logical_and,
    "logical_or_scalar": np.logical_or, "logical_xor_scalar": np.logical_xor,
}
UNARY = {"logical_not": np.logical_not, "isnan": np.isnan, "isinf": np.isinf}


def _variable(array, need_grad=False):
    return nn.Variable.from_numpy_array(array, need_grad=need_grad)


def _forward(y):
    y.forward()
    return y.d


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("dtype, out", [(np.float32, np.float32), (np.float64, np.float64),
                                        (np.int32, np.float32)])
def test_binary_tests_give_0_or_1_in_float(name, dtype, out, rng):
    a, b = rng.randint(-1, 2, (2, 3)).astype(dtype), rng.randint(-1, 2, (3,)).astype(dtype)
    y = getattr(F, name)(_variable(a), _variable(b))
    assert y.dtype == out and y.shape == (2, 3)
    np.testing.assert_array_equal(_forward(y), BINARY[name](a, b))


@pytest.mark.parametrize("name", SCALAR)
@pytest.mark.parametrize("val", [0, 1, -0.5, True])
def test_scalar_tests(name, val, rng):
    x = rng.randint(-1, 2, (2, 3)).astype(np.float32) * 0.5
    y = getattr(F, name)(_variable(x), val)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(_forward(y), SCALAR[name](x, val))


def test_scalar_comparisons_default_to_1():
    x = _variable(np.array([0.0, 1.0, 2.0], np.float32))
    np.testing.assert_array_equal(_forward(F.equal_scalar(x)), [0, 1, 0])
    np.testing.assert_array_equal(_forward(F.less_scalar(x)), [1, 0, 0])


@pytest.mark.parametrize("name", UNARY)
def test_unary_tests(name):
    x = np.array([np.nan, -np.inf, 0.0, 2.0, np.inf], np.float32)
    y = getattr(F, name)(_variable(x))
    assert y.dtype == np.float32
    np.testing.assert_array_equal(_forward(y), UNARY[name](x))


def test_tests_carry_no_gradient_and_the_rest_of_a_graph_still_back_propagates():
    # nnabla raises when backward reaches them; dpnb treats them as constants
    x = _variable(np.array([1.0, -2.0, 3.0]), need_grad=True)
    mask = F.greater_scalar(x, 0)
    assert not mask.need_grad
    y = x * mask
    y.forward()
    y.backward(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(x.g, [1.0, 0.0, 3.0])


@pytest.mark.parametrize("name", BINARY)
def test_binary_tests_reject_shapes_that_do_not_broadcast(name):
    with pytest.raises(DpnbError, match=r"shapes \(2, 3\) and \(2,\) do not broadcast together"):
        getattr(F, name)(nn.Variable((2, 3)), nn.Variable((2,)))


@pytest.mark.parametrize("name", SCALAR)
def test_scalar_tests_reject_a_variable_as_val(name):
    with pytest.raises(DpnbError, match=r"val must be a number, got Variable; for two variables"):
        getattr(F, name)(nn.Variable((2,)), nn.Variable((2,)))


@pytest.mark.parametrize("name", list(BINARY) + list(UNARY) + ["equal_scalar", "where"])
def test_logic_rejects_caller_made_outputs(name):
    args = [nn.Variable((2,))] * (3 if name == "where" else 2 if name in BINARY else 1)
    with pytest.raises(DpnbError, match=r"n_outputs and outputs hand in output variables"):
        getattr(F, name)(*args, outputs=[nn.Variable((2,))])


def test_where_spreads_a_lower_rank_condition_over_the_trailing_axes(rng):
    c = np.array([1.0, 0.0])
    t, f = rng.randn(2, 3), rng.randn(2, 3)
    xs = [_variable(t, need_grad=True), _variable(f, need_grad=True)]
    y = F.where(_variable(c), *xs)
    np.testing.assert_array_equal(_forward(y), np.where(c[:, None] != 0, t, f))
    y.backward(np.full((2, 3), 2.0))
    np.testing.assert_array_equal(xs[0].g, [[2, 2, 2], [0, 0, 0]])
    np.testing.assert_array_equal(xs[1].g, [[0, 0, 0], [2, 2, 2]])


def test_where_gives_the_condition_no_gradient():
    c = _variable(np.array([1.0, 0.0]), need_grad=True)
    t, f = _variable(np.ones(2), need_grad=True), _variable(np.zeros(2), need_grad=True)
    y = F.where(c, t, f)
    y.forward()
    c.g = 7
    y.backward(np.ones(2))
    np.testing.assert_array_equal(c.g, [7, 7])


@pytest.mark.parametrize("shapes, message", [
    (((2, 3), (2, 3), (3,)), r"x_true and x_false must have one shape, got \(2, 3\) and \(3,\)"),
    (((2, 3), (2,), (2,)), r"the shape of x_true and x_false, \(2,\), must start with condition's"),
    (((3,), (2, 3), (2, 3)), r"x_false, \(2, 3\), must start with condition's shape \(3,\); "),
    (((1, 3), (2, 3), (2, 3)), r"x_false, \(2, 3\), must start with condition's shape \(1, 3\)"),
])
def test_where_rejects_shapes_it_cannot_pair(shapes, message):
    with pytest.raises(DpnbError, match="Where: .*" + message):
        F.where(*[nn.Variable(s) for s in shapes])


def test_gpu_logic_matches_cpu(rng, gpu):
    a = rng.randint(-1, 2, (3, 4)).astype(np.float64)
    b = rng.randint(-1, 2, (3, 4)).astype(np.float64)

    def run():
        x, y = _variable(a, need_grad=True), _variable(b, need_grad=True)
        tests = [getattr(F, name)(x, y) for name in BINARY]
        tests += [getattr(F, name)(x, 0) for name in SCALAR]
        tests += [getattr(F, name)(x) for name in UNARY]
        z = F.where(F.greater(x, y), x * 2.0, y) + F.add_n(*tests)
        z.forward()
        z.backward(np.ones((3, 4)))
        return [np.asarray(v.get() if hasattr(v, "get") else v) for v in (z.d, x.g, y.g)]

    cpu = run()
    with nn.context_scope(get_extension_context("cudnn")):
        gpu = run()
    for g, c in zip(gpu, cpu):
        np.testing.assert_array_equal(g, c)
