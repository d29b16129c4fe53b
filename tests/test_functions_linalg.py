"""Batched linear algebra beyond the nnabla cases: results against NumPy's own
decompositions and matmul, float64 inputs, and bad input."""
import numpy as np
import pytest
from gradcheck import check_grad

import dpnb as nn
import dpnb.functions as F
from dpnb import DpnbError


def _v(a):
    return nn.Variable.from_numpy_array(np.asarray(a))


def test_results_match_numpy_in_float64(rng):
    a = np.eye(3) * 3 + rng.randn(4, 3, 3)
    spd = a @ a.transpose(0, 2, 1)
    with nn.auto_forward():
        np.testing.assert_allclose(F.batch_inv(_v(a)).d, np.linalg.inv(a), rtol=1e-12)
        np.testing.assert_allclose(F.batch_det(_v(a)).d, np.linalg.det(a), rtol=1e-12)
        np.testing.assert_allclose(F.batch_logdet(_v(a)).d, np.log(abs(np.linalg.det(a))),
                                   rtol=1e-12)
        lower = F.batch_cholesky(_v(spd)).d
        upper = F.batch_cholesky(_v(spd), upper=True).d
    assert lower.dtype == np.float64
    np.testing.assert_allclose(lower @ lower.transpose(0, 2, 1), spd, rtol=1e-12)
    np.testing.assert_array_equal(upper, lower.transpose(0, 2, 1))
    np.testing.assert_array_equal(np.triu(lower, 1), 0)


def test_cholesky_reads_the_lower_triangle_and_gives_a_symmetric_gradient(rng):
    a = rng.randn(2, 3, 3)
    spd = a @ a.transpose(0, 2, 1) + 3 * np.eye(3)
    skewed = spd + np.triu(np.ones((3, 3)), 1)
    x = nn.Variable.from_numpy_array(skewed, need_grad=True)
    y = F.batch_cholesky(x)
    y.forward()
    np.testing.assert_allclose(y.d, np.linalg.cholesky(spd), rtol=1e-12)
    y.backward(rng.randn(2, 3, 3))
    np.testing.assert_allclose(x.g, x.g.transpose(0, 2, 1), rtol=1e-12)


@pytest.mark.parametrize("fn", [F.batch_inv, F.batch_det, F.batch_logdet, F.batch_cholesky])
@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 4), (1, 2, 2, 2)])
def test_not_a_batch_of_square_matrices_is_refused(fn, shape):
    with pytest.raises(DpnbError, match=r"square matrices of shape \(B, N, N\), got shape"):
        fn(nn.Variable(shape))


def test_singular_and_indefinite_matrices_are_refused():
    with nn.auto_forward(), pytest.raises(DpnbError, match="singular"):
        F.batch_inv(_v(np.zeros((1, 2, 2))))
    with nn.auto_forward(), pytest.raises(DpnbError, match="not positive definite"):
        F.batch_cholesky(_v(-np.eye(2)[None]))


@pytest.mark.parametrize("fn", [F.batch_inv, F.batch_det, F.batch_logdet, F.batch_cholesky])
def test_caller_made_outputs_are_refused(fn):
    with pytest.raises(DpnbError, match="leave them at -1 and None"):
        fn(nn.Variable((1, 2, 2)), n_outputs=1)


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)),
                                    ((2, 1, 2, 3), (4, 3, 2)), ((5, 3), (2, 3, 4))], ids=repr)
def test_matmul_is_numpys_on_variables_and_ndarrays(shapes, rng):
    a, b = rng.randn(*shapes[0]), rng.randn(*shapes[1])
    y = check_grad(lambda u, v: u @ v, [a, b])
    np.testing.assert_allclose(y.d, a @ b, rtol=1e-12)
    mixed = nn.NdArray.from_numpy_array(a) @ nn.Variable.from_numpy_array(b)
    assert isinstance(mixed, nn.NdArray)
    np.testing.assert_allclose(mixed.data, a @ b, rtol=1e-12)
    with pytest.raises(ValueError, match=r"a @ b needs at least one dimension on each side"):
        nn.Variable.from_numpy_array(a) @ nn.Variable.from_numpy_array(np.float64(2.0))
    with pytest.raises(ValueError, match=r"got shapes \(\) and"):
        2.0 @ nn.Variable.from_numpy_array(b)
