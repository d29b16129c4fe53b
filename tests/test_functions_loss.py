"""F.softmax_cross_entropy, sigmoid_cross_entropy, squared_error and top_n_error."""
import itertools

import numpy as np
import pytest
from gradcheck import check_grad

import dpnb as nn
import dpnb.functions as F
from dpnb import DpnbError
from dpnb.ext_utils import get_extension_context


def _labels(rng, x_shape, axis, dtype=np.int64):
    """Random class labels for scores of ``x_shape``: that shape with 1 on ``axis``."""
    shape = list(x_shape)
    shape[axis] = 1
    return rng.randint(0, x_shape[axis], shape).astype(dtype)


def _per_sample(x, t, axis):
    """Yield (index into t, scores along axis, label) for every sample, by explicit loops."""
    for index in itertools.product(*[range(s) for s in t.shape]):
        row = [slice(None) if a == axis else i for a, i in enumerate(index)]
        yield index, x[tuple(row)], int(t[index])


def _ref_softmax_cross_entropy(x, t, axis):
    out = np.zeros(t.shape)
    for index, scores, label in _per_sample(x, t, axis):
        p = np.exp(scores) / np.exp(scores).sum()
        out[index] = -np.log(p[label])
    return out


def _ref_top_n_error(x, t, axis, n):
    out = np.zeros(t.shape)
    for index, scores, label in _per_sample(x, t, axis):
        out[index] = float(np.count_nonzero(scores >= scores[label]) > n)
    return out


def test_tutorial_loss_with_float_labels(rng):
    """The seed's network ends in F.mean(F.softmax_cross_entropy(pred, y)) with
    pred of shape (4, 2) and float32 labels of shape (4, 1)."""
    pred_data = rng.randn(4, 2).astype(np.float32)
    y_data = np.array([[0], [1], [1], [0]])
    pred = nn.Variable.from_numpy_array(pred_data, need_grad=True)
    y = nn.Variable(y_data.shape)
    y.d = y_data
    assert y.dtype == np.float32
    loss = F.mean(F.softmax_cross_entropy(pred, y))
    assert loss.shape == ()
    loss.forward()
    pred.g = 0
    loss.backward()
    p = np.exp(pred_data) / np.exp(pred_data).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(loss.d, _ref_softmax_cross_entropy(pred_data, y_data, 1).mean(), rtol=1e-6)
    np.testing.assert_allclose(pred.g, (p - np.eye(2)[y_data[:, 0]]) / 4, rtol=1e-5, atol=1e-7)
    assert pred.g.dtype == np.float32


@pytest.mark.parametrize("axis", [None, 0, 1, 2, -2])
@pytest.mark.parametrize("label_dtype", [np.int64, np.int32, np.float32])
def test_softmax_cross_entropy(axis, label_dtype, rng):
    x = rng.randn(2, 3, 4)
    ax = 2 if axis is None else axis % 3
    t = _labels(rng, x.shape, ax, label_dtype)
    build = (lambda a, b: F.softmax_cross_entropy(a, b)) if axis is None else (
        lambda a, b: F.softmax_cross_entropy(a, b, axis=axis))
    y = check_grad(build, [x, t], need_grad=[True, False])
    assert y.shape == t.shape
    np.testing.assert_allclose(y.d, _ref_softmax_cross_entropy(x, t, ax), rtol=1e-12)


def test_softmax_cross_entropy_gives_no_gradient_to_the_target(rng):
    x = nn.Variable.from_numpy_array(rng.randn(3, 2), need_grad=True)
    t = nn.Variable.from_numpy_array(np.array([[1.0], [0.0], [1.0]]), need_grad=True)
    loss = F.sum(F.softmax_cross_entropy(x, t))
    loss.forward()
    loss.backward()
    assert np.all(t.g == 0)
    assert np.abs(x.g).sum() > 0


def test_softmax_cross_entropy_is_stable_for_large_scores():
    x = nn.Variable.from_numpy_array(np.array([[1000.0, 0.0], [-1000.0, 0.0]]), need_grad=True)
    t = nn.Variable.from_numpy_array(np.array([[1], [0]]))
    y = F.softmax_cross_entropy(x, t)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        y.forward()
        y.backward(np.ones((2, 1)))
    np.testing.assert_allclose(y.d, [[1000.0], [1000.0]])
    np.testing.assert_allclose(x.g, [[1.0, -1.0], [-1.0, 1.0]])


@pytest.mark.parametrize("labels, shown", [([0.0, 2.0, 1.0], "2.0"), ([0.0, 1.0, -1.0], "-1.0"),
                                           ([0.5, 1.0, 1.0], "0.5"), ([0, 1, 7], "7")])
def test_labels_out_of_range_fail_at_forward(labels, shown):
    x = nn.Variable((3, 2))
    t = nn.Variable.from_numpy_array(np.array(labels).reshape(3, 1))
    y = F.top_n_error(x, t)
    with pytest.raises(DpnbError, match=rf"target holds {shown}, but labels must be integers in "
                                        r"\[0, 2\) for 2 classes on axis 1"):
        y.forward()


@pytest.mark.parametrize("labels, shown", [([0.0, 2.0, 1.0], "2.0"), ([0.5, 1.0, 1.0], "0.5"),
                                           ([0, 1, 7], "7")])
@pytest.mark.parametrize("fn", [F.softmax_cross_entropy, F.categorical_cross_entropy])
def test_cross_entropy_labels_that_are_no_class_fail_at_forward(fn, labels, shown):
    """nnabla 1.39 reads past the row for a label too large; dpnb says what is wrong."""
    x = nn.Variable((3, 2))
    t = nn.Variable.from_numpy_array(np.array(labels).reshape(3, 1))
    y = fn(x, t)
    with pytest.raises(DpnbError, match=rf"target holds {shown}, but labels must be integers in "
                                        r"\[0, 2\) \(or negative, to leave a sample out\) for 2 "
                                        r"classes on axis 1"):
        y.forward()


@pytest.mark.parametrize("fn, probabilities", [(F.softmax_cross_entropy, False),
                                               (F.categorical_cross_entropy, True)])
def test_cross_entropy_leaves_out_samples_with_negative_labels(fn, probabilities, rng):
    """As nnabla 1.39: a negative label gives loss 0 and no gradient; the other samples'
    values and gradients (by central differences, float64) are unchanged."""
    scores = rng.uniform(0.1, 1.0, (4, 3))
    if probabilities:
        scores /= scores.sum(axis=1, keepdims=True)
    labels = np.array([[2], [-1], [0], [-7]])
    y = check_grad(lambda v: fn(v, nn.Variable.from_numpy_array(labels)), [scores])
    kept = np.where(labels >= 0, labels, 0)
    p = scores if probabilities else np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
    expected = np.where(labels >= 0, -np.log(np.take_along_axis(p, kept, axis=1)), 0)
    np.testing.assert_allclose(y.d, expected, rtol=1e-12)
    x = y.parent.inputs[0]
    x.g = 0
    y.backward(np.ones((4, 1)))
    assert not x.g[[1, 3]].any() and x.g[[0, 2]].any(axis=1).all()


@pytest.mark.parametrize("fn", [F.softmax_cross_entropy, F.top_n_error])
def test_labelled_functions_check_the_target_shape(fn):
    with pytest.raises(DpnbError, match=r"target must have shape \(4, 1\) \(x's shape \(4, 3\) with 1 "
                                        r"on axis 1\), got \(4,\); reshape the labels"):
        fn(nn.Variable((4, 3)), nn.Variable((4,)))
    with pytest.raises(DpnbError, match=r"target must have shape \(1, 3\)"):
        fn(nn.Variable((4, 3)), nn.Variable((4, 1)), axis=0)
    with pytest.raises(DpnbError, match=r"axis must be an int in \[-2, 2\)"):
        fn(nn.Variable((4, 3)), nn.Variable((4, 1)), axis=3)


def test_labelled_functions_reject_a_non_numeric_target():
    t = nn.Variable.from_numpy_array(np.array([[True], [False]]))
    with pytest.raises(DpnbError, match="target must hold class numbers"):
        F.softmax_cross_entropy(nn.Variable((2, 2)), t)


@pytest.mark.parametrize("target", ["binary", "probability"])
def test_sigmoid_cross_entropy(target, rng):
    x = rng.randn(3, 4)
    t = rng.randint(0, 2, x.shape).astype(np.float64) if target == "binary" else rng.rand(3, 4)
    y = check_grad(F.sigmoid_cross_entropy, [x, t], need_grad=[True, False])
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(y.d, -(t * np.log(s) + (1 - t) * np.log(1 - s)), rtol=1e-12)


def test_sigmoid_cross_entropy_is_stable_and_keeps_float32():
    x = nn.Variable.from_numpy_array(np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0], np.float32),
                                     need_grad=True)
    t = nn.Variable.from_numpy_array(np.array([1.0, 0.0, 1.0, 1.0, 0.0], np.float32))
    y = F.sigmoid_cross_entropy(x, t)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        y.forward()
        y.backward(np.ones(5))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.d, [1000.0, 0.0, np.log(2), 0.0, 1000.0], atol=1e-6)
    np.testing.assert_allclose(x.g, [-1.0, 0.0, -0.5, 0.0, 1.0], atol=1e-6)


def test_sigmoid_cross_entropy_checks_shapes():
    with pytest.raises(DpnbError, match=r"SigmoidCrossEntropy: target must have x's shape \(2, 3\), "
                                        r"got \(2, 1\)"):
        F.sigmoid_cross_entropy(nn.Variable((2, 3)), nn.Variable((2, 1)))


@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (3,))])
def test_squared_error(shapes, rng):
    a, b = rng.randn(*shapes[0]), rng.randn(*shapes[1])
    y = check_grad(F.squared_error, [a, b])
    np.testing.assert_allclose(y.d, (a - b) ** 2, rtol=1e-12)


def test_squared_error_checks_shapes():
    with pytest.raises(DpnbError, match=r"SquaredError: shapes \(2, 3\) and \(2,\) do not broadcast"):
        F.squared_error(nn.Variable((2, 3)), nn.Variable((2,)))


@pytest.mark.parametrize("axis", [None, 0, 1, 2])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_top_n_error(axis, n, rng):
    x = rng.randn(3, 4, 5)
    ax = 2 if axis is None else axis
    t = _labels(rng, x.shape, ax)
    xv, tv = nn.Variable.from_numpy_array(x), nn.Variable.from_numpy_array(t)
    y = F.top_n_error(xv, tv, n=n) if axis is None else F.top_n_error(xv, tv, axis=axis, n=n)
    y.forward()
    assert y.shape == t.shape and y.dtype == x.dtype
    np.testing.assert_array_equal(y.d, _ref_top_n_error(x, t, ax, n))


def test_top_n_error_counts_ties_against_the_target():
    x = nn.Variable.from_numpy_array(np.array([[1.0, 2.0, 2.0], [3.0, 2.0, 1.0], [1.0, 1.0, 1.0]]))
    t = nn.Variable.from_numpy_array(np.array([[1], [1], [0]]))
    top1, top2 = F.top_n_error(x, t), F.top_n_error(x, t, n=2)
    top1.forward()
    top2.forward()
    np.testing.assert_array_equal(top1.d, [[1], [1], [1]])
    np.testing.assert_array_equal(top2.d, [[0], [0], [1]])


def test_top_n_error_is_not_differentiable(rng):
    x = nn.Variable.from_numpy_array(rng.randn(3, 2), need_grad=True)
    t = nn.Variable.from_numpy_array(np.array([[0], [1], [1]]))
    err = F.top_n_error(x, t)
    assert not err.need_grad
    loss = F.mean(err)
    loss.forward()
    loss.backward()
    assert np.all(x.g == 0)


@pytest.mark.parametrize("n", [0, 1.5])
def test_top_n_error_rejects_a_bad_n(n):
    with pytest.raises(DpnbError, match=rf"TopNError: n must be a positive int, got {n!r}"):
        F.top_n_error(nn.Variable((2, 3)), nn.Variable((2, 1)), n=n)


def _run(build, arrays, need_grad, w):
    """Forward and backward of ``build`` in the current context, as NumPy arrays."""
    xs = [nn.Variable.from_numpy_array(a, need_grad=n) for a, n in zip(arrays, need_grad)]
    y = build(*xs)
    y.forward()
    arrays = [y.d]
    if y.need_grad:
        y.backward(w)
        arrays += [x.g for x in xs if x.need_grad]
    return [np.asarray(v.get() if hasattr(v, "get") else v) for v in arrays]


@pytest.mark.parametrize("name", ["softmax_cross_entropy", "sigmoid_cross_entropy", "squared_error",
                                  "top_n_error"])
def test_gpu_matches_cpu(name, rng, gpu):
    x = rng.randn(3, 4, 2)
    labels = _labels(rng, x.shape, 1).astype(np.float32)
    build, other, need_grad = {
        "softmax_cross_entropy": (lambda a, b: F.softmax_cross_entropy(a, b, axis=1), labels, [True, False]),
        "sigmoid_cross_entropy": (F.sigmoid_cross_entropy, rng.rand(*x.shape), [True, False]),
        "squared_error": (F.squared_error, rng.randn(4, 2), [True, True]),
        "top_n_error": (lambda a, b: F.top_n_error(a, b, axis=1, n=2), labels, [True, False]),
    }[name]
    probe = build(nn.Variable(x.shape), nn.Variable(other.shape))
    w = rng.randn(*probe.shape)
    cpu = _run(build, [x, other], need_grad, w)
    with nn.context_scope(get_extension_context("cudnn")):
        gpu = _run(build, [x, other], need_grad, w)
    assert len(gpu) == len(cpu)
    for g, c in zip(gpu, cpu):
        np.testing.assert_allclose(g, c, rtol=1e-10, atol=1e-12)


def _probabilities(rng, *shape, axis=-1):
    p = rng.uniform(0.2, 1.0, shape)
    return p / p.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("base_axis, axes", [(0, (0, 1, 2)), (1, (1, 2)), (2, (2,)), (-1, (2,))])
def test_kl_multinomial_sums_from_base_axis(base_axis, axes, rng):
    p, q = _probabilities(rng, 2, 3, 2), _probabilities(rng, 2, 3, 2)
    y = check_grad(lambda a, b: F.kl_multinomial(a, b, base_axis=base_axis), [p, q],
                   atol=1e-6, rtol=1e-5)
    lead = p.shape[:base_axis % 3]
    np.testing.assert_allclose(y.d, (p * np.log(p / q)).sum(axis=axes).reshape(lead + (1,)), rtol=1e-7)


def test_kl_multinomial_of_a_zero_probability_is_finite():
    p = nn.Variable.from_numpy_array(np.array([[0.0, 1.0]]))
    q = nn.Variable.from_numpy_array(np.array([[0.5, 0.5]]))
    y = F.kl_multinomial(p, q)
    y.forward()
    np.testing.assert_allclose(y.d, [[np.log(2)]], rtol=1e-7)


def test_binary_cross_entropy_values_and_clamping():
    x = nn.Variable.from_numpy_array(np.array([0.0, 1.0, 0.25, 1e-9], np.float32), need_grad=True)
    t = nn.Variable.from_numpy_array(np.array([0.0, 1.0, 0.5, 1.0], np.float32), need_grad=True)
    y = F.binary_cross_entropy(x, t)
    with np.errstate(divide="raise", invalid="raise"):
        y.forward()
        y.backward(np.ones(4))
    floor = -np.log(np.finfo(np.float32).tiny)  # 87.34, nnabla's values at 0 and 1
    np.testing.assert_allclose(y.d, [0, 0, -(0.5 * np.log(0.25) + 0.5 * np.log(0.75)), -np.log(1e-9)],
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(x.g, [0, 0, (0.25 - 0.5) / (0.25 * 0.75), -1e9], rtol=1e-5)
    np.testing.assert_allclose(t.g, [floor, -floor, np.log(0.75 / 0.25), -np.log(1e-9)], rtol=1e-5)


def test_categorical_cross_entropy_reference(rng):
    x = _probabilities(rng, 3, 4, 2, axis=1)
    t = _labels(rng, x.shape, 1)
    y = check_grad(lambda a, b: F.categorical_cross_entropy(a, b, axis=1), [x, t],
                   need_grad=[True, False])
    np.testing.assert_allclose(y.d, -np.log(np.take_along_axis(x, t, axis=1)), rtol=1e-12)


def test_categorical_cross_entropy_of_probability_zero_is_finite():
    x = nn.Variable.from_numpy_array(np.array([[0.0, 1.0]], np.float32), need_grad=True)
    y = F.categorical_cross_entropy(x, nn.Variable.from_numpy_array(np.array([[0]])))
    y.forward()
    y.backward(np.ones((1, 1)))
    np.testing.assert_allclose(y.d, [[-np.log(np.finfo(np.float32).tiny)]], rtol=1e-6)
    assert np.isfinite(x.g).all()


@pytest.mark.parametrize("delta", [1.0, 0.5, 2.0])
def test_huber_loss_reference(delta, rng):
    a = rng.uniform(-3, 3, (4, 5))
    b = a - rng.choice([-1, 1], a.shape) * rng.choice([0.3 * delta, 1.7 * delta, 2.5 * delta], a.shape)
    y = check_grad(lambda u, v: F.huber_loss(u, v, delta=delta), [a, b])
    d = np.abs(a - b)
    np.testing.assert_allclose(y.d, np.where(d < delta, d ** 2, delta * (2 * d - delta)), rtol=1e-12)


@pytest.mark.parametrize("epsilon", [0.0, 0.4])
def test_absolute_and_epsilon_insensitive_reference(epsilon, rng):
    a = rng.uniform(-2, 2, (4, 5))
    b = a - rng.choice([-1, 1], a.shape) * rng.choice([0.2, 0.6, 1.5], a.shape)
    y = check_grad(lambda u, v: F.epsilon_insensitive_loss(u, v, epsilon), [a, b])
    np.testing.assert_allclose(y.d, np.maximum(np.abs(a - b) - epsilon, 0), rtol=1e-12)
    z = check_grad(F.absolute_error, [a, b[:1]])
    np.testing.assert_allclose(z.d, np.abs(a - b[:1]), rtol=1e-12)


def test_binary_error_thresholds_at_one_half_and_has_no_gradient():
    x = nn.Variable.from_numpy_array(np.array([0.5, 0.49, 0.51, 0.2, 0.9]), need_grad=True)
    t = nn.Variable.from_numpy_array(np.array([0.5, 0.5, 0.49, 0.7, 1.0]))
    y = F.binary_error(x, t)
    assert not y.need_grad
    y.forward()
    np.testing.assert_array_equal(y.d, [0, 1, 1, 1, 0])


@pytest.mark.parametrize("fn, name, first, second", [
    (F.binary_cross_entropy, "BinaryCrossEntropy", "x", "target"),
    (F.binary_error, "BinaryError", "x", "target"),
    (F.kl_multinomial, "KLMultinomial", "p", "q")])
def test_same_shape_losses_check_shapes(fn, name, first, second):
    with pytest.raises(DpnbError, match=rf"{name}: {second} must have {first}'s shape \(2, 3\), "
                                        r"got \(1, 3\)"):
        fn(nn.Variable((2, 3)), nn.Variable((1, 3)))


def test_loss_options_are_checked():
    a, b = nn.Variable((2, 3)), nn.Variable((2, 3))
    with pytest.raises(DpnbError, match=r"HuberLoss: delta must be > 0, got -1.0"):
        F.huber_loss(a, b, delta=-1)
    with pytest.raises(DpnbError, match=r"EpsilonInsensitiveLoss: epsilon must be >= 0, got -0.1"):
        F.epsilon_insensitive_loss(a, b, -0.1)
    with pytest.raises(DpnbError, match=r"KLMultinomial: base_axis must lie in \[-2, 2\)"):
        F.kl_multinomial(a, b, base_axis=2)
    with pytest.raises(DpnbError, match=r"CategoricalCrossEntropy: target must have shape \(2, 1\)"):
        F.categorical_cross_entropy(a, nn.Variable((2,)))
    with pytest.raises(DpnbError, match=r"AbsoluteError: shapes \(2, 3\) and \(2,\) do not broadcast"):
        F.absolute_error(a, nn.Variable((2,)))


@pytest.mark.parametrize("name", ["binary_cross_entropy", "categorical_cross_entropy", "huber_loss",
                                  "absolute_error", "epsilon_insensitive_loss", "kl_multinomial",
                                  "binary_error"])
def test_gpu_matches_cpu_for_probability_losses(name, rng, gpu):
    p, q = _probabilities(rng, 3, 4, 2, axis=1), _probabilities(rng, 3, 4, 2, axis=1)
    a, b = rng.randn(3, 4, 2), rng.randn(4, 2)
    labels = _labels(rng, p.shape, 1).astype(np.float32)
    build, arrays, need_grad = {
        "binary_cross_entropy": (F.binary_cross_entropy, [p, q], [True, True]),
        "categorical_cross_entropy": (lambda x, t: F.categorical_cross_entropy(x, t, axis=1),
                                      [p, labels], [True, False]),
        "huber_loss": (lambda x, y: F.huber_loss(x, y, delta=0.5), [a, b], [True, True]),
        "absolute_error": (F.absolute_error, [a, b], [True, True]),
        "epsilon_insensitive_loss": (lambda x, y: F.epsilon_insensitive_loss(x, y, 0.3), [a, b],
                                     [True, True]),
        "kl_multinomial": (F.kl_multinomial, [p, q], [True, True]),
        "binary_error": (F.binary_error, [p, q], [False, False]),
    }[name]
    probe = build(*[nn.Variable(x.shape) for x in arrays])
    w = rng.randn(*probe.shape)
    cpu = _run(build, arrays, need_grad, w)
    with nn.context_scope(get_extension_context("cudnn")):
        gpu = _run(build, arrays, need_grad, w)
    assert len(gpu) == len(cpu)
    for g, c in zip(gpu, cpu):
        np.testing.assert_allclose(g, c, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fn", [F.huber_loss, F.kl_multinomial, F.binary_error])
def test_loss_output_arguments_only_take_their_defaults(fn):
    with pytest.raises(DpnbError, match=r"n_outputs and outputs hand in output variables.*"
                                        r"outputs=\[\]"):
        fn(nn.Variable((2, 3)), nn.Variable((2, 3)), outputs=[])
