"""Gathering, scattering and embedding: what the nnabla cases cannot check (out-of-range
indices, scatter_nd's out gradient, the embedding's initializer) and bad input."""
import numpy as np
import pytest
from gradcheck import check_grad

import dpnb as nn
import dpnb.functions as F
import dpnb.parametric_functions as PF
from dpnb import DpnbError


def _ids(values):
    return nn.Variable.from_numpy_array(np.array(values, np.int64))


def test_scatter_nd_out_gets_the_gradient_where_nothing_was_written(rng):
    index = np.array([[0, 2, 1], [1, 0, 3]])
    y = check_grad(lambda d, i, o: F.scatter_nd(d, i, out=o),
                   [rng.randn(3), index, rng.randn(3, 4)], need_grad=[True, False, True])
    assert y.shape == (3, 4)


def test_scatter_nd_updates_out_as_nnabla(rng):
    out = nn.Variable.from_numpy_array(np.ones(4))
    y = F.scatter_nd(nn.Variable.from_numpy_array(np.array([5.0, 6.0])), [[3, 0]], out=out)
    y.forward()
    np.testing.assert_array_equal(y.d, [6.0, 1.0, 1.0, 5.0])
    np.testing.assert_array_equal(out.d, [6.0, 1.0, 1.0, 5.0])


def test_embed_gradient_adds_up_repeated_ids(rng):
    check_grad(lambda i, w: F.embed(i, w), [np.array([[1, 3], [1, 1]]), rng.randn(4, 3)],
               need_grad=[False, True])


def test_pf_embed_parameter_and_initializer():
    y = PF.embed(_ids([[1, 2], [9, 0]]), 10, 400)
    assert y.shape == (2, 2, 400)
    (name, w), = nn.get_parameters().items()
    assert name == "embed/W" and w.shape == (10, 400)
    limit = np.sqrt(3.0)
    assert np.abs(w.d).max() < limit and np.abs(w.d).max() > 0.95 * limit
    assert abs(float(w.d.std()) - 1.0) < 0.05
    y.forward()
    np.testing.assert_array_equal(y.d[1, 0], w.d[9])


def test_pf_embed_fix_parameters_and_name():
    y = PF.embed(_ids([0, 2]), 3, 2, fix_parameters=True, name="tok")
    (name, w), = nn.get_parameters(grad_only=False).items()
    assert name == "tok/embed/W" and not y.need_grad
    w.grad.zero()
    y.forward()
    np.testing.assert_array_equal(y.d, w.d[[0, 2]])


def test_scatter_nd_add_with_repeated_destinations(rng):
    # with out= each forward adds into out again (nnabla's in-place update), so the
    # finite differences run on a new output; the data gradient is the same
    index = np.array([[0, 0, 1, 0], [1, 1, 3, 1]])
    data = rng.randn(4)
    y = check_grad(lambda d, i: F.scatter_nd(d, i, shape=(2, 4), add=True), [data, index],
                   need_grad=[True, False])
    assert y.d[0, 1] == pytest.approx(data[0] + data[1] + data[3]) and y.d[1, 3] == data[2]
    out = nn.Variable.from_numpy_array(np.zeros((2, 4)), need_grad=True)
    data = nn.Variable.from_numpy_array(rng.randn(4), need_grad=True)
    z = F.scatter_nd(data, index, out=out, add=True)
    z.forward()
    g = rng.randn(2, 4)
    z.backward(g)
    np.testing.assert_allclose(data.g, g[index[0], index[1]])
    np.testing.assert_allclose(out.g, g)


@pytest.mark.parametrize("build, message", [
    (lambda x: F.gather(x, _ids([3])), r"Gather: index 3 is outside axis 0 of size 3; indices must lie in \[0, 3\)"),
    (lambda x: F.gather(x, _ids([-1]), axis=1), r"Gather: index -1 is outside axis 1 of size 4"),
    (lambda x: F.gather(x, _ids([0]), axis=2), r"Gather: axis must be an int in \[-2, 2\)"),
    (lambda x: F.gather(x, _ids([[0], [1]]), axis=1, batch_dims=1),
     r"Gather: with batch_dims=1, x \(3, 4\) and Indices \(2, 1\) must share their first 1 sizes"),
    (lambda x: F.gather(x, _ids([0]), batch_dims=2), r"Gather: batch_dims must be an int in \[0, 1\]"),
    (lambda x: F.gather_nd(x, [[3, 0]]), r"GatherNd: index 3 is outside axis 0 of size 3; indices must lie in \[-3, 3\)"),
    (lambda x: F.gather_nd(x, [[0], [1], [2]]), r"GatherNd: indices of shape \(3, 1\) must hold M <= 2 index rows"),
    (lambda x: F.scatter_nd(x, [[0, 1]], shape=(3, 4)),
     r"ScatterNd: data of shape \(3, 4\) does not fit indices \(1, 2\) and output \(3, 4\): expected data of shape \(2, 4\)"),
    (lambda x: F.scatter_nd(F.reshape(x, (12,)), [list(range(11)) + [12]], shape=(12,)),
     r"ScatterNd: index 12 is outside output axis 0 of size 12"),
    (lambda x: F.scatter_nd(F.slice(x, (0, 0), (1, 2)), [[0, 0]], shape=(1, 2)), r"ScatterNd: data of shape \(1, 2\) does not fit"),
    (lambda x: F.scatter_nd(F.slice(F.reshape(x, (12,)), (0,), (2,)), [[1, 1]], shape=(4,)),
     r"name one destination more than once with add=False"),
    (lambda x: F.scatter_nd(x, [[0]]), r"F.scatter_nd: give exactly one of shape= \(a new output\) and out="),
    (lambda x: F.scatter_nd(x, [[0]], shape=(3,), out=x), r"F.scatter_nd: give exactly one of shape="),
    (lambda x: F.scatter_add(x, _ids([[0, 3]]), x), r"ScatterAdd: index 3 is outside axis 0 of x0 of size 3"),
    (lambda x: F.scatter_add(x, _ids([0]), x), r"ScatterAdd: x0 \(3, 4\), indices \(1,\) and x1 \(3, 4\) must have one number"),
    (lambda x: F.scatter_add(x, _ids([[0] * 5]), x, axis=0),
     r"ScatterAdd: indices \(1, 5\) may not be larger than x1 \(3, 4\)"),
    (lambda x: F.one_hot(_ids([[1, 2]]), (5,)), r"OneHot: the last axis of x \(1, 2\) must have one entry per axis"),
    (lambda x: F.embed(_ids([0, 3]), x), r"Embed: index 3 is outside the rows of w of size 3"),
    (lambda x: F.embed(_ids([-1]), x), r"Embed: index -1 is outside the rows of w"),
    (lambda x: PF.embed(_ids([0]), 0, 3), r"PF.embed: n_inputs must be an int >= 1, got 0"),
    (lambda x: PF.embed(x.d, 3, 3), r"PF.embed expects an nn.Variable of integer ids"),
])
def test_bad_input(build, message):
    x = nn.Variable.from_numpy_array(np.arange(12.0).reshape(3, 4))
    with pytest.raises(DpnbError, match=message):
        y = build(x)
        y.forward()


def test_one_hot_counts_negative_indices_from_the_end_and_zeroes_samples_outside():
    """nnabla 1.39's behaviour (its test_one_hot.py pins it down): -1 is the last class;
    a sample with an index outside its axis, after that, gets zeros."""
    y = F.one_hot(_ids([[1, -1], [-3, 0], [2, 5], [-4, 1]]), (3, 4))
    y.forward()
    expected = np.zeros((4, 3, 4))
    expected[0, 1, 3] = expected[1, 0, 0] = 1
    np.testing.assert_array_equal(y.d, expected)
