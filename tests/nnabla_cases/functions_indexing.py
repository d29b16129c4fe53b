"""Gathering, scattering and embedding cases (see functions.py).  Integer inputs are
indices (no gradient)."""
import numpy as np

from .functions import Case

R = np.random.RandomState(3)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


def ints(*values):
    return np.array(values, np.int64) if not isinstance(values[0], list) else np.array(values[0], np.int64)


CASES = [
    Case("gather default", lambda lib, x, i: lib.F.gather(x, i), (u(3, 4), ints([2, 0, 2, 1]))),
    Case("gather axis 1 2d index", lambda lib, x, i: lib.F.gather(x, i, axis=1),
         (u(2, 3, 4), ints([[2, 0], [1, 1]]))),
    Case("gather axis -1", lambda lib, x, i: lib.F.gather(x, i, axis=-1), (u(2, 3, 4), ints([3, 0]))),
    Case("gather batch_dims 1", lambda lib, x, i: lib.F.gather(x, i, axis=1, batch_dims=1),
         (u(2, 3, 4), ints([[0, 2, 2], [1, 1, 0]]))),
    Case("gather batch_dims 1 axis 2", lambda lib, x, i: lib.F.gather(x, i, axis=2, batch_dims=1),
         (u(2, 3, 4), ints([[[0, 3]], [[1, 1]]]))),
    Case("gather batch_dims 2", lambda lib, x, i: lib.F.gather(x, i, axis=2, batch_dims=2),
         (u(2, 3, 4), ints([[[0], [3], [2]], [[1], [1], [0]]]))),
    Case("gather_nd elements", lambda lib, x, i: lib.F.gather_nd(x, i),
         (u(2, 3), ints([[1, 0, 1], [2, 0, 2]]))),
    Case("gather_nd slices", lambda lib, x, i: lib.F.gather_nd(x, i), (u(2, 3, 2), ints([[1, 1, 0]]))),
    Case("gather_nd negative", lambda lib, x, i: lib.F.gather_nd(x, i), (u(2, 3), ints([[-1, 0], [-2, 1]]))),
    Case("gather_nd list", lambda lib, x: lib.F.gather_nd(x, [[1, 0], [2, 2]]), (u(2, 3, 2),)),
    Case("scatter_nd shape", lambda lib, d, i: lib.F.scatter_nd(d, i, shape=(8,)),
         (u(4), ints([[4, 3, 1, 7]]))),
    Case("scatter_nd slices", lambda lib, d, i: lib.F.scatter_nd(d, i, shape=(3, 4, 2)),
         (u(2, 2), ints([[2, 0], [1, 3]]))),
    Case("scatter_nd add", lambda lib, d, i: lib.F.scatter_nd(d, i, shape=(2, 3), add=True),
         (u(4), ints([[1, 0, 1, 1], [2, 0, 2, 0]]))),
    # nnabla gives out no gradient; dpnb passes it where nothing was written (own tests)
    Case("scatter_nd out", lambda lib, d, i, o: lib.F.scatter_nd(d, i, out=o),
         (u(3), ints([[0, 2, 1], [1, 0, 3]]), u(3, 4)), need_grad=(True, False, False)),
    # distinct destinations: with out= and add=True nnabla gives only the first of
    # repeated ones a gradient (dpnb's is checked in its own tests)
    Case("scatter_nd out add", lambda lib, d, i, o: lib.F.scatter_nd(d, i, out=o, add=True),
         (u(3), ints([[0, 1, 1], [1, 1, 3]]), u(2, 4)), need_grad=(True, False, False)),
    Case("scatter_add default", lambda lib, a, i, b: lib.F.scatter_add(a, i, b),
         (u(3, 2), ints([[0, 1], [2, 0]]), u(2, 2))),
    Case("scatter_add axis 1 smaller index", lambda lib, a, i, b: lib.F.scatter_add(a, i, b, axis=1),
         (u(2, 3), ints([[0, 2], [1, 1]]), u(2, 3))),
    Case("scatter_add axis -1 3d", lambda lib, a, i, b: lib.F.scatter_add(a, i, b, axis=-1),
         (u(2, 2, 3), ints([[[2, 0, 0, 1]], [[1, 1, 2, 0]]]), u(2, 2, 4))),
    Case("one_hot", lambda lib, x: lib.F.one_hot(x, (5,)), (ints([[1], [3], [0]]),), grad=False),
    Case("one_hot 2d", lambda lib, x: lib.F.one_hot(x, (4, 3)), (ints([[[1, 2], [3, 0]]]),), grad=False),
    Case("embed", lambda lib, x, w: lib.F.embed(x, w), (ints([[1, 3], [0, 1]]), u(4, 3))),
    Case("embed 3d table", lambda lib, x, w: lib.F.embed(x, w), (ints([2, 2, 0]), u(3, 2, 2))),
    Case("PF.embed", lambda lib, x: lib.PF.embed(x, 5, 3), (ints([[4, 0], [1, 4]]),)),
    # a fixed table gets no gradient on purpose, so finite differences do not apply
    Case("PF.embed named fixed", lambda lib, x: lib.PF.embed(x, 4, 2, fix_parameters=True, name="tok"),
         (ints([3, 1, 3]),), fd=False),
]
