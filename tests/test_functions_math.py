"""F.* arithmetic, elementwise math and reductions, and the Variable operators."""
import numpy as np
import pytest
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
    _, index = F.max(x, axis=1, with_index=True)
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


@pytest.mark.parametrize("name", GPU_CASES)
def test_gpu_matches_cpu(name, rng, gpu):
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


# -- the elementwise functions of nnabla's math family: what the shared cases leave out --

def _forward(y):
    y.forward()
    return y.d


def test_erf_matches_the_standard_library_to_double_precision():
    import math
    x = np.linspace(-7.0, 7.0, 2001)
    y = _forward(F.erf(_variable(x)))
    np.testing.assert_allclose(y, [math.erf(v) for v in x], rtol=0, atol=1e-14)
    assert _forward(F.erf(_variable(x.astype(np.float32)))).dtype == np.float32


def test_round_takes_halves_away_from_zero_unlike_numpy():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, -0.49999997], np.float32)
    np.testing.assert_array_equal(_forward(F.round(_variable(x))), [-3, -2, -1, 1, 2, 3, 0, 0])


@pytest.mark.parametrize("fn", [F.floor, F.ceil, F.round, F.sign])
def test_piecewise_constant_functions_pass_the_gradient_straight_through(fn):
    x = _variable(np.array([-1.7, 0.0, 0.3, 2.5]), need_grad=True)
    y = fn(x)
    y.forward()
    y.backward(np.array([1.0, -2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(x.g, [1.0, -2.0, 3.0, 4.0])


def test_sign_gives_alpha_at_zero():
    x = _variable(np.array([-0.5, 0.0, 2.0], np.float32))
    np.testing.assert_array_equal(_forward(F.sign(x)), [-1, 1, 1])
    np.testing.assert_array_equal(_forward(F.sign(x, alpha=0.0)), [-1, 0, 1])


def test_mul_n_gradient_is_exact_where_inputs_are_zero():
    # nnabla divides the product by each input and gives NaN here; dpnb multiplies the others
    arrays = [np.array([0.0, 2.0, 3.0]), np.array([5.0, 0.0, 4.0]), np.array([2.0, 3.0, 0.5])]
    xs = [_variable(a, need_grad=True) for a in arrays]
    y = F.mul_n(*xs)
    y.forward()
    y.backward(np.ones(3))
    np.testing.assert_array_equal(xs[0].g, [10.0, 0.0, 2.0])
    np.testing.assert_array_equal(xs[1].g, [0.0, 6.0, 1.5])
    np.testing.assert_array_equal(xs[2].g, [0.0, 0.0, 12.0])


def test_mul_n_and_add_n_of_four_inputs(rng):
    arrays = [rng.uniform(0.5, 2.0, (2, 3)) for _ in range(4)]
    y = check_grad(F.mul_n, arrays)
    np.testing.assert_allclose(y.d, np.prod(arrays, axis=0))
    y = check_grad(F.add_n, arrays)
    np.testing.assert_allclose(y.d, np.sum(arrays, axis=0))


@pytest.mark.parametrize("fn", [F.add_n, F.mul_n])
def test_n_ary_functions_reject_no_inputs_other_shapes_and_stray_keywords(fn):
    name = "AddN" if fn is F.add_n else "MulN"
    with pytest.raises(DpnbError, match=rf"{name}: needs at least one input variable, got none"):
        fn()
    with pytest.raises(DpnbError, match=rf"{name}: every input must have the shape of input 0, "
                                        r"\(2, 3\); input 2 has \(3,\); broadcast"):
        fn(nn.Variable((2, 3)), nn.Variable((2, 3)), nn.Variable((3,)))
    with pytest.raises(DpnbError, match=r"unexpected keyword argument\(s\) \['axis'\]; besides "
                                        r"the input variables it takes n_outputs, outputs"):
        fn(nn.Variable((2, 3)), axis=0)
    with pytest.raises(DpnbError, match=r"n_outputs and outputs hand in output variables"):
        fn(nn.Variable((2, 3)), n_outputs=2)
    assert fn(nn.Variable((2, 3)), n_outputs=-1, outputs=None).shape == (2, 3)


@pytest.mark.parametrize("fn", [F.maximum2, F.minimum2, F.atan2, F.mod2, F.bc_add2])
def test_binary_math_rejects_shapes_that_do_not_broadcast(fn):
    with pytest.raises(DpnbError, match=r"shapes \(2, 3\) and \(2,\) do not broadcast together"):
        fn(nn.Variable((2, 3)), nn.Variable((2,)))


def test_mod2_has_no_gradient_and_keeps_integers():
    a = _variable(np.array([-7, 7], np.int32))
    b = _variable(np.array([3, -3], np.int32))
    y = F.mod2(a, b)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(_forward(y), [2, -2])
    x = _variable(np.array([-3.5, 3.5]), need_grad=True)
    z = F.mod2(x, _variable(np.array([2.0, 2.0])))
    assert not z.need_grad
    np.testing.assert_array_equal(_forward(z), [-1.5, 1.5])


def test_reset_nan_and_inf_leave_the_other_special_value():
    x = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    np.testing.assert_array_equal(_forward(F.reset_nan(_variable(x), 5)), [5, np.inf, -np.inf, 1])
    np.testing.assert_array_equal(_forward(F.reset_inf(_variable(x), 5))[1:], [5, 5, 1])
    assert np.isnan(_forward(F.reset_inf(_variable(x)))[0])


def test_clip_by_value_rejects_bounds_that_are_not_numbers_or_variables():
    with pytest.raises(DpnbError, match=r"F.clip_by_value: min must be a number or an "
                                        r"nn.Variable, got list"):
        F.clip_by_value(nn.Variable((2,)), [0.0], 1.0)
    with pytest.raises(DpnbError, match=r"F.clip_by_value: max must be a number or an "
                                        r"nn.Variable, got str"):
        F.clip_by_value(nn.Variable((2,)), 0.0, "1")


def test_clip_by_value_with_broadcast_variable_bounds(rng):
    x = rng.randn(2, 3) * 2
    lo, hi = np.array([-1.0, -0.5, -0.2]), np.array([[0.3], [1.1]])
    y = F.clip_by_value(_variable(x), _variable(lo), _variable(hi))
    np.testing.assert_array_equal(_forward(y), np.minimum(np.maximum(x, lo), hi))


@pytest.mark.parametrize("axis, message", [
    (2, r"F.clip_by_norm: axis must be an int in \[-2, 2\) for an input of 2 dimensions, got 2"),
    ((0, 0), r"F.clip_by_norm: axis \(0, 0\) names an axis more than once"),
    ("0", r"F.clip_by_norm: axis must be an int, a list or tuple of ints, or None, got '0'"),
])
def test_clip_by_norm_rejects_bad_axes(axis, message):
    with pytest.raises(DpnbError, match=message):
        F.clip_by_norm(nn.Variable((2, 3)), 1.0, axis=axis)


@pytest.mark.parametrize("clip_norm", [0.0, -1.0, "1"])
def test_clip_by_norm_needs_a_positive_clip_norm(clip_norm):
    with pytest.raises(ValueError, match=r"F.clip_by_norm: clip_norm must be a positive number "
                                        r"or an nn.Variable, got"):
        F.clip_by_norm(nn.Variable((2, 3)), clip_norm)


def test_clip_grad_by_norm_rejects_bad_axes_when_built():
    # nnabla accepts them here and fails only in backward
    with pytest.raises(DpnbError, match=r"ClipGradByNorm: axes must be an int in \[-2, 2\)"):
        F.clip_grad_by_norm(nn.Variable((2, 3)), 1.0, axes=(2,))
    with pytest.raises(DpnbError, match=r"ClipGradByNorm: clip_norm must be a number, got str"):
        F.clip_grad_by_norm(nn.Variable((2, 3)), "1")


def test_clip_grad_by_value_needs_bounds_of_the_shape_of_x():
    # nnabla reads past the end of smaller bounds; dpnb asks for them at full shape
    with pytest.raises(DpnbError, match=r"ClipGradByValue: min must have the shape of x, "
                                        r"\(2, 3\), got \(3,\); broadcast it first"):
        F.clip_grad_by_value(nn.Variable((2, 3)), nn.Variable((3,)), nn.Variable((2, 3)))
    with pytest.raises(DpnbError, match=r"ClipGradByValue: input 1 must be an nn.Variable, "
                                        r"got float"):
        F.clip_grad_by_value(nn.Variable((2, 3)), -1.0, 1.0)


def test_clip_grad_functions_are_the_identity_forward(rng):
    x = rng.randn(2, 3)
    for y in (F.clip_grad_by_norm(_variable(x), 0.1),
              F.clip_grad_by_value(_variable(x), _variable(np.zeros((2, 3))),
                                   _variable(np.ones((2, 3))))):
        np.testing.assert_array_equal(_forward(y), x)


@pytest.mark.parametrize("fn", [F.sin, F.abs, F.erf, F.floor, F.sign, F.reset_nan,
                                F.maximum_scalar, F.clip_grad_by_norm])
def test_unary_math_rejects_caller_made_outputs(fn):
    with pytest.raises(DpnbError, match=r"n_outputs and outputs hand in output variables, which "
                                        r"dpnb makes itself; got n_outputs=1"):
        fn(nn.Variable((2,)), n_outputs=1)


def test_scalar_math_rejects_a_non_number():
    with pytest.raises(DpnbError, match=r"MaximumScalar: val must be a number, got str"):
        F.maximum_scalar(nn.Variable((2,)), "1")
    with pytest.raises(DpnbError, match=r"ResetNaN: val must be a number, got NoneType"):
        F.reset_nan(nn.Variable((2,)), None)


GPU_ELEMENTWISE = {
    "trig": lambda a, b: F.sin(a) * F.cos(b) + F.tan(a * 0.5) + F.atan2(a, b),
    "inverse": lambda a, b: F.asin(a * 0.4) + F.acos(b * 0.4) + F.atan(a) + F.asinh(b)
    + F.acosh(a + 2.0) + F.atanh(b * 0.4),
    "hyperbolic_erf_sinc": lambda a, b: F.sinh(a) + F.cosh(b) + F.erf(a) + F.sinc(b),
    "rounding": lambda a, b: F.floor(a * 3) + F.ceil(b * 3) + F.round(a * 3) + F.sign(b - 1),
    "extrema": lambda a, b: F.maximum2(a, b) + F.minimum2(a, b) + F.maximum_scalar(a, 1.0)
    + F.minimum_scalar(b, 1.0) + F.clip_by_value(a, 0.8, 1.5),
    "n_ary": lambda a, b: F.mul_n(a, b, a) + F.add_n(a, b) + F.abs(a - b),
    "clipping": lambda a, b: F.clip_grad_by_norm(F.clip_by_norm(a * b, 1.0, axis=1), 0.5),
}


@pytest.mark.parametrize("name", GPU_ELEMENTWISE)
def test_gpu_elementwise_matches_cpu(name, rng, gpu):
    build = GPU_ELEMENTWISE[name]
    a, b = _positive(rng, 3, 4), _positive(rng, 3, 4)
    w = rng.randn(3, 4)
    y_cpu, g_cpu = _run(build, [a, b], w)
    with nn.context_scope(get_extension_context("cudnn")):
        y_gpu, g_gpu = _run(build, [a, b], w)
    np.testing.assert_allclose(y_gpu, y_cpu, rtol=1e-10, atol=1e-12)
    for gg, gc in zip(g_gpu, g_cpu):
        np.testing.assert_allclose(gg, gc, rtol=1e-10, atol=1e-12)


def test_bit_shift_rejects_signed_or_float_x_and_unknown_directions():
    shift = _variable(np.array([1, 2], np.uint8))
    with pytest.raises(DpnbError, match=r"BitShift: x must have an unsigned integer dtype, got "
                                        r"int32; make it with"):
        F.bit_shift(_variable(np.array([1, 2], np.int32)), shift)
    with pytest.raises(DpnbError, match=r"got float32"):
        F.bit_shift(_variable(np.array([1, 2], np.float32)), shift)
    with pytest.raises(DpnbError, match=r"BitShift: direction must be 'LEFT' or 'RIGHT', got 'UP'"):
        F.bit_shift(_variable(np.array([1, 2], np.uint8)), shift, "UP")
    with pytest.raises(DpnbError, match=r"BitShift: shapes \(2,\) and \(3,\) do not broadcast"):
        F.bit_shift(_variable(np.array([1, 2], np.uint8)), _variable(np.ones(3, np.uint8)))


def test_bit_shift_keeps_the_unsigned_dtype():
    y = F.bit_shift(_variable(np.array([3, 128], np.uint16)), _variable(np.array([2, 9], np.uint16)))
    assert y.dtype == np.uint16
    np.testing.assert_array_equal(_forward(y), [12, 0])


def test_set_active_input_mask_leaves_inputs_out_of_add_n_and_mul_n():
    rng = np.random.RandomState(3)
    arrays = [rng.randn(2, 3) for _ in range(4)]
    mask = [True, False, True, True]
    for build, reduce in ((F.add_n, np.add), (F.mul_n, np.multiply)):
        xs = [nn.Variable.from_numpy_array(a, need_grad=True) for a in arrays]
        y = build(*xs)
        y.parent.set_active_input_mask(mask)
        y.forward()
        a, c, d = arrays[0], arrays[2], arrays[3]
        np.testing.assert_allclose(y.d, reduce(reduce(a, c), d))
        for x in xs:
            x.grad.fill(7.0)
        y.backward()
        np.testing.assert_array_equal(xs[1].g, 7.0)  # left out: untouched
        expected = [1, None, 1, 1] if build is F.add_n else [c * d, None, a * d, a * c]
        for x, e in zip(xs, expected):
            if e is not None:
                np.testing.assert_allclose(x.g, 7.0 + e)
    with pytest.raises(DpnbError, match="one flag per input"):
        F.add_n(*xs).parent.set_active_input_mask([True])
    with pytest.raises(DpnbError, match="for AddN and MulN only"):
        F.sin(xs[0]).parent.set_active_input_mask([True])
