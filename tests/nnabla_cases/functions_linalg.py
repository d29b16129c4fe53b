"""Batched linear algebra cases (see functions.py): inverse, determinant, log
determinant and Cholesky factor of (B, N, N) batches."""
import numpy as np

from .functions import Case

R = np.random.RandomState(11)


def well_conditioned(b, n):
    """Random matrices kept away from singular ones (the identity plus noise)."""
    return (np.eye(n) * 2 + R.uniform(-0.6, 0.6, (b, n, n))).astype(np.float32)


def spd(b, n):
    """Symmetric positive definite matrices."""
    a = R.uniform(-1, 1, (b, n, n))
    return (a @ a.transpose(0, 2, 1) + n * np.eye(n)).astype(np.float32)


NEGATIVE_DET = well_conditioned(2, 3)
NEGATIVE_DET[0, [0, 1]] = NEGATIVE_DET[0, [1, 0]]  # a row swap flips the sign


def gram(lib, x):
    """x x^T: symmetric, so finite differences see the gradient nnabla gives."""
    return lib.F.batch_matmul(x, x, transpose_b=True)


CASES = [
    Case("batch_inv", lambda lib, x: lib.F.batch_inv(x), (well_conditioned(2, 3),)),
    Case("batch_inv 1x1", lambda lib, x: lib.F.batch_inv(x), (well_conditioned(3, 1),)),
    Case("batch_det", lambda lib, x: lib.F.batch_det(x), (well_conditioned(3, 3),)),
    Case("batch_det negative", lambda lib, x: lib.F.batch_det(x), (NEGATIVE_DET,)),
    Case("batch_det 4x4", lambda lib, x: lib.F.batch_det(x), (well_conditioned(1, 4),)),
    Case("batch_logdet", lambda lib, x: lib.F.batch_logdet(x), (well_conditioned(3, 3),)),
    Case("batch_logdet negative det", lambda lib, x: lib.F.batch_logdet(x), (NEGATIVE_DET,)),
    # nnabla's gradient is symmetric while the factor reads only the lower triangle, so
    # finite differences of single entries do not apply (the gram cases check them)
    Case("batch_cholesky", lambda lib, x: lib.F.batch_cholesky(x), (spd(2, 3),), fd=False),
    Case("batch_cholesky upper", lambda lib, x: lib.F.batch_cholesky(x, upper=True), (spd(2, 3),),
         fd=False),
    Case("batch_cholesky of a gram matrix",
         lambda lib, x: lib.F.batch_cholesky(gram(lib, x)), (well_conditioned(2, 3),)),
    Case("batch_cholesky upper of a gram matrix",
         lambda lib, x: lib.F.batch_cholesky(gram(lib, x), upper=True), (well_conditioned(2, 4),)),
]
