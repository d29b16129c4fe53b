"""Cases of nnabla's older whole-array reductions (reduce_sum, reduce_mean, reduce) and
the searches searchsorted and unique (see functions.py).  nnabla 1.39's unique fails
with its default axis=None, so its cases name an axis (flatten ignores it)."""
import warnings

import numpy as np

from .functions import Case

R = np.random.RandomState(13)


def u(*shape):
    return R.uniform(-1, 1, shape).astype(np.float32)


SORTED = np.array([[1, 2, 2, 3, 5], [0, 1, 4, 4, 9]], np.float32)
VALUES = np.array([[2, 0, 6, 2.5], [4, 10, -1, 1]], np.float32)
# rows 0 and 2 repeat, columns 1 and 3 repeat; values repeat across both
TABLE = np.array([[3, 1, 2, 1], [0, 5, 1, 5], [3, 1, 2, 1]], np.float32)
CUBE = np.array([[[1, 2], [1, 2], [0, 0]], [[1, 2], [1, 2], [0, 1]]], np.float32)
ALL = {"with_index": True, "with_inverse": True, "with_counts": True}


def eager(build):
    """nnabla's unique runs only in auto_forward mode and refuses to be run again by a
    forward, so its results are computed as the case is built and handed on through
    identity from leaves."""
    def built(lib, *xs):
        with lib.nn.auto_forward():
            ys = build(lib, *xs)
        ys = ys if isinstance(ys, tuple) else (ys,)
        return tuple(lib.F.identity(y.get_unlinked_variable()) for y in ys)
    return built


def quiet_reduce(lib, x, **options):
    """F.reduce warns that it is deprecated (in both libraries); the cases need no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return lib.F.reduce(x, **options)


CASES = [
    Case("reduce_sum", lambda lib, x: lib.F.reduce_sum(x), (u(2, 3, 2),)),
    Case("reduce_mean", lambda lib, x: lib.F.reduce_mean(x), (u(3, 4),)),
    Case("reduce sum", lambda lib, x: quiet_reduce(lib, x), (u(2, 3),)),
    Case("reduce mean", lambda lib, x: quiet_reduce(lib, x, op="mean"), (u(2, 2, 2),)),
    Case("searchsorted", lambda lib, s, v: lib.F.searchsorted(s, v), (SORTED, VALUES), grad=False),
    Case("searchsorted right", lambda lib, s, v: lib.F.searchsorted(s, v, right=True),
         (SORTED, VALUES), grad=False),
    Case("searchsorted right False", lambda lib, s, v: lib.F.searchsorted(s, v, right=False),
         (SORTED[None], VALUES[None, :, :2]), grad=False),
    Case("searchsorted 1d", lambda lib, s, v: lib.F.searchsorted(s, v, True),
         (SORTED[1], VALUES[0]), grad=False),
    Case("unique flatten", eager(lambda lib, x: lib.F.unique(x, axis=0)), (TABLE,), grad=False),
    Case("unique flatten everything", eager(lambda lib, x: lib.F.unique(x, axis=1, **ALL)),
         (TABLE,), grad=False),
    Case("unique flatten unsorted",
         eager(lambda lib, x: lib.F.unique(x, axis=0, sorted=False, **ALL)), (TABLE,), grad=False),
    Case("unique rows", eager(lambda lib, x: lib.F.unique(x, flatten=False, axis=0)), (TABLE,),
         grad=False),
    Case("unique rows everything", eager(lambda lib, x: lib.F.unique(x, False, 0, **ALL)),
         (TABLE,), grad=False),
    Case("unique rows unsorted", eager(lambda lib, x: lib.F.unique(x, False, 0, False, **ALL)),
         (TABLE,), grad=False),
    Case("unique columns index", eager(lambda lib, x: lib.F.unique(x, False, 1, with_index=True)),
         (TABLE,), grad=False),
    Case("unique columns inverse",
         eager(lambda lib, x: lib.F.unique(x, False, -1, with_inverse=True)), (TABLE,), grad=False),
    Case("unique columns unsorted counts",
         eager(lambda lib, x: lib.F.unique(x, False, 1, sorted=False, with_counts=True)), (TABLE,),
         grad=False),
    Case("unique middle axis", eager(lambda lib, x: lib.F.unique(x, False, 1, **ALL)), (CUBE,),
         grad=False),
    Case("unique integers", eager(lambda lib, x: lib.F.unique(x, axis=0, with_counts=True)),
         (np.array([3, 1, 3, 7, 1], np.int64),), grad=False),
]
