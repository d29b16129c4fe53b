"""x[key] and x[key] = value on variables and NdArrays: NumPy's values for NumPy's keys,
gradients by central differences in float64, index variables read at each forward."""
import numpy as np
import pytest
from gradcheck import check_grad

import dpnb as nn
import dpnb.functions as F
from dpnb import DpnbError

KEYS = [(slice(1, None, 2),), (Ellipsis, 1), (None, 2, slice(None, None, -1)),
        ([0, 2, 2],), (slice(None), [3, 0, 3]), ([[0, 1], [2, 2]], slice(1, 3), None),
        (np.array([True, False, True]),), ([1, 2], [0, 3])]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_get_item_values_and_gradient(key, rng):
    x = rng.randn(3, 4)
    y = check_grad(lambda v: v[key], [x])
    np.testing.assert_array_equal(y.d, x[key])
    with nn.auto_forward():
        got = nn.NdArray.from_numpy_array(x)[key]
    assert isinstance(got, nn.NdArray)
    np.testing.assert_array_equal(got.data, x[key])


def test_an_index_variable_is_read_at_each_forward(rng):
    x = rng.randn(6)
    i = nn.Variable.from_numpy_array(np.array([5, 0, 5]))
    y = nn.Variable.from_numpy_array(x)[i]
    y.forward()
    np.testing.assert_array_equal(y.d, x[[5, 0, 5]])
    i.d = [1, 2, 3]
    y.forward()
    np.testing.assert_array_equal(y.d, x[[1, 2, 3]])


def test_a_mask_that_changes_its_count_says_to_index_again():
    mask = nn.Variable.from_numpy_array(np.array([True, False, True]))
    y = nn.Variable.from_numpy_array(np.arange(3.0))[mask]
    mask.d = [True, True, True]
    with pytest.raises(DpnbError, match=r"the index now selects \(3,\), where it selected \(2,\)"):
        y.forward()


def test_a_key_that_does_not_fit_names_both_shapes():
    with pytest.raises(DpnbError, match=r"GetItem: cannot index an array of shape \(2, 3\)"):
        nn.Variable((2, 3))[0, 0, 0]


@pytest.mark.parametrize("key, value", [((slice(1, 3), [0, 2]), np.array([[1.0, 2.0], [3.0, 4.0]])),
                                        ((0,), np.array([7.0])),
                                        ((np.array([True, False, True]), 1), np.array(-1.0))],
                         ids=repr)
def test_set_item_continues_the_graph_from_the_assignment(key, value, rng):
    """The graph built on the variable after ``y[key] = u`` sees u there; the gradient goes
    to u from those elements and to what y was from the others."""
    x0 = rng.randn(3, 4)

    def build(x, u):
        y = F.mul_scalar(x, 2.0)
        y[key] = u
        return F.sin(y)

    z = check_grad(build, [x0, value])
    expected = 2.0 * x0
    expected[key] = value
    np.testing.assert_allclose(z.d, np.sin(expected), rtol=1e-12)


def test_set_item_on_an_ndarray_and_on_a_leaf_in_eager_mode():
    a = nn.NdArray.from_numpy_array(np.zeros((2, 3)))
    a[:, 1] = 5.0
    np.testing.assert_array_equal(a.data, [[0, 5, 0], [0, 5, 0]])
    x = nn.Variable.from_numpy_array(np.arange(4.0))
    with nn.auto_forward():
        x[np.arange(4) > 1] = -1.0
    np.testing.assert_array_equal(x.d, [0.0, 1.0, -1.0, -1.0])



@pytest.mark.parametrize("key", [([0, 0], [1, 1]), (np.array([2, 0, 2]),)], ids=repr)
def test_a_key_that_names_an_element_twice_is_refused(key):
    """Which of two values assigned to one element lands is undefined (NumPy promises no
    order), and the gradient with it: an error, not a guess."""
    y = F.mul_scalar(nn.Variable.from_numpy_array(np.zeros((3, 4))), 2.0)
    y[key] = 1.0
    with pytest.raises(DpnbError, match="the key names an element of the shape \\(3, 4\\) "
                                        "array more than once"):
        y.forward()
    distinct = F.mul_scalar(nn.Variable.from_numpy_array(np.zeros((3, 4))), 2.0)
    distinct[[0, 1], [1, 1]] = 1.0  # the same column, distinct elements
    distinct.forward()
    assert distinct.d.sum() == 2.0


def test_a_value_that_does_not_fit_the_key_names_both():
    y = F.mul_scalar(nn.Variable((3, 4)), 2.0)
    with pytest.raises(DpnbError, match=r"SetItem: cannot set .* of an array of shape \(3, 4\) "
                                        r"to a value of shape \(3,\)"):
        y[0] = nn.Variable((3,))


@pytest.mark.parametrize("key, arguments", [  # the arguments real nnabla 1.39 gives
    ((slice(None), slice(None, 5)), ([0, 0], [10, 5], [1, 1])),
    ((slice(None, None, -1), slice(None, -6, -1)), ([-1, -1], [-11, -6], [-1, -1])),
    ((slice(2, 8, 2),), ([2, 0], [8, 10], [2, 1])),
    ((Ellipsis, slice(1, 3)), ([0, 1], [10, 3], [1, 1])),
    ((slice(-3, None),), ([-3, 0], [10, 10], [1, 1])),
])
def test_a_key_of_slices_is_nnablas_slice(key, arguments):
    a = np.arange(100.0).reshape(10, 10)
    x = nn.Variable.from_numpy_array(a)
    y = x[key]
    start, stop, step = arguments
    assert y.parent.name == "Slice"
    assert y.parent.arguments == {"start": start, "stop": stop, "step": step}
    y.forward()
    np.testing.assert_array_equal(y.d, a[key])
