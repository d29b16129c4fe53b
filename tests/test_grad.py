"""nn.grad and the graph backward of functions: second derivatives against central
differences in float64, nn.grad's semantics as nnabla's, the backward-function registry,
and a WGAN-GP step against a NumPy reference."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from nnabla_cases.functions import central_differences

import dpnb as nn
import dpnb.functions as F
from dpnb.backward_functions import register, registry
from dpnb.errors import DpnbError
from dpnb.functions.graph_module import NoGraphGradient
from dpnb.graph import Function, functions_in_order
from dpnb.testing import check_ranks


@pytest.fixture(autouse=True)
def _define_and_run():
    nn.set_auto_forward(False)
    yield
    nn.set_auto_forward(False)


def _variables(arrays, need=None):
    need = need or [True] * len(arrays)
    return [nn.Variable.from_numpy_array(np.asarray(a, np.float64)).apply(need_grad=n)
            for a, n in zip(arrays, need)]


def check_second_order(build, arrays, need=None, seed=0, eps=1e-6, atol=1e-6, rtol=1e-5):
    """For y = build(*xs): nn.grad's first-order gradients equal backward()'s, and the
    gradient of s = sum_i <v_i, dy/dx_i (w)> (w, v_i random) built by nn.grad, with
    respect to the inputs and to the output gradient w, equals the central differences
    of s computed from backward()'s first-order gradients (the array-level reference),
    so a gradient graph right in value but wrong in how it depends on x or w fails."""
    rng = np.random.RandomState(seed)
    xs = _variables(arrays, need)
    wanted = [x for x in xs if x.need_grad]
    y = build(*xs)
    seed = nn.Variable.from_numpy_array(rng.randn(*y.shape)).apply(need_grad=True)
    w = seed.d
    # first order: against the array-level backward
    y.forward()
    for x in wanted:
        x.grad.zero()
    y.backward(w)
    first = [x.g.copy() for x in wanted]
    grads = nn.grad([y], wanted, grad_outputs=[seed])
    vs = [nn.Variable.from_numpy_array(rng.randn(*g.shape)) for g in grads]
    s = F.sum(F.mul2(grads[0], vs[0]))
    for g, v in zip(grads[1:], vs[1:]):
        s = s + F.sum(F.mul2(g, v))
    s.forward()
    for g, expected in zip(grads, first):
        np.testing.assert_allclose(g.d, expected, rtol=1e-10, atol=1e-10)
    # second order: the gradient of s against central differences of the reference s
    for x in [*wanted, seed]:
        x.grad.zero()
    s.backward()
    analytic = [x.g.copy() for x in [*wanted, seed]]

    def reference_s() -> float:
        y.forward()
        for x in wanted:
            x.grad.zero()
        y.backward(w)
        return sum(float(np.sum(x.g * v.d)) for x, v in zip(wanted, vs))

    for x, expected in zip([*wanted, seed], analytic):
        numeric = central_differences(x.d, reference_s, eps)
        np.testing.assert_allclose(expected, numeric, atol=atol, rtol=rtol)


rng = np.random.RandomState(1)
A = rng.randn(2, 3)
B = rng.randn(2, 3)
POS = rng.rand(2, 3) + 0.5
ROW = rng.randn(1, 3)
A_VAR = nn.Variable.from_numpy_array(A)
ROWS = nn.Variable.from_numpy_array(np.array([2, 0]))  # an index read at each forward


def _set_rows(a, b):
    """``a`` with rows ROWS (but their first entry) set to ``b``, squared."""
    y = a * 1.0
    y[ROWS, 1:] = b
    return y ** 2


CASES = {
    "add2": (lambda a, b: F.add2(a, b) ** 2, [A, ROW]),
    "sub2": (lambda a, b: F.sub2(a, b) ** 2, [A, ROW]),
    "mul2": (lambda a, b: F.mul2(a, b), [A, ROW]),
    "mul2_squared": (lambda a, b: F.mul2(a, b) ** 2, [A, B]),
    "div2": (lambda a, b: F.div2(a, b), [A, POS]),
    "pow2": (lambda a, b: F.pow2(a, b), [POS, B]),
    "add_scalar": (lambda a: F.add_scalar(a, 1.5) ** 3, [A]),
    "mul_scalar": (lambda a: F.mul_scalar(a, -2.0) ** 2, [A]),
    "pow_scalar": (lambda a: F.pow_scalar(a, 2.5), [POS]),
    "r_sub_scalar": (lambda a: F.r_sub_scalar(a, 2.0) ** 3, [A]),
    "r_div_scalar": (lambda a: F.r_div_scalar(a, 2.0), [POS]),
    "r_pow_scalar": (lambda a: F.r_pow_scalar(a, 1.7), [A]),
    "neg": (lambda a: (-a) ** 3, [A]),
    "exp": (lambda a: F.exp(a), [A]),
    "log": (lambda a: F.log(a), [POS]),
    "sqrt": (lambda a: a ** 0.5, [POS]),
    "abs": (lambda a: F.abs(a) ** 3, [A]),
    "relu": (lambda a: F.relu(a) ** 2, [A]),
    "leaky_relu": (lambda a: F.leaky_relu(a, 0.2) ** 2, [A]),
    "elu": (lambda a: F.elu(a), [A]),
    "sigmoid": (lambda a: F.sigmoid(a), [A]),
    "tanh": (lambda a: F.tanh(a), [A]),
    "sin": (lambda a: F.sin(a), [A]),
    "cos": (lambda a: F.cos(a), [A]),
    "softplus": (lambda a: F.softplus(a), [A]),
    "identity": (lambda a: F.identity(a) ** 2, [A]),
    "reshape": (lambda a: F.reshape(a, (3, 2)) ** 2, [A]),
    "transpose": (lambda a: F.transpose(a, (1, 0)) ** 3, [A]),
    "broadcast": (lambda a: F.broadcast(a, (2, 3)) ** 2, [ROW]),
    "sum": (lambda a: F.sum(a ** 2, axis=1, keepdims=True) ** 2, [A]),
    "mean": (lambda a: F.mean(a, axis=0) ** 2, [A]),
    "affine": (lambda x, w, b: F.tanh(F.affine(x, w, b)), [A, rng.randn(3, 4), rng.randn(4)]),
    "convolution": (lambda x, w, b: F.convolution(x, w, b, pad=(1, 1), stride=(2, 1)) ** 2,
                    [rng.randn(2, 2, 4, 3), rng.randn(3, 2, 2, 2), rng.randn(3)]),
    "convolution_group": (lambda x, w: F.convolution(x, w, group=2, dilation=(1, 2)) ** 2,
                          [rng.randn(1, 4, 3, 5), rng.randn(2, 2, 2, 2)]),
    "deconvolution": (lambda x, w: F.deconvolution(x, w, stride=(2, 2), pad=(1, 0)) ** 2,
                      [rng.randn(1, 2, 3, 2), rng.randn(2, 3, 3, 2)]),
    "max_pooling": (lambda x: F.max_pooling(x, (2, 2)) ** 2, [rng.randn(1, 2, 4, 4)]),
    "average_pooling": (lambda x: F.average_pooling(x, (2, 2), stride=(1, 1)) ** 2,
                        [rng.randn(1, 2, 3, 4)]),
    "softmax": (lambda a: F.softmax(a, axis=1), [A]),
    "log_softmax": (lambda a: F.log_softmax(a, axis=1), [A]),
    "squared_error": (lambda a, b: F.squared_error(a, b) ** 2, [A, B]),
    "concatenate": (lambda a, b: F.concatenate(a, b, axis=0) ** 2, [A, ROW]),
    "slice": (lambda a: F.slice(a, (0, 0), (2, 3), (1, 2)) ** 2, [A]),
    "get_item": (lambda a: a[[1, 0, 1], ::2] ** 3, [A]),
    "get_item_variable_key": (lambda a: a[ROWS - 1] ** 3, [A]),
    "get_item_mask": (lambda a: a[np.array([[True, False, True], [False, True, True]])] ** 3,
                      [A]),
    "set_item": (_set_rows, [rng.randn(3, 3), rng.randn(1, 2)]),
    "split": (lambda a: F.split(a, axis=1)[1] ** 3, [A]),
    "stack": (lambda a, b: F.stack(a, b, axis=1) ** 2, [A, B]),
    "pad_reflect": (lambda a: F.pad(a, (1, 2), mode="reflect") ** 2, [A]),
    "pad_constant": (lambda a: F.pad(a, (1, 2), constant_value=0.7) ** 2, [A]),
    "flip": (lambda a: F.flip(a, (0,)) ** 2, [A]),
    "cumsum": (lambda a: F.cumsum(a, axis=1) ** 2, [A]),
    "matrix_diag": (lambda a: F.matrix_diag(a) ** 2, [A]),
    "interpolate": (lambda x: F.interpolate(x, output_size=(3, 5)) ** 2, [rng.randn(1, 1, 2, 3)]),
    "global_average_pooling": (lambda x: F.global_average_pooling(x) ** 2, [rng.randn(2, 2, 3)]),
    "gelu": (lambda a: F.gelu(a), [A]),
    "prelu": (lambda a, w: F.prelu(a, w) ** 2, [A, rng.rand(1)]),
    "where": (lambda a, b: F.where(F.greater_scalar(A_VAR, 0.0), a, b) ** 2, [A, B]),
    "layer_normalization": (lambda x, b, g: F.layer_normalization(x, b, g) ** 2,
                            [rng.randn(3, 4), rng.randn(1, 4), rng.rand(1, 4) + 0.5]),
    "norm_normalization": (lambda a: F.norm_normalization(a, p=3, axes=1), [A]),
    "weight_normalization": (lambda w, g: F.weight_normalization(w, g, dim=0) ** 2,
                             [rng.randn(3, 2), rng.rand(3) + 0.5]),
    "batch_matmul": (lambda a, b: F.batch_matmul(a, b, transpose_b=True) ** 2,
                     [rng.randn(2, 2, 3), rng.randn(2, 4, 3)]),
    "batch_det": (lambda x: F.batch_det(x), [rng.randn(2, 3, 3)]),
    "batch_logdet": (lambda x: F.batch_logdet(x), [rng.randn(2, 3, 3)]),
    "batch_inv": (lambda x: F.batch_inv(x), [rng.randn(2, 3, 3) + 3 * np.eye(3)]),
    "max_pooling_backward": (lambda g, x: F.max_pooling_backward(g, x, (2, 2)) ** 2,
                             [rng.randn(1, 1, 2, 2), rng.randn(1, 1, 4, 4)]),
    # straight-through (the recorded cases skip finite differences): the gradient graph
    # must be that of what backward computes
    "binary_tanh": (lambda a: F.binary_tanh(a), [A]),
    "binary_sigmoid": (lambda a: F.binary_sigmoid(a), [A]),
    "binary_connect_affine": (lambda x, w, b: F.binary_connect_affine(
        x, w, nn.Variable(w.shape), b), [rng.randn(2, 3), rng.randn(3, 4), rng.randn(4)]),
    "binary_weight_affine": (lambda x, w: F.binary_weight_affine(
        x, w, nn.Variable(w.shape), nn.Variable((4,)), quantize_zero_to=0.0),
        [rng.randn(2, 3), rng.randn(3, 4)]),
    "binary_connect_convolution": (lambda x, w, b: F.binary_connect_convolution(
        x, w, nn.Variable(w.shape), b, stride=(2, 1)),
        [rng.randn(2, 1, 4, 3), rng.randn(4, 1, 2, 2), rng.randn(4)]),
    "binary_weight_convolution": (lambda x, w: F.binary_weight_convolution(
        x, w, nn.Variable(w.shape), nn.Variable((4,)), pad=(1, 0), group=2),
        [rng.randn(2, 2, 3, 3), rng.randn(4, 1, 2, 2)]),
    # the recorded cases leave these out: nnabla's first-order gradients differ
    "sort": (lambda a: F.sort(a, axis=0, reverse=True) ** 2, [A]),
    "top_k_data_in_place": (lambda a: F.top_k_data(a, 2, abs=True, reduce=False) ** 2, [A]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_second_derivative_against_central_differences(name):
    build, arrays = CASES[name]
    check_second_order(build, arrays)


def test_top_k_grad_graph_filters_the_gradient_as_its_backward():
    """Its gradient graph keeps the two largest output-gradient entries of each sample,
    and passes its own gradient back to those entries only."""
    x = _variables([A])[0]
    w, v = _variables([B, rng.randn(2, 3)])
    (g,) = nn.grad([F.top_k_grad(x, 2)], [x], grad_outputs=[w])
    s = F.sum(g * v)
    s.forward()
    kept = B >= np.sort(B, axis=1)[:, 1:2]
    np.testing.assert_allclose(g.d, B * kept)
    w.grad.zero()
    s.backward()
    np.testing.assert_allclose(w.g, v.d * kept)


WITH_ZEROS = np.array([[0.5, 0.0, 2.0, -1.5], [0.0, 1.5, 0.0, 0.5], [1.2, -0.7, 0.9, 1.1]])


@pytest.mark.parametrize("build", [
    lambda a: F.cumprod(a, axis=1),
    lambda a: F.cumprod(a, axis=1, exclusive=True, reverse=True),
    lambda a: F.prod(a, axis=1),
    lambda a: F.sinc(a),
    lambda a: F.max(a, axis=1) ** 3,
    lambda a: a ** 2,
], ids=["cumprod", "cumprod exclusive reverse", "prod", "sinc", "max", "square"])
def test_third_derivative_where_inputs_are_zero(build):
    """The second-order check of nn.grad's gradient graph itself: third derivatives."""
    weights = nn.Variable.from_numpy_array(
        np.random.RandomState(2).randn(*build(nn.Variable(WITH_ZEROS.shape)).shape))
    check_second_order(lambda a: nn.grad([F.sum(build(a) * weights)], [a])[0], [WITH_ZEROS])


def test_categorical_cross_entropy_second_derivative():
    labels = nn.Variable.from_numpy_array(np.array([[2], [-1]]))
    check_second_order(lambda x: F.categorical_cross_entropy(x, labels, axis=1), [POS])


def test_embed_second_derivative():
    ids = nn.Variable.from_numpy_array(np.array([[0, 2], [2, 1]]))
    check_second_order(lambda w: F.embed(ids, w) ** 2, [rng.randn(3, 2)])


def test_gather_and_scatter_second_derivatives():
    mask = nn.Variable.from_numpy_array(np.array([[1, 0, 1], [0, 1, 0]]))
    check_second_order(lambda x: F.bool_gather(x, mask) ** 3, [rng.randn(2, 3, 2)])
    check_second_order(lambda x: F.bool_scatter(x, mask) ** 3, [rng.randn(3, 2)])
    check_second_order(lambda x, out: F.bool_scatter(x, mask, out) ** 3,
                       [rng.randn(3, 2), rng.randn(2, 3, 2)])
    idx = nn.Variable.from_numpy_array(np.array([[0, 1, 1], [2, 0, 2]]))
    check_second_order(lambda x: F.gather_nd(x, idx) ** 3, [rng.randn(2, 3)])


def test_softmax_cross_entropy_second_derivative():
    labels = nn.Variable.from_numpy_array(np.array([[2], [0]]))
    check_second_order(lambda x: F.softmax_cross_entropy(x, labels, axis=1), [A])


@pytest.mark.parametrize("batch_stat", [True, False])
def test_batch_normalization_second_derivative(batch_stat):
    x = rng.randn(4, 2, 3)
    beta, gamma = rng.randn(1, 2, 1), rng.rand(1, 2, 1) + 0.5
    mean, var = nn.Variable.from_numpy_array(rng.randn(1, 2, 1)), \
        nn.Variable.from_numpy_array(rng.rand(1, 2, 1) + 0.5)

    def build(x, beta, gamma):
        # statistics kept as they are: the differences must see the same function
        return F.batch_normalization(x, beta, gamma, mean, var, batch_stat=batch_stat,
                                     decay_rate=1.0) ** 2
    check_second_order(build, [x, beta, gamma], atol=1e-5)


@pytest.mark.parametrize("with_z", [True, False])
def test_fused_batch_normalization_second_derivative(with_z):
    x, z = rng.randn(4, 2, 3), rng.randn(4, 2, 3)
    beta, gamma = rng.randn(1, 2, 1), rng.rand(1, 2, 1) + 0.5
    mean, var = nn.Variable.from_numpy_array(np.zeros((1, 2, 1))), \
        nn.Variable.from_numpy_array(np.ones((1, 2, 1)))

    def build(x, beta, gamma, *z):
        return F.fused_batch_normalization(x, beta, gamma, mean, var, *z, axes=(1,),
                                           decay_rate=1.0) ** 2
    check_second_order(build, [x, beta, gamma, *([z] if with_z else [])], atol=1e-5)


def _flat(*outputs):
    return F.concatenate(*[F.reshape(o, (-1,)) for o in outputs], axis=0)


@pytest.mark.parametrize("batch_stat", [True, False])
def test_batch_normalization_backward_class(batch_stat):
    """nnabla's BatchNormalizationBackward gives what backward gives batch normalization's
    x, beta and gamma, and its own gradient is right (against central differences)."""
    from dpnb.backward_function.batch_normalization import BatchNormalizationBackward
    r = np.random.RandomState(7)
    x, dy = r.randn(4, 2, 3), r.randn(4, 2, 3)
    beta, gamma = r.randn(1, 2, 1), r.rand(1, 2, 1) + 0.5
    mean, var = _variables([r.randn(1, 2, 1), r.rand(1, 2, 1) + 0.5], [False, False])
    xv, bv, gv = _variables([x, beta, gamma])
    y = F.batch_normalization(xv, bv, gv, mean, var, batch_stat=batch_stat, decay_rate=1.0)
    y.forward()
    for v in (xv, bv, gv):
        v.grad.zero()
    y.backward(dy)
    df = BatchNormalizationBackward(None, (1,), 1.0, 1e-5, batch_stat)
    outs = df(_variables([dy])[0], xv, bv, gv, mean, var)
    F.sink(*outs).forward()
    assert outs[0].parent.info.type_name == "BatchNormalizationBackward"
    for out, v in zip(outs, (xv, bv, gv)):
        np.testing.assert_allclose(out.d, v.g, rtol=1e-10, atol=1e-10)
    check_second_order(lambda dy, x, b, g: _flat(*df(dy, x, b, g, mean, var)),
                       [dy, x, beta, gamma], atol=1e-5)


@pytest.mark.parametrize("with_z", [True, False])
def test_fused_batch_normalization_backward_class(with_z):
    """nnabla's FusedBatchNormalizationBackward: the relu's mask from the y it is given,
    then batch normalization's gradients (and z's, the masked dy); its own gradient right."""
    from dpnb.backward_function.fused_batch_normalization import \
        FusedBatchNormalizationBackward
    r = np.random.RandomState(8)
    x, z, dy = r.randn(4, 2, 3), r.randn(4, 2, 3), r.randn(4, 2, 3)
    beta, gamma = r.randn(1, 2, 1), r.rand(1, 2, 1) + 0.5
    mean, var = _variables([np.zeros((1, 2, 1)), np.ones((1, 2, 1))], [False, False])
    xv, bv, gv, zv = _variables([x, beta, gamma, z])
    given_z = [zv] if with_z else []
    y = F.fused_batch_normalization(xv, bv, gv, mean, var, *given_z, decay_rate=1.0)
    y.forward()
    for v in (xv, bv, gv, zv):
        v.grad.zero()
    y.backward(dy)
    y_kept = nn.Variable.from_numpy_array(y.d.copy())
    df = FusedBatchNormalizationBackward(None, (1,), 1.0, 1e-5, True)
    df.is_add = with_z
    outs = df(_variables([dy])[0], xv, bv, gv, mean, var, y_kept, *given_z)
    F.sink(*outs).forward()
    for out, v in zip(outs, (xv, bv, gv, zv)):
        np.testing.assert_allclose(out.d, v.g, rtol=1e-10, atol=1e-10)

    def build(dy, x, b, g, *z):
        return _flat(*df(dy, x, b, g, mean, var, y_kept, *z))
    check_second_order(build, [dy, x, beta, gamma, *([z] if with_z else [])], atol=1e-5)


RECURRENT = {  # states, gate blocks of a weight, of a bias, extra keyword arguments
    "rnn_tanh": (F.rnn, 1, (), (), {}),
    "rnn_relu": (F.rnn, 1, (), (), {"nonlinearity": "relu"}),
    "lstm": (F.lstm, 2, (4,), (4,), {}),
    "gru": (F.gru, 1, (3,), (4,), {}),
}


@pytest.mark.parametrize("num_layers, bidirectional, with_bias",
                         [(2, True, True), (1, False, False)])
@pytest.mark.parametrize("name", sorted(RECURRENT))
def test_recurrent_second_derivative(name, num_layers, bidirectional, with_bias):
    """All of a layer's outputs (y, h_n and c_n) weighed, every input differentiated."""
    fn, states, gates, bias_gates, kwargs = RECURRENT[name]
    T, B, I, H, L, D = 3, 2, 2, 2, num_layers, 1 + bidirectional
    r = np.random.RandomState(5)
    arrays = [r.randn(T, B, I)] + [r.randn(L, D, B, H) for _ in range(states)]
    arrays.append(0.6 * r.randn(D, *gates, H, I + H))
    if L > 1:
        arrays.append(0.6 * r.randn(L - 1, D, *gates, H, D * H + H))
    if with_bias:
        arrays.append(0.6 * r.randn(L, D, *bias_gates, H))

    def build(*xs):
        rest = list(xs[2 + states:])
        weight = rest.pop(0) if L > 1 else None
        bias = rest.pop(0) if with_bias else None
        outputs = fn(*xs[:2 + states], weight=weight, bias=bias, num_layers=L,
                     bidirectional=bidirectional, **kwargs)
        return F.concatenate(*[F.reshape(o, (-1,)) for o in outputs], axis=0)
    check_second_order(build, arrays, atol=1e-5)


def test_recurrent_built_for_inference_has_no_gradient_of_either_order():
    x, h, w = _variables([rng.randn(2, 1, 2), rng.randn(1, 1, 1, 3), rng.randn(1, 3, 5)])
    y, _ = F.rnn(x, h, w, training=False)
    with pytest.raises(DpnbError, match="training=True"):
        nn.grad([y], [x])


# -- nn.grad's semantics --------------------------------------------------------------

def test_grad_is_a_graph_that_forward_recomputes():
    x = _variables([A])[0]
    (dx,) = nn.grad([F.sin(x)], [x])
    dx.forward()
    np.testing.assert_allclose(dx.d, np.cos(A))
    x.d = B
    dx.forward()
    np.testing.assert_allclose(dx.d, np.cos(B))


@pytest.mark.parametrize("auto", [False, True])
def test_repeated_grad_of_sin_cycles(auto):
    with nn.auto_forward(auto):
        x = _variables([A])[0]
        d = F.sin(x)
        for _ in range(4):
            (d,) = nn.grad([d], [x])
        if not auto:
            d.forward()
    np.testing.assert_allclose(d.d, np.sin(A))


def test_grad_outputs_of_every_kind():
    x = _variables([A])[0]
    y = F.tanh(x)
    dy = 1 - np.tanh(A) ** 2
    w = np.random.RandomState(3).randn(2, 3)
    for given, scale in [(None, 1.0), (3, 3.0), (-0.5, -0.5), (w, w),
                         (nn.NdArray.from_numpy_array(w), w)]:
        (g,) = nn.grad([y], [x], grad_outputs=[given])
        g.forward()
        np.testing.assert_allclose(g.d, dy * scale, rtol=1e-6)
    seed = nn.Variable.from_numpy_array(w).apply(need_grad=True)
    (g,) = nn.grad([y], [x], grad_outputs=[seed])
    total = F.sum(g)
    total.forward()
    seed.grad.zero()
    total.backward()
    np.testing.assert_allclose(seed.g, dy)  # differentiable in a variable seed
    with pytest.raises(ValueError, match="shape"):
        nn.grad([y], [x], grad_outputs=[np.ones((3, 2))])
    with pytest.raises(ValueError, match="one entry per output"):
        nn.grad([y], [x], grad_outputs=[1, 2])


def test_several_outputs_and_shared_inputs_add_up():
    x0, x1 = _variables([A, B])
    y0, y1 = x0 * x0 * x0, F.sin(x0) * x1
    g0, g1 = nn.grad([y0, y1], [x0, x1])
    F.sink(g0, g1).forward()
    np.testing.assert_allclose(g0.d, 3 * A ** 2 + np.cos(A) * B)
    np.testing.assert_allclose(g1.d, np.sin(A))


def test_inputs_not_reached_or_without_need_grad_get_zeros():
    x, z, frozen = _variables([A, B, ROW], [True, True, False])
    y = F.sin(x) * frozen
    gx, gz, gf = nn.grad([y], [x, z, frozen])
    F.sink(gx, gz, gf).forward()
    np.testing.assert_allclose(gz.d, 0)
    np.testing.assert_allclose(gf.d, 0)
    assert gf.shape == frozen.shape
    np.testing.assert_allclose(gx.d, np.cos(A) * ROW)


def test_gradient_stops_where_need_grad_is_cut():
    x = _variables([A])[0]
    h = F.sin(x)
    cut = F.identity(h)
    cut.need_grad = False
    y = cut * h
    (g,) = nn.grad([y], [x])
    g.forward()
    np.testing.assert_allclose(g.d, np.sin(A) * np.cos(A))


def test_backward_skips_the_functions_no_gradient_reaches():
    """A gradient graph reads the network's forward only through non-differentiable
    functions (the seed of ones): the backward of a loss on the gradient runs none of the
    forward's functions (a gradient penalty's critic), and gives the right gradient."""
    x = _variables([A])[0]
    (g,) = nn.grad([F.sin(x)], [x])
    loss = F.sum(g)
    loss.forward()
    ran = []
    x.grad.zero()
    loss.backward(function_pre_hook=lambda f: ran.append(f.info.type_name))
    assert "Sin" not in ran and ran
    np.testing.assert_allclose(x.g, -np.sin(A), rtol=1e-12)


def test_a_branch_only_non_differentiable_functions_read_passes_no_nan_back():
    """clip_grad_by_norm read only by a comparison gets no gradient; its backward, run on
    zeros, would divide 0 by a norm of 0."""
    x = nn.Variable.from_numpy_array(np.array([1.0, -2.0, 3.0]), need_grad=True)
    loss = F.sum(x * 2.0) + F.sum(F.greater_scalar(F.clip_grad_by_norm(x, 1.0), 0.0))
    loss.forward()
    x.grad.zero()
    loss.backward()
    np.testing.assert_array_equal(x.g, [2.0, 2.0, 2.0])


def test_grad_wrt_an_intermediate_differentiates_below_it_only():
    x = _variables([A])[0]
    h = F.exp(x)
    y = F.sin(h)
    (g,) = nn.grad([y], [h])
    g.forward()
    np.testing.assert_allclose(g.d, np.cos(np.exp(A)))


def test_outputs_become_persistent_as_asked():
    x = _variables([A])[0]
    y0, y1 = F.sin(x), F.cos(x)
    nn.grad([y0, y1], [x])
    assert y0.persistent and y1.persistent
    y2 = F.exp(x)
    nn.grad([y2], [x], persistent_outputs=[False])
    assert not y2.persistent
    with pytest.raises(ValueError, match="persistent_outputs"):
        nn.grad([y0, y1], [x], persistent_outputs=[True])


def test_bind_grad_output_fills_the_inputs_grad_and_stays_differentiable():
    x, a = _variables([A, B])
    w = rng.randn(*A.shape)
    (g,) = nn.grad([F.sin(x * a)], [x], grad_outputs=[w], bind_grad_output=True)
    x.g = 0
    g.forward()
    np.testing.assert_allclose(x.g, np.cos(A * B) * B * w, rtol=1e-12)
    assert np.shares_memory(g.d, x.g)
    s = F.sum(g)  # d/da sum(cos(xa) a w) = (cos(xa) - sin(xa) x a) w
    s.forward()
    a.grad.zero()
    s.backward()
    np.testing.assert_allclose(a.g, (np.cos(A * B) - np.sin(A * B) * A * B) * w, rtol=1e-12)


def test_bind_grad_output_lets_a_solver_train_from_the_gradient_graph():
    """The use nnabla names: parameters' grads filled by forwarding the gradient graph,
    then updated by a solver, as loss.backward() would have; the grads are views into
    the flat storage the solver updates from."""
    import dpnb.parametric_functions as PF
    import dpnb.solvers as S
    x = nn.Variable.from_numpy_array(rng.randn(4, 3))
    results = []
    for bind in (False, True):
        nn.clear_parameters()
        with nn.parameter_scope("bound"):
            loss = F.sum(F.tanh(PF.affine(x, 2)) ** 2)
        params = nn.get_parameters()
        for p in params.values():
            p.d = np.random.RandomState(3).randn(*p.shape)
        solver = S.Sgd(lr=0.5)
        solver.set_parameters(params)
        solver.zero_grad()
        if bind:
            grads = nn.grad([loss], list(params.values()), bind_grad_output=True)
            F.sink(*grads).forward()
        else:
            loss.forward()
            loss.backward()
        solver.update()
        results.append({k: p.d.copy() for k, p in params.items()})
    nn.clear_parameters()
    for name in results[0]:
        np.testing.assert_allclose(results[1][name], results[0][name], rtol=1e-12)


def test_dropout_second_order_uses_the_forwards_mask():
    """y = dropout(x)^2: dy/dx = 2 m^2 x / (1-p)^2 with the mask m of the forward, and
    d/dx <v, dy/dx> = 2 m v / (1-p)^2; the mask nnabla's _get_dropout_mask reads."""
    from dpnb._dropout_workaround import _get_dropout_mask
    p = 0.4
    x = _variables([rng.randn(3, 5)])[0]
    y = F.dropout(x, p, seed=11) ** 2
    (g,) = nn.grad([y], [x])
    v = rng.randn(3, 5)
    s = F.sum(g * nn.Variable.from_numpy_array(v))
    s.forward()
    m = _get_dropout_mask(x).d.copy()
    assert set(np.unique(m)) == {0.0, 1.0}
    np.testing.assert_allclose(g.d, 2 * m * x.d / (1 - p) ** 2, rtol=1e-12)
    x.grad.zero()
    s.backward()
    np.testing.assert_allclose(x.g, 2 * m * v / (1 - p) ** 2, rtol=1e-12)
    s.forward()  # a new draw: the gradient graph reads it
    m2 = _get_dropout_mask(x).d
    assert not np.array_equal(m, m2)
    np.testing.assert_allclose(g.d, 2 * m2 * x.d / (1 - p) ** 2, rtol=1e-12)


@pytest.mark.parametrize("remap", [
    lambda x: F.random_crop(x, (2, 3, 3), seed=3),
    lambda x: F.random_flip(x, (2, 3), seed=3),
    lambda x: F.random_shift(x, (0, 0, 1, 2), border_mode="constant", constant_value=0,
                             seed=3),
    lambda x: F.random_erase(x, prob=0.9, replacements=(-5.0, -5.0), seed=3),
], ids=["random_crop", "random_flip", "random_shift", "random_erase"])
def test_random_remaps_second_order_uses_each_forwards_draw(remap):
    """f = sum(w * R(x)^2), R the remap a forward drew: nn.grad's gradient R^T(2 w R x)
    and the derivative of <v, it>, R^T(2 w R v), against NumPy with R read off the forward
    (the inputs are 1..n, distinct; a border reads 0, an erased pixel -5), at two forwards
    that draw differently."""
    x0 = np.arange(1.0, 2 * 2 * 5 * 5 + 1).reshape(2, 2, 5, 5)
    x = _variables([x0])[0]
    y = remap(x)
    w = nn.Variable.from_numpy_array(np.random.RandomState(4).randn(*y.shape))
    (g,) = nn.grad([F.sum(w * y ** 2)], [x])
    v = np.random.RandomState(5).randn(*x0.shape)
    s = F.sum(g * nn.Variable.from_numpy_array(v))
    draws = []
    for _ in range(2):
        s.forward()
        source = np.where(y.d >= 1, y.d, 0).astype(int).ravel() - 1  # -1: read no input

        def adjoint(out):  # R^T: each output's value back onto the input it read
            back = np.zeros(x0.size)
            np.add.at(back, source[source >= 0], out.ravel()[source >= 0])
            return back.reshape(x0.shape)

        read_v = np.where(source >= 0, v.ravel()[source], 0).reshape(y.shape)
        np.testing.assert_allclose(g.d, adjoint(2 * w.d * y.d * (y.d >= 1)), rtol=1e-12)
        x.grad.zero()
        s.backward()
        np.testing.assert_allclose(x.g, adjoint(2 * w.d * read_v), rtol=1e-12)
        draws.append(source)
    assert not np.array_equal(*draws)


def test_mean_subtraction_gradient_graph_scales_by_the_count_of_each_forward():
    """Its gradient is nnabla's approximate one, gy (1 - 1 / (t n)), with t the batch count
    the forward before it left: the graph reads t when it runs, at every forward."""
    x = _variables([rng.randn(4, 3)])[0]
    mean, t = nn.Variable.from_numpy_array(np.zeros(3)), nn.Variable.from_numpy_array(np.zeros(1))
    y = F.mean_subtraction(x, mean, t)
    gy = rng.randn(4, 3)
    (g,) = nn.grad([y], [x], grad_outputs=[gy])
    for count in (1, 2):
        g.forward()
        assert t.d[0] == count
        np.testing.assert_allclose(g.d, gy * (1 - 1 / (count * 4)), rtol=1e-12)
    # an output gradient given as a variable: the gradient graph still runs after forward
    w = nn.Variable.from_numpy_array(gy)
    (g,) = nn.grad([y], [x], grad_outputs=[w])
    for count in (3, 4):
        g.forward()
        np.testing.assert_allclose(g.d, gy * (1 - 1 / (count * 4)), rtol=1e-12)


def test_vat_noise_says_its_gradient_is_no_derivative():
    x, w = _variables([A, B])
    with pytest.raises(NoGraphGradient, match="vat_noise has no second-order gradient in dpnb: "
                                              "its backward is a device"):
        nn.grad([F.vat_noise(x, w)], [x])


def test_dropout_mask_needs_a_dropout_on_the_variable():
    from dpnb._dropout_workaround import _get_dropout_mask
    x = _variables([A])[0]
    with pytest.raises(DpnbError, match="no F.dropout takes this variable"):
        _get_dropout_mask(x)
    with pytest.raises(RuntimeError, match="draws random numbers"):
        registry["Dropout"]([x], [x], [None], [None], [None], 0.5, -1)


def test_first_order_backward_is_untouched_by_grad():
    x = _variables([A])[0]
    y = F.sum(F.sin(x) ** 2)
    nn.grad([y], [x])
    y.forward()
    x.grad.zero()
    y.backward()
    np.testing.assert_allclose(x.g, 2 * np.sin(A) * np.cos(A))


class _WritesIntoItsGradient(Function):
    """Twice its input; its backward writes into an array, which a graph cannot."""

    no_nnabla_spec = "a test's function"

    def output_specs(self, inputs):
        return [(inputs[0].shape, inputs[0].dtype)]

    def forward_arrays(self, xp, xs):
        return (xs[0] * 2,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        g = xp.zeros_like(gys[0])
        g[...] = gys[0] * 2
        return (g,)


def test_a_function_without_graph_backward_says_so_by_name():
    x = _variables([A])[0]
    y = _WritesIntoItsGradient()(x) ** 2
    with pytest.raises(NoGraphGradient, match=r"F\._WritesIntoItsGradient has no second-order "
                                              r"gradient in dpnb yet: its backward writes"):
        nn.grad([y], [x])


def test_walk_stops_at_the_given_variables():
    x = _variables([A])[0]
    h = F.exp(x)
    y = F.sin(h)
    assert [fn.name for fn in functions_in_order([y], {h})] == ["Sin"]
    assert [fn.name for fn in functions_in_order([y])] == ["Exp", "Sin"]


# -- the registry of backward functions ---------------------------------------------------

def test_registry_backward_function_of_a_graph_function():
    x, w = _variables([A, rng.randn(3, 4)])
    y = F.affine(x, w)
    gy = nn.Variable.from_numpy_array(np.ones((2, 4)))
    backward = registry["Affine"]
    gx, gw = backward([gy], [x, w], [x.shape, w.shape], [y], [y.shape],
                      **y.parent.info.args)
    F.sink(gx, gw).forward()
    np.testing.assert_allclose(gx.d, np.ones((2, 4)) @ w.d.T)
    np.testing.assert_allclose(gw.d, A.T @ np.ones((2, 4)))
    assert "Sin" in registry and "NoSuchFunction" not in registry


def test_registry_builds_the_function_where_outputs_come_from_elsewhere():
    x = _variables([A])[0]
    gy = nn.Variable.from_numpy_array(np.full((2, 3), 2.0))
    gx = registry["Sin"]([gy], [x], [x.shape], None, None)  # one input: a variable, as nnabla
    gx.forward()
    np.testing.assert_allclose(gx.d, 2 * np.cos(A))


def test_registered_backward_takes_precedence_in_grad():
    calls = []

    def doubled(grad_outputs, inputs, input_shapes, outputs, output_shapes):
        calls.append(len(inputs))
        return [grad_outputs[0] * 2.0]
    register("Sin", doubled)
    try:
        x = _variables([A])[0]
        (g,) = nn.grad([F.sin(x)], [x])
        g.forward()
        np.testing.assert_allclose(g.d, 2.0)
        assert calls == [1]
    finally:
        from dpnb.backward_functions import _registered
        del _registered["Sin"]


# -- a WGAN-GP critic step, against NumPy ----------------------------------------------------

def _critic_numpy(x, w1, b1, w2, b2):
    h = np.tanh(x @ w1 + b1)
    return h @ w2 + b2, h


def _wgan_gp_loss_numpy(real, fake, alpha, params, lam):
    w1, b1, w2, b2 = params
    d_real, _ = _critic_numpy(real, *params)
    d_fake, _ = _critic_numpy(fake, *params)
    x_hat = alpha * real + (1 - alpha) * fake
    _, h = _critic_numpy(x_hat, *params)
    grad_x = ((1 - h ** 2) * w2[:, 0]) @ w1.T  # d D(x_hat) / d x_hat, per sample
    norm = np.sqrt((grad_x ** 2).sum(axis=1))
    return d_fake.mean() - d_real.mean() + lam * ((norm - 1) ** 2).mean()


def test_wgan_gp_step_against_numpy():
    r = np.random.RandomState(7)
    real, fake, alpha = r.randn(5, 3), r.randn(5, 3), r.rand(5, 1)
    params_np = [r.randn(3, 4), r.randn(4), r.randn(4, 1), r.randn(1)]
    lam = 10.0
    params = [nn.Variable.from_numpy_array(p).apply(need_grad=True) for p in params_np]

    def critic(x):
        return F.affine(F.tanh(F.affine(x, params[0], params[1])), params[2], params[3])

    vr, vf = (nn.Variable.from_numpy_array(a) for a in (real, fake))
    x_hat = nn.Variable.from_numpy_array(alpha * real + (1 - alpha) * fake).apply(need_grad=True)
    (gx,) = nn.grad([critic(x_hat)], [x_hat])
    norm = F.sum(gx ** 2, axis=1) ** 0.5
    loss = F.mean(critic(vf)) - F.mean(critic(vr)) + lam * F.mean((norm - 1) ** 2)
    loss.forward()
    np.testing.assert_allclose(float(loss.d), _wgan_gp_loss_numpy(real, fake, alpha, params_np,
                                                                   lam), rtol=1e-10)
    for p in params:
        p.grad.zero()
    loss.backward()
    eps = 1e-6
    for p, p_np in zip(params, params_np):
        numeric = np.zeros_like(p_np)
        for i in np.ndindex(*p_np.shape):
            kept = p_np[i]
            p_np[i] = kept + eps
            above = _wgan_gp_loss_numpy(real, fake, alpha, params_np, lam)
            p_np[i] = kept - eps
            below = _wgan_gp_loss_numpy(real, fake, alpha, params_np, lam)
            p_np[i] = kept
            numeric[i] = (above - below) / (2 * eps)
        np.testing.assert_allclose(p.g, numeric, rtol=1e-5, atol=1e-6)


def test_maml_step_against_numpy():
    """One inner gradient step inside the outer loss: the outer gradient goes through the
    inner gradient (second order), against central differences of a NumPy reference."""
    r = np.random.RandomState(11)
    xa, ya, xb, yb = r.randn(6, 3), r.randn(6, 1), r.randn(5, 3), r.randn(5, 1)
    w0, lr = r.randn(3, 1), 0.1

    def outer_numpy(w):
        inner_grad = 2 * xa.T @ (xa @ w - ya) / len(xa)
        adapted = w - lr * inner_grad
        return np.mean((xb @ adapted - yb) ** 2)

    w = nn.Variable.from_numpy_array(w0).apply(need_grad=True)
    va, ta, vb, tb = (nn.Variable.from_numpy_array(a) for a in (xa, ya, xb, yb))
    inner = F.mean(F.squared_error(F.affine(va, w), ta))
    (g,) = nn.grad([inner], [w])
    outer = F.mean(F.squared_error(F.affine(vb, w - lr * g), tb))
    outer.forward()
    np.testing.assert_allclose(float(outer.d), outer_numpy(w0), rtol=1e-12)
    w.grad.zero()
    outer.backward()
    eps = 1e-6
    numeric = np.zeros_like(w0)
    for i in np.ndindex(*w0.shape):
        step = np.zeros_like(w0)
        step[i] = eps
        numeric[i] = (outer_numpy(w0 + step) - outer_numpy(w0 - step)) / (2 * eps)
    np.testing.assert_allclose(w.g, numeric, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("n", [2, 3])
def test_gradient_penalty_step_data_parallel(n):
    """nn.grad inside a data-parallel step: every exchange of the parameters' gradients
    (all_reduce, the gradient reducer after backward and as callback) gives the whole
    batch's gradient (tests/mpi_scripts/gradient_penalty.py)."""
    check_ranks(n, Path(__file__).parent / "mpi_scripts" / "gradient_penalty.py", timeout=120)
