"""Reductions, scans, sort and top-k: what the nnabla cases cannot check (where dpnb
deliberately differs from nnabla, zeros in products) and bad input."""
import numpy as np
import pytest
from gradcheck import check_grad

import dpnb as nn
import dpnb.functions as F
from dpnb import DpnbError


def _forward(y):
    y.forward()
    return y.d


@pytest.mark.parametrize("kwargs", [{}, {"axis": 0, "reverse": True}, {"axis": 1}])
def test_sort_gradient_goes_back_to_where_each_value_came_from(kwargs, rng):
    x = rng.randn(3, 4)
    y = check_grad(lambda v: F.sort(v, **kwargs), [x])
    axis = kwargs.get("axis", -1)
    expected = np.sort(x, axis=axis)
    np.testing.assert_array_equal(y.d, np.flip(expected, axis) if kwargs.get("reverse") else expected)


def test_sort_with_index_passes_the_values_gradient(rng):
    x = rng.randn(2, 5)
    check_grad(lambda v: F.sort(v, reverse=True, with_index=True)[0], [x])


def test_sort_is_stable_both_ways():
    x = nn.Variable.from_numpy_array(np.array([3.0, 1.0, 3.0, 2.0, 1.0, 3.0]))
    np.testing.assert_array_equal(_forward(F.sort(x, only_index=True)), [1, 4, 3, 0, 2, 5])
    np.testing.assert_array_equal(_forward(F.sort(x, reverse=True, only_index=True)), [0, 2, 5, 3, 1, 4])


def test_sort_of_unsigned_integers_descending():
    x = nn.Variable.from_numpy_array(np.array([2, 7, 0, 7], np.uint8))
    np.testing.assert_array_equal(_forward(F.sort(x, reverse=True)), [7, 7, 2, 0])


@pytest.mark.parametrize("kwargs", [{}, {"abs": True, "largest": False}, {"base_axis": 2}])
def test_top_k_data_without_reduce_passes_only_the_selected_gradient(kwargs, rng):
    x = rng.randn(2, 3, 4)
    y = check_grad(lambda v: F.top_k_data(v, 2, reduce=False, **kwargs), [x])
    samples = y.d.reshape(-1, 4) if kwargs.get("base_axis") == 2 else y.d.reshape(2, -1)
    assert (np.count_nonzero(samples, axis=1) == 2).all()


def test_top_k_grad_keeps_the_largest_gradients():
    x = nn.Variable.from_numpy_array(np.zeros((2, 4)), need_grad=True)
    y = F.top_k_grad(x, 2, abs=True)
    y.forward()
    y.backward(np.array([[1.0, -5.0, 3.0, 0.5], [-0.1, 0.2, -0.3, 0.4]]))
    np.testing.assert_array_equal(x.g, [[0.0, -5.0, 3.0, 0.0], [0.0, 0.0, -0.3, 0.4]])


@pytest.mark.parametrize("axis", [None, 1, (0, 1)])
def test_prod_gradient_is_exact_with_zeros(axis):
    x = np.array([[1.5, 0.0, 2.0], [0.0, 0.0, 3.0], [-1.0, 2.0, 0.5]])
    y = check_grad(lambda v: F.prod(v, axis=axis), [x])
    np.testing.assert_allclose(y.d, np.prod(x, axis=axis))


@pytest.mark.parametrize("kwargs", [{}, {"exclusive": True}, {"reverse": True},
                                    {"exclusive": True, "reverse": True}])
def test_cumprod_gradient_is_exact_with_zeros(kwargs):
    x = np.array([[1.5, 0.0, 2.0, 0.0, 1.2], [0.0, 0.5, -3.0, 0.7, 2.0]])
    check_grad(lambda v: F.cumprod(v, axis=1, **kwargs), [x])


def test_negative_axes_in_a_tuple_reduce_those_axes(rng):
    # nnabla 1.39 rejects (0, -1) with a transpose error; dpnb takes it as (0, 2)
    x = rng.randn(2, 3, 4)
    v = nn.Variable.from_numpy_array(x)
    np.testing.assert_allclose(_forward(F.sum(v, axis=(0, -1))), x.sum(axis=(0, 2)))
    np.testing.assert_allclose(_forward(F.prod(v, axis=(-1, 0))), x.prod(axis=(0, 2)))


def test_norm_of_zeros_has_a_zero_gradient():
    x = nn.Variable.from_numpy_array(np.zeros((2, 3)), need_grad=True)
    y = F.norm(x, axis=1)
    y.forward()
    y.backward(np.ones(2))
    np.testing.assert_array_equal(x.g, np.zeros((2, 3)))


@pytest.mark.parametrize("build, message", [
    (lambda x: F.sum(x, axis=2), r"Sum: axis must be an int in \[-2, 2\) for an input of 2 dimensions, got 2"),
    (lambda x: F.mean(x, axis=(0, 0)), r"Mean: axis \(0, 0\) names an axis more than once"),
    (lambda x: F.max(x, axis=-3), r"Max: axis must be an int in \[-2, 2\)"),
    (lambda x: F.prod(x, axis="0"), r"Prod: axis must be an int, a list or tuple of ints, or None"),
    (lambda x: F.norm(x, p=0.5), r"Norm: p must be a finite number >= 1, got 0.5"),
    (lambda x: F.norm(x, p=float("inf")), r"Norm: p must be a finite number >= 1, got inf; for the largest"),
    (lambda x: F.cumsum(x, axis=2), r"CumSum: axis must be an int in \[-2, 2\)"),
    (lambda x: F.cumprod(x, axis=1.0), r"CumProd: axis must be an int"),
    (lambda x: F.sort(x, axis=5), r"Sort: axis must be an int in \[-2, 2\)"),
    (lambda x: F.top_k_data(x, 5), (r"TopKData: k must be an int in \[1, 4\] \(the size of a sample, "
                                    r"the axes from base_axis=1 of \(3, 4\)\), got 5")),
    (lambda x: F.top_k_data(x, 0), r"TopKData: k must be an int in \[1, 4\]"),
    (lambda x: F.top_k_data(x, 2, reduce=False, with_index=True), r"with_index=True needs reduce=True"),
    (lambda x: F.top_k_data(x, 2, base_axis=2), r"TopKData: base_axis must lie in \[-2, 2\)"),
    (lambda x: F.top_k_grad(x, 13, base_axis=0), r"TopKGrad: k must be an int in \[1, 12\]"),
    (lambda x: F.cumsum(x, n_outputs=2), r"F.cumsum: n_outputs and outputs hand in output variables"),
])
def test_bad_input(build, message):
    with pytest.raises(DpnbError, match=message):
        build(nn.Variable((3, 4)))
