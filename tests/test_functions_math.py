"""F.* arithmetic, elementwise math and reductions, and the Variable operators."""
import numpy as np
import pytest
from conftest import requires_gpu
from gradcheck import check_grad

import dpnb as nn
import dpnb.functions as F
from dpnb import DpnbError
from dpnb.ext_utils import get_extension_context

BINARY = {
    "add2": (F.add2, np.add),
    "sub2": (F.sub2, np.subtract),
    "mul2": (F.mul2, np.multiply),
    "div2": (F.div2, np.divide),
    "pow2": (F.pow2, np.power),
}


def _positive(rng, *shape):
    """Values in [0.5, 2): safe for division, log and powers."""
    return rng.uniform(0.5, 2.0, shape)


def _variable(array, need_grad=False):
    return nn.Variable.from_numpy_array(array, need_grad=need_grad)


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1, 3), (4, 1)), ((), (2,))])
def test_binary_values_and_gradients(name, shapes, rng):
    fn, ref = BINARY[name]
    a, b = _positive(rng, *shapes[0]), _positive(rng, *shapes[1])
    y = check_grad(fn, [a, b])
    assert y.shape == np.broadcast_shapes(a.shape, b.shape)
    np.testing.assert_allclose(y.d, ref(a, b))


@pytest.mark.parametrize("name", BINARY)
def test_binary_accepts_inplace_and_keeps_float32(name, rng):
    fn, ref = BINARY[name]
    a, b = _positive(rng, 2, 3).astype(np.float32), _positive(rng, 3).astype(np.float32)
    y = fn(_variable(a), _variable(b), inplace=True)
    y.forward()
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.d, ref(a, b), rtol=1e-6)


def test_binary_gradient_to_one_input_only(rng):
    a, b = _positive(rng, 2, 3), _positive(rng, 3)
    check_grad(F.div2, [a, b], need_grad=[False, True])
    check_grad(F.pow2, [a, b], need_grad=[True, False])


def test_binary_shapes_that_do_not_broadcast():
    with pytest.raises(DpnbError, match=r"Add2: shapes \(2, 3\) and \(2,\) do not broadcast"):
        F.add2(nn.Variable((2, 3)), nn.Variable((2,)))


SCALAR = {
    "add_scalar": (F.add_scalar, lambda x, v: x + v),
    "mul_scalar": (F.mul_scalar, lambda x, v: x * v),
    "pow_scalar": (F.pow_scalar, lambda x, v: x ** v),
    "r_sub_scalar": (F.r_sub_scalar, lambda x, v: v - x),
    "r_div_scalar": (F.r_div_scalar, lambda x, v: v / x),
    "r_pow_scalar": (F.r_pow_scalar, lambda x, v: v ** x),
}


@pytest.mark.parametrize("name", SCALAR)
@pytest.mark.parametrize("val", [1, 2.5, -0.5])
def test_scalar_values_and_gradients(name, val, rng):
    fn, ref = SCALAR[name]
    if name == "r_pow_scalar":
        val = abs(val)
    x = _positive(rng, 2, 3)
    y = check_grad(lambda v: fn(v, val), [x])
    np.testing.assert_allclose(y.d, ref(x, val))


@pytest.mark.parametrize("name", SCALAR)
def test_scalar_default_val_and_float32(name, rng):
    fn, ref = SCALAR[name]
    x = _positive(rng, 4).astype(np.float32)
    y = fn(_variable(x))
    y.forward()
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.d, ref(x, 1), rtol=1e-6)


def test_scalar_rejects_a_non_number():
    with pytest.raises(DpnbError, match="AddScalar: val must be a number, got Variable; for two"):
        F.add_scalar(nn.Variable((2,)), nn.Variable((2,)))


@pytest.mark.parametrize("fn, ref", [(F.exp, np.exp), (F.log, np.log)])
def test_exp_and_log(fn, ref, rng):
    x = _positive(rng, 3, 2)
    y = check_grad(fn, [x])
    np.testing.assert_allclose(y.d, ref(x))


REDUCTIONS = {"sum": (F.sum, np.sum), "mean": (F.mean, np.mean), "max": (F.max, np.max),
              "min": (F.min, np.min)}
AXES = [None, 0, 1, -1, (0, 2), [2, 0], (0, 1, 2)]


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(name, axis, keepdims, rng):
    fn, ref = REDUCTIONS[name]
    # a shuffled grid: all elements distinct, so the maximum and minimum are never tied
    x = rng.permutation(24).reshape(2, 3, 4) / 4.0
    y = check_grad(lambda v: fn(v, axis=axis, keepdims=keepdims), [x])
    np_axis = tuple(axis) if isinstance(axis, list) else axis
    expected = ref(x, axis=np_axis, keepdims=keepdims)
    assert y.shape == expected.shape
    np.testing.assert_allclose(y.d, expected)


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions_keep_float32(name, rng):
    fn, ref = REDUCTIONS[name]
    x = rng.randn(3, 4).astype(np.float32)
    y = fn(_variable(x), axis=1)
    y.forward()
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.d, ref(x, axis=1), rtol=1e-6)


def test_max_gradient_goes_to_the_first_maximum():
    x = _variable(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]]), need_grad=True)
    y = F.max(x, axis=1)
    y.forward()
    y.backward(np.array([10.0, 20.0]))
    np.testing.assert_array_equal(x.g, [[0, 10, 0], [20, 0, 0]])

    x.g = 0
    z = F.max(x)
    z.forward()
    z.backward()
    np.testing.assert_array_equal(x.g, [[0, 1, 0], [0, 0, 0]])


def test_max_over_two_axes_picks_the_first_in_row_major_order():
    x = _variable(np.array([[[5.0, 1.0], [0.0, 5.0]], [[2.0, 7.0], [7.0, 1.0]]]), need_grad=True)
    y = F.max(x, axis=(1, 2))
    y.forward()
    y.backward(np.ones(2))
    np.testing.assert_array_equal(x.g, [[[1, 0], [0, 0]], [[0, 1], [0, 0]]])


def test_min_gradient_goes_to_the_first_minimum():
    x = _variable(np.array([[1.0, 0.0, 0.0], [2.0, 2.0, 5.0]]), need_grad=True)
    y = F.min(x, axis=1)
    y.forward()
    y.backward(np.array([10.0, 20.0]))
    np.testing.assert_array_equal(x.g, [[0, 10, 0], [20, 0, 0]])


def _numpy_index(ref_arg, x, axis, keepdims):
    """NumPy's flat index of the first extreme over ``axis`` (row-major over those axes)."""
    axes = tuple(range(x.ndim)) if axis is None else tuple(
        a % x.ndim for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
    moved = np.moveaxis(x, sorted(axes), range(x.ndim - len(axes), x.ndim))
    index = ref_arg(moved.reshape(moved.shape[:x.ndim - len(axes)] + (-1,)), axis=-1)
    if keepdims:
        index = index.reshape([1 if i in axes else s for i, s in enumerate(x.shape)])
    return index


@pytest.mark.parametrize("fn, ref, ref_arg", [(F.max, np.max, np.argmax), (F.min, np.min, np.argmin)])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_with_index_and_only_index(fn, ref, ref_arg, axis, keepdims, rng):
    x = np.round(rng.randn(2, 3, 4), 0)  # rounded: ties, where the first one counts
    expected_index = _numpy_index(ref_arg, x, axis, keepdims)
    value, index = fn(_variable(x), axis=axis, keepdims=keepdims, with_index=True)
    only = fn(_variable(x), axis=axis, keepdims=keepdims, only_index=True)
    for v in (value, index, only):
        v.forward()
    np_axis = tuple(axis) if isinstance(axis, list) else axis
    np.testing.assert_array_equal(value.d, ref(x, axis=np_axis, keepdims=keepdims))
    for i in (index, only):
        assert i.dtype == np.uint64 and i.shape == value.shape
        np.testing.assert_array_equal(i.d, expected_index)
    y = check_grad(lambda v: fn(v, axis=axis, keepdims=keepdims, with_index=True)[0],
                   [rng.permutation(24).reshape(2, 3, 4) / 4.0])
    assert y.shape == value.shape


def test_the_index_output_passes_no_gradient_but_only_index_does_as_in_nnabla():
    x = _variable(np.array([[1.0, 3.0, 2.0], [4.0, 0.0, 4.0]]), need_grad=True)
    value, index = F.max(x, axis=1, with_index=True)
    index.forward()
    index.backward(np.ones(2))
    np.testing.assert_array_equal(x.g, 0)
    only = F.min(x, axis=1, only_index=True)
    only.forward()
    only.backward(np.array([2, 3], dtype=np.uint64))
    np.testing.assert_array_equal(x.g, [[2, 0, 0], [0, 3, 0]])


@pytest.mark.parametrize("axis, message", [
    (2, r"axis must be an int in \[-2, 2\) for an input of 2 dimensions, got 2"),
    (-3, r"got -3"),
    ((0, -2), r"axis \(0, -2\) names an axis more than once"),
    (1.0, r"got 1.0"),
])
@pytest.mark.parametrize("fn", [F.sum, F.mean, F.max, F.min])
def test_reductions_reject_bad_axes(fn, axis, message):
    with pytest.raises(DpnbError, match=message):
        fn(nn.Variable((2, 3)), axis=axis)


def test_max_and_min_reject_an_empty_axis():
    with pytest.raises(DpnbError, match=r"Max: cannot take the maximum over an empty axis"):
        F.max(nn.Variable((2, 0)), axis=1)
    with pytest.raises(DpnbError, match=r"Min: cannot take the minimum over an empty axis"):
        F.min(nn.Variable((2, 0)), axis=1, with_index=True)


OPERATORS = {
    "x + y": (lambda x, y: x + y, lambda a, b: a + b),
    "x + 2": (lambda x, y: x + 2, lambda a, b: a + 2),
    "2 + x": (lambda x, y: 2 + x, lambda a, b: 2 + a),
    "x - y": (lambda x, y: x - y, lambda a, b: a - b),
    "x - 2": (lambda x, y: x - 2, lambda a, b: a - 2),
    "2 - x": (lambda x, y: 2 - x, lambda a, b: 2 - a),
    "x * y": (lambda x, y: x * y, lambda a, b: a * b),
    "3 * x": (lambda x, y: 3 * x, lambda a, b: 3 * a),
    "x / y": (lambda x, y: x / y, lambda a, b: a / b),
    "x / 4": (lambda x, y: x / 4, lambda a, b: a / 4),
    "1 / x": (lambda x, y: 1 / x, lambda a, b: 1 / a),
    "x ** y": (lambda x, y: x ** y, lambda a, b: a ** b),
    "x ** 2": (lambda x, y: x ** 2, lambda a, b: a ** 2),
    "2 ** x": (lambda x, y: 2 ** x, lambda a, b: 2 ** a),
    "-x": (lambda x, y: -x, lambda a, b: -a),
}


@pytest.mark.parametrize("expr", OPERATORS)
def test_variable_operators(expr, rng):
    build, ref = OPERATORS[expr]
    a, b = _positive(rng, 2, 3), _positive(rng, 3)
    uses_y = "y" in expr
    y = check_grad(build, [a, b], need_grad=[True, uses_y])
    np.testing.assert_allclose(y.d, ref(a, b))


def _run(build, arrays, w):
    """Forward and backward of ``build`` in the current context, as NumPy arrays."""
    xs = [nn.Variable.from_numpy_array(a, need_grad=True) for a in arrays]
    y = build(*xs)
    y.forward()
    y.backward(w)
    host = [np.asarray(v.get() if hasattr(v, "get") else v) for v in [y.d] + [x.g for x in xs]]
    return host[0], host[1:]


GPU_CASES = {
    "add2": lambda a, b: F.add2(a, b),
    "sub2": lambda a, b: F.sub2(a, b),
    "mul2": lambda a, b: F.mul2(a, b),
    "div2": lambda a, b: F.div2(a, b),
    "pow2": lambda a, b: F.pow2(a, b),
    "scalars": lambda a, b: F.r_pow_scalar(F.r_div_scalar(F.pow_scalar(F.r_sub_scalar(
        F.mul_scalar(F.add_scalar(a, 3), 0.5), 4), 2), 1), 1.5) + b,
    "exp_log": lambda a, b: F.log(a) + F.exp(b),
    "sum": lambda a, b: F.sum(a * b, axis=(0, 2), keepdims=True),
    "mean": lambda a, b: F.mean(a - b, axis=1),
    "max": lambda a, b: F.max(a * b, axis=(1, 2)),
    "min_with_index": lambda a, b: F.min(a * b, axis=(0, 2), with_index=True)[0],
}


@requires_gpu
@pytest.mark.parametrize("name", GPU_CASES)
def test_gpu_matches_cpu(name, rng):
    build = GPU_CASES[name]
    a, b = _positive(rng, 2, 3, 4), _positive(rng, 3, 4)
    probe = build(nn.Variable(a.shape), nn.Variable(b.shape))
    w = rng.randn(*probe.shape)
    y_cpu, g_cpu = _run(build, [a, b], w)
    with nn.context_scope(get_extension_context("cudnn")):
        y_gpu, g_gpu = _run(build, [a, b], w)
    np.testing.assert_allclose(y_gpu, y_cpu, rtol=1e-10, atol=1e-12)
    for gg, gc in zip(g_gpu, g_cpu):
        np.testing.assert_allclose(gg, gc, rtol=1e-10, atol=1e-12)
