"""Array manipulation cases (see functions.py)."""
import numpy as np

from .functions import Case

R = np.random.RandomState(2)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


def _tuple(y):
    return tuple(y)


CASES = [
    Case("stack axis 0", lambda lib, a, b: lib.F.stack(a, b), (u(2, 3), u(2, 3))),
    Case("stack axis -1 three", lambda lib, a, b, c: lib.F.stack(a, b, c, axis=-1),
         (u(2, 3), u(2, 3), u(2, 3))),
    Case("stack axis 1", lambda lib, a: lib.F.stack(a, a, axis=1), (u(2, 3),)),
    Case("split axis 0", lambda lib, x: lib.F.split(x), (u(3, 2),)),
    Case("split axis -1", lambda lib, x: lib.F.split(x, axis=-1), (u(2, 3, 2),)),
    Case("pad constant", lambda lib, x: lib.F.pad(x, (1, 2)), (u(2, 3),)),
    Case("pad constant value 2 axes", lambda lib, x: lib.F.pad(x, (0, 1, 2, 1), constant_value=-2.5),
         (u(2, 3, 2),)),
    Case("pad reflect", lambda lib, x: lib.F.pad(x, (1, 2, 2, 1), "reflect"), (u(3, 4),)),
    Case("pad reflect wide", lambda lib, x: lib.F.pad(x, (5, 6), "reflect"), (u(2, 3),)),
    Case("pad repeat", lambda lib, x: lib.F.pad(x, (2, 0, 1, 3), "repeat"), (u(2, 3, 2),)),
    Case("tile int", lambda lib, x: lib.F.tile(x, 3), (u(2, 3),)),
    Case("tile longer reps", lambda lib, x: lib.F.tile(x, (2, 1, 2)), (u(2, 3),)),
    Case("tile shorter reps", lambda lib, x: lib.F.tile(x, (2,)), (u(2, 3, 2),)),
    Case("broadcast", lambda lib, x: lib.F.broadcast(x, (2, 3, 4)), (u(3, 1),)),
    Case("broadcast same ndim", lambda lib, x: lib.F.broadcast(x, (3, 2, 4)), (u(1, 2, 1),)),
    # nnabla has no backward for broadcast_to (dpnb's is checked in its own tests)
    Case("broadcast_to trailing", lambda lib, x, y: lib.F.broadcast_to(x, y), (u(2, 3, 4), u(3, 4)),
         grad=False),
    Case("broadcast_to axis 0", lambda lib, x, y: lib.F.broadcast_to(x, y, axis=0),
         (u(2, 3, 4), u(2, 3)), grad=False),
    Case("broadcast_to axis 1", lambda lib, x, y: lib.F.broadcast_to(x, y, axis=1),
         (u(2, 3, 4), u(3,)), grad=False),
    Case("flip default", lambda lib, x: lib.F.flip(x), (u(2, 3, 4),)),
    Case("flip axes", lambda lib, x: lib.F.flip(x, axes=[0, 2]), (u(2, 3, 4),)),
    Case("flip axis -2", lambda lib, x: lib.F.flip(x, axes=[-2]), (u(2, 3, 4),)),
    Case("shift default", lambda lib, x: lib.F.shift(x), (u(3, 4),)),
    Case("shift nearest", lambda lib, x: lib.F.shift(x, (1, -2)), (u(3, 4),)),
    Case("shift reflect", lambda lib, x: lib.F.shift(x, (-1, 3), border_mode="reflect"), (u(3, 4),)),
    Case("shift reflect far", lambda lib, x: lib.F.shift(x, (0, -6), border_mode="reflect"), (u(2, 4),)),
    Case("shift short", lambda lib, x: lib.F.shift(x, (2,)), (u(2, 2, 4),)),
    Case("arange", lambda lib: lib.F.arange(1, 2, 0.25), (), grad=False),
    Case("arange negative step", lambda lib: lib.F.arange(3, -1, -1.5), (), grad=False),
    Case("arange default step", lambda lib: lib.F.arange(-2, 3), (), grad=False),
    Case("linspace", lambda lib: lib.F.linspace(-1, 2, 7), (), grad=False),
    Case("linspace one", lambda lib: lib.F.linspace(2, 3, 1), (), grad=False),
    Case("constant", lambda lib: lib.F.constant(2.5, (2, 3)), (), grad=False),
    Case("constant default", lambda lib: lib.F.constant(), (), grad=False),
    Case("eye_like", lambda lib, x: lib.F.eye_like(x), (u(3, 4),), grad=False),
    Case("eye_like k", lambda lib, x: lib.F.eye_like(x, k=-1), (u(4, 3),), grad=False),
    Case("matrix_diag", lambda lib, x: lib.F.matrix_diag(x), (u(2, 3),)),
    Case("matrix_diag 1d", lambda lib, x: lib.F.matrix_diag(x), (u(4),)),
    Case("matrix_diag_part", lambda lib, x: lib.F.matrix_diag_part(x), (u(2, 3, 3),)),
    Case("meshgrid", lambda lib, a, b: _tuple(lib.F.meshgrid(a, b)), (u(3), u(2))),
    Case("meshgrid ij three", lambda lib, a, b, c: _tuple(lib.F.meshgrid(a, b, c, ij_indexing=True)),
         (u(3), u(2), u(2))),
    Case("meshgrid xy three", lambda lib, a, b, c: _tuple(lib.F.meshgrid(a, b, c)),
         (u(3), u(2), u(4))),
    Case("batch_matmul", lambda lib, a, b: lib.F.batch_matmul(a, b), (u(2, 3, 4), u(2, 4, 2))),
    Case("batch_matmul transpose_a", lambda lib, a, b: lib.F.batch_matmul(a, b, transpose_a=True),
         (u(2, 4, 3), u(2, 4, 2))),
    Case("batch_matmul transpose_b", lambda lib, a, b: lib.F.batch_matmul(a, b, transpose_b=True),
         (u(2, 3, 4), u(2, 2, 4))),
    Case("batch_matmul both broadcast",
         lambda lib, a, b: lib.F.batch_matmul(a, b, transpose_a=True, transpose_b=True),
         (u(2, 1, 4, 3), u(1, 3, 2, 4))),
    Case("dot vectors", lambda lib, a, b: lib.F.dot(a, b), (u(4), u(4))),
    Case("dot matrices", lambda lib, a, b: lib.F.dot(a, b), (u(2, 3), u(3, 4))),
    Case("dot nd 1d", lambda lib, a, b: lib.F.dot(a, b), (u(2, 3, 4), u(4))),
    Case("dot nd md", lambda lib, a, b: lib.F.dot(a, b), (u(2, 3, 4), u(2, 4, 3))),
    Case("einsum matmul", lambda lib, a, b: lib.F.einsum(a, b, equation="bij,bjk->bik"),
         (u(2, 3, 4), u(2, 4, 2))),
    Case("einsum implicit", lambda lib, a, b: lib.F.einsum(a, b, equation="bij,bjk"),
         (u(2, 3, 4), u(2, 4, 2))),
    Case("einsum ellipsis transpose", lambda lib, a: lib.F.einsum(a, equation="...ij->...ji"),
         (u(2, 3, 4),)),
    Case("einsum full sum", lambda lib, a, b: lib.F.einsum(a, b, equation="ij,ij->"), (u(2, 3), u(2, 3))),
    Case("einsum diagonal", lambda lib, a: lib.F.einsum(a, equation="ii->i"), (u(3, 3),)),
    Case("einsum trace", lambda lib, a: lib.F.einsum(a, equation="ii"), (u(3, 3),)),
    Case("einsum outer three", lambda lib, a, b, c: lib.F.einsum(a, b, c, equation="i,j,k->ijk"),
         (u(2), u(3), u(2))),
    Case("einsum lone sum", lambda lib, a, b: lib.F.einsum(a, b, equation="ijk,j->i"),
         (u(2, 3, 2), u(3))),
    Case("nonzero", lambda lib, x: lib.F.nonzero(x),
         (np.array([[0.0, 1.5, 0.0], [-2.0, 0.0, 0.5]], np.float32),), grad=False),
    Case("trilu", lambda lib, x: lib.F.trilu(x), (u(3, 4),)),
    Case("trilu lower k", lambda lib, x: lib.F.trilu(x, k=1, upper=False), (u(2, 3, 4),)),
    Case("trilu upper negative k", lambda lib, x: lib.F.trilu(x, k=-1), (u(4, 3),)),
    # unlink stops the gradient and assign sends it to dst, whose value the output does
    # not depend on: both on purpose, so neither is a derivative to check
    Case("unlink", lambda lib, x: lib.F.unlink(x), (u(2, 3),), fd=False),
    Case("assign", lambda lib, d, s: lib.F.assign(d, s), (u(2, 3), u(2, 3)), fd=False),
    Case("shape", lambda lib, x: lib.F.shape(x), (u(2, 3, 4),), grad=False),
    Case("shape start", lambda lib, x: lib.F.shape(x, start=1), (u(2, 3, 4),), grad=False),
    Case("shape end", lambda lib, x: lib.F.shape(x, end=-1), (u(2, 3, 4),), grad=False),
    Case("shape start end", lambda lib, x: lib.F.shape(x, start=-2, end=2), (u(2, 3, 4),), grad=False),
]
