"""Linear algebra: matrix products (batch_matmul, dot, einsum) and, over batches of
square matrices of shape (B, N, N), batch_inv, batch_det, batch_logdet and
batch_cholesky, as nnabla's."""
from __future__ import annotations

import numpy as np

from ..errors import DpnbValueError
from ..graph import Function, Variable
from ..ndarray import NdArray
from .array import reshape, transpose
from .base import broadcast_shape, default_outputs, sum_to, variadic_keywords
from .math import mul2
from .nn import affine
from .reduction import sum as reduce_sum
from .specs import FunctionSpec, attrs, call, without_params

__all__ = ["batch_matmul", "dot", "einsum", "batch_inv", "batch_det", "batch_logdet",
           "batch_cholesky"]


def _t(a):
    """Each matrix of a batch transposed."""
    return a.transpose(0, 2, 1)


class _Batched(Function):
    """Base of the functions of a (B, N, N) batch of square matrices."""

    def square(self, x: Variable) -> tuple[int, int, int]:
        if x.ndim != 3 or x.shape[1] != x.shape[2]:
            raise self.error(f"needs a batch of square matrices of shape (B, N, N), got shape "
                             f"{x.shape}; reshape a single matrix to (1, N, N)")
        return x.shape


class BatchInv(_Batched):
    """The inverse of each matrix."""

    nnabla_spec = without_params("BatchInv", "batch_inv")

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def output_specs(self, inputs):
        (x,) = inputs
        return [(self.square(x), x.dtype)]

    def forward_arrays(self, xp, xs):
        try:
            return (xp.linalg.inv(xs[0]),)
        except np.linalg.LinAlgError:
            raise self.error("a matrix of the batch is singular; only invertible matrices have "
                             "an inverse") from None

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        yt = _t(ys[0])
        return (-(yt @ gys[0] @ yt),)


def batch_inv(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """The inverse of each matrix of the (B, N, N) batch ``x``."""
    default_outputs("F.batch_inv", n_outputs, outputs)
    return BatchInv()(x)


class BatchDet(_Batched):
    """The determinant of each matrix, shape (B,)."""

    nnabla_spec = without_params("BatchDet", "batch_det")

    grad_depends_on_outputs = True

    def output_specs(self, inputs):
        (x,) = inputs
        return [(self.square(x)[:1], x.dtype)]

    def forward_arrays(self, xp, xs):
        return (xp.linalg.det(xs[0]).astype(xs[0].dtype, copy=False),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        scale = (gys[0] * ys[0])[:, None, None]
        return (scale * _t(xp.linalg.inv(xs[0])),)


def batch_det(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """The determinant of each matrix of the (B, N, N) batch ``x``."""
    default_outputs("F.batch_det", n_outputs, outputs)
    return BatchDet()(x)


class BatchLogdet(_Batched):
    """log |det| of each matrix, shape (B,)."""

    nnabla_spec = without_params("BatchLogdet", "batch_logdet")

    def output_specs(self, inputs):
        (x,) = inputs
        return [(self.square(x)[:1], x.dtype)]

    def forward_arrays(self, xp, xs):
        return (xp.linalg.slogdet(xs[0])[1].astype(xs[0].dtype, copy=False),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0][:, None, None] * _t(xp.linalg.inv(xs[0])),)


def batch_logdet(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """The log of the absolute determinant of each matrix of the (B, N, N) batch ``x``."""
    default_outputs("F.batch_logdet", n_outputs, outputs)
    return BatchLogdet()(x)


class BatchCholesky(_Batched):
    """The Cholesky factor of each symmetric positive definite matrix, read from its
    lower triangle: L (or U = L^T when ``upper``) with L L^T = X.  The gradient is the
    symmetric one, as nnabla's."""

    nnabla_spec = FunctionSpec("BatchCholesky", "batch_cholesky_param", ("upper",), attrs("upper"),
                               call("batch_cholesky", "upper"))

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def __init__(self, upper: bool):
        self.upper = bool(upper)

    def output_specs(self, inputs):
        (x,) = inputs
        return [(self.square(x), x.dtype)]

    def forward_arrays(self, xp, xs):
        try:
            lower = xp.linalg.cholesky(xs[0])
        except np.linalg.LinAlgError:
            raise self.error("a matrix of the batch is not positive definite; the Cholesky "
                             "factor needs symmetric positive definite matrices") from None
        return (_t(lower).copy() if self.upper else lower,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        lower, g = (_t(ys[0]), _t(gys[0])) if self.upper else (ys[0], gys[0])
        m = _t(lower) @ g
        phi = (xp.tril(m) + xp.tril(m, -1)) * 0.5  # the lower triangle, its diagonal halved
        inv = xp.linalg.inv(lower)
        s = _t(inv) @ phi @ inv
        return ((s + _t(s)) * 0.5,)


def batch_cholesky(x: Variable, upper: bool = False, n_outputs: int = -1,
                   outputs=None) -> Variable:
    """The lower (``upper``: upper) triangular Cholesky factor of each symmetric positive
    definite matrix of the (B, N, N) batch ``x``."""
    default_outputs("F.batch_cholesky", n_outputs, outputs)
    return BatchCholesky(upper)(x)


class BatchMatmul(Function):
    """Matrix products over batches: (..., M, K) @ (..., K, N), with the batch axes
    broadcast; ``transpose_a`` / ``transpose_b`` transpose the matrices first."""

    nnabla_spec = FunctionSpec("BatchMatmul", "batch_matmul_param", ("transpose_a", "transpose_b"),
                               attrs(transpose_a="ta", transpose_b="tb"),
                               call("batch_matmul", "transpose_a", "transpose_b"))

    def __init__(self, transpose_a: bool, transpose_b: bool):
        self.ta, self.tb = bool(transpose_a), bool(transpose_b)

    def output_specs(self, inputs):
        a, b = inputs
        if a.ndim < 3 or a.ndim != b.ndim:
            raise self.error(f"needs two inputs of one number (>= 3) of dimensions, got shapes "
                             f"{a.shape} and {b.shape}; F.affine multiplies plain matrices")
        m, k = a.shape[-1:-3:-1] if self.ta else a.shape[-2:]
        k2, n = b.shape[-1:-3:-1] if self.tb else b.shape[-2:]
        if k != k2:
            raise self.error(f"the matrices of {a.shape} (transpose_a={self.ta}) and {b.shape} "
                             f"(transpose_b={self.tb}) do not chain: {k} != {k2}")
        batch = broadcast_shape(self, a.shape[:-2], b.shape[:-2])
        self.shapes = (a.shape, b.shape)
        return [(batch + (m, n), np.result_type(a.dtype, b.dtype))]

    @staticmethod
    def _t(xp, a, flag: bool):
        return xp.swapaxes(a, -1, -2) if flag else a

    def forward_arrays(self, xp, xs):
        a, b = xs
        return (xp.matmul(self._t(xp, a, self.ta), self._t(xp, b, self.tb)),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (a, b), (g,) = xs, gys
        ga = gb = None
        if need_grads[0]:
            ga = xp.matmul(g, xp.swapaxes(self._t(xp, b, self.tb), -1, -2))
            ga = sum_to(self._t(xp, ga, self.ta), self.shapes[0])
        if need_grads[1]:
            gb = xp.matmul(xp.swapaxes(self._t(xp, a, self.ta), -1, -2), g)
            gb = sum_to(self._t(xp, gb, self.tb), self.shapes[1])
        return (ga, gb)


def batch_matmul(a: Variable, b: Variable, transpose_a: bool = False, transpose_b: bool = False,
                 n_outputs: int = -1, outputs=None) -> Variable:
    """The matrix products of the batches of ``a`` and ``b`` (last two axes)."""
    default_outputs("F.batch_matmul", n_outputs, outputs)
    return BatchMatmul(transpose_a, transpose_b)(a, b)


def _dot_variables(a: Variable, b: Variable) -> Variable:
    """NumPy's dot of two variables, built from existing functions as nnabla does."""
    if a.ndim == 0 or b.ndim == 0:
        return mul2(a, b)
    if a.ndim == 1 and b.ndim == 1:
        return reduce_sum(mul2(a, b))
    if b.ndim == 1:
        h = affine(a, reshape(b, (-1, 1)), base_axis=a.ndim - 1)
        return reshape(h, h.shape[:-1])
    order = [b.ndim - 2] + [i for i in range(b.ndim) if i != b.ndim - 2]
    return affine(a, transpose(b, order), base_axis=a.ndim - 1)


def _at_once_if_an_ndarray(a, b) -> tuple:
    """``a`` and ``b``, as NdArrays (a variable's data) where either is one: then every
    step of a product built from several functions computes at once on current data."""
    if isinstance(a, NdArray) or isinstance(b, NdArray):
        return tuple(x.data if isinstance(x, Variable) else x for x in (a, b))
    return a, b


def dot(a, b, out=None):
    """NumPy's dot.  Of variables and NdArrays, built from dpnb's functions as nnabla does
    (a graph of variables; computed at once, into an NdArray, where an NdArray takes
    part); a number and one of them, their product; of anything else, ``numpy.dot``.
    ``out``, of the result's type, shape and dtype, takes the result: an NdArray or a
    NumPy array its values, a variable its place in the graph (``rewire_on``)."""
    arrays = (Variable, NdArray)
    if isinstance(a, arrays) and isinstance(b, arrays):
        result = _dot_variables(*_at_once_if_an_ndarray(a, b))
    elif isinstance(a, arrays) or isinstance(b, arrays):
        result = a * b
    else:
        result = np.dot(a, b)
    if out is None:
        return result
    kind = type(result) if isinstance(result, arrays) else np.ndarray
    if not isinstance(out, kind) or tuple(out.shape) != tuple(np.shape(result)) \
            or out.dtype != np.result_type(result):
        what = {Variable: "an nn.Variable", NdArray: "an nn.NdArray"}.get(kind, "a NumPy array")
        raise DpnbValueError(
            f"F.dot: out must be {what} of the result's shape {tuple(np.shape(result))} and "
            f"dtype {np.result_type(result)}, got {type(out).__name__} "
            f"{getattr(out, 'shape', '')} {getattr(out, 'dtype', '')}")
    if isinstance(out, Variable):
        out.rewire_on(result)
    elif isinstance(out, NdArray):
        out.data = result.data
    else:
        out[...] = result
    return None


def matmul(a, b):
    """``a @ b`` of variables or NdArrays, NumPy's matmul: ``dot`` for vectors and
    matrices, and from three dimensions on, stacks of matrices with broadcast batch axes
    (a vector counting as one row or column)."""
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        raise DpnbValueError(f"a @ b needs at least one dimension on each side (NumPy's "
                             f"matmul), got shapes {np.shape(a)} and {np.shape(b)}; use * for "
                             "scalars")
    if a.ndim <= 2 and b.ndim <= 2:
        return dot(a, b)
    a, b = _at_once_if_an_ndarray(a, b)
    a_matrix = reshape(a, (1,) + a.shape) if a.ndim == 1 else a
    b_matrix = reshape(b, b.shape + (1,)) if b.ndim == 1 else b
    ndim = max(a_matrix.ndim, b_matrix.ndim)
    a_matrix = reshape(a_matrix, (1,) * (ndim - a_matrix.ndim) + a_matrix.shape)
    b_matrix = reshape(b_matrix, (1,) * (ndim - b_matrix.ndim) + b_matrix.shape)
    product = batch_matmul(a_matrix, b_matrix)
    shape = product.shape[:-2] + (product.shape[-2:-1] if a.ndim > 1 else ()) + \
        (product.shape[-1:] if b.ndim > 1 else ())
    return reshape(product, shape)


_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _einsum_terms(owner: "Einsum", equation: str, shapes: list) -> tuple[list[str], str]:
    """The subscripts of each operand and of the output, with ellipses written out as
    letters of their own and the implicit output (letters seen once, sorted) made explicit."""
    if not isinstance(equation, str) or not equation:
        raise owner.error(f"equation must be a non-empty string such as 'ij,jk->ik', got "
                          f"{equation!r}")
    spec = equation.replace(" ", "")
    given, arrow, out = spec.partition("->")
    terms = given.split(",")
    if len(terms) != len(shapes):
        raise owner.error(f"equation {equation!r} has {len(terms)} operand(s) but "
                          f"{len(shapes)} input(s) were given")
    letters = set(spec) - set(",->.")
    if not all(c.isalpha() for c in letters):
        raise owner.error(f"equation {equation!r} may hold letters, ',', '->' and '...' only")
    spare = iter(c for c in _LETTERS if c not in letters)
    ell_ndim = 0
    for term, shape in zip(terms, shapes):
        if "..." in term:
            ell_ndim = max(ell_ndim, len(shape) - (len(term) - 3))
    ell = "".join(next(spare) for _ in range(ell_ndim))
    written = []
    for i, (term, shape) in enumerate(zip(terms, shapes)):
        if "." in term.replace("...", "", 1) or ("." in term and "..." not in term):
            raise owner.error(f"operand {i} of {equation!r}: '.' only as one '...'")
        n_ell = len(shape) - (len(term) - 3) if "..." in term else 0
        full = term.replace("...", ell[ell_ndim - n_ell:]) if "..." in term else term
        if len(full) != len(shape) or n_ell < 0:
            raise owner.error(f"operand {i} '{term}' of {equation!r} does not fit input {i} of "
                              f"shape {shape}")
        written.append(full)
    if arrow:
        out = out.replace("...", ell)
    else:
        seen = "".join(written)
        out = ell + "".join(sorted(c for c in set(seen) - set(ell) if seen.count(c) == 1))
    if len(set(out)) != len(out) or not set(out) <= set("".join(written)):
        raise owner.error(f"the output '{out}' of {equation!r} must name each letter once, and "
                          "only letters of the operands")
    return written, out


class Einsum(Function):
    """Einstein summation over the inputs (NumPy's rules, without broadcasting sizes).
    The gradient of an operand is the summation of the output gradient with the other
    operands, spread over the letters only that operand has and onto its diagonals."""

    nnabla_spec = FunctionSpec("Einsum", "einsum_param", ("equation",), attrs("equation"),
                               call("einsum", "equation"))

    def __init__(self, equation: str):
        self.equation = equation

    def output_specs(self, inputs):
        if not inputs:
            raise self.error("needs at least one input variable, got none")
        shapes = [x.shape for x in inputs]
        self.terms, self.out = _einsum_terms(self, self.equation, shapes)
        sizes: dict[str, int] = {}
        for i, (term, shape) in enumerate(zip(self.terms, shapes)):
            for c, n in zip(term, shape):
                if sizes.setdefault(c, n) != n:
                    raise self.error(f"the letter {c!r} of {self.equation!r} stands for sizes "
                                     f"{sizes[c]} and {n} (input {i} of shape {shape}); "
                                     "each letter needs one size")
        self.sizes = sizes
        self.shapes = shapes
        return [(tuple(sizes[c] for c in self.out), np.result_type(*[x.dtype for x in inputs]))]

    def _spec(self, terms, out: str) -> str:
        return ",".join(terms) + "->" + out

    def forward_arrays(self, xp, xs):
        return (xp.einsum(self._spec(self.terms, self.out), *xs),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        grads = []
        for i, need in enumerate(need_grads):
            if not need:
                grads.append(None)
                continue
            term = self.terms[i]
            others = [t for j, t in enumerate(self.terms) if j != i]
            known = set(self.out).union(*others)
            unique = "".join(dict.fromkeys(term))
            kept = "".join(c for c in unique if c in known)
            g = xp.einsum(self._spec([self.out] + others, kept), gys[0],
                          *[x for j, x in enumerate(xs) if j != i])
            g = xp.broadcast_to(g.reshape([self.sizes[c] if c in kept else 1 for c in unique]),
                                tuple(self.sizes[c] for c in unique))
            grads.append(self._onto_diagonals(xp, g, term, unique).astype(xs[i].dtype, copy=False))
        return tuple(grads)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Each operand's gradient as one einsum of the output gradient and the other
        operands, with ones for the letters only that operand has and identities onto its
        diagonals (constants of the sizes): so it differentiates again as an einsum."""
        def constant(array):
            return Variable.from_numpy_array(array.astype(gys[0].dtype))

        grads = []
        for i, need in enumerate(need_grads):
            if not need:
                grads.append(None)
                continue
            spare = iter(c for c in _LETTERS if c not in self.sizes)
            others = [j for j in range(len(xs)) if j != i]
            terms = [self.out] + [self.terms[j] for j in others]
            operands = [gys[0]] + [xs[j] for j in others]
            known, seen, renamed = set("".join(terms)), set(), []
            for c in self.terms[i]:
                if c in seen:  # a repeated letter: its diagonal, by an identity
                    renamed.append(next(spare))
                    terms.append(c + renamed[-1])
                    operands.append(constant(np.eye(self.sizes[c])))
                    continue
                seen.add(c)
                renamed.append(c)
                if c not in known:  # summed over in forward: the gradient spreads along it
                    terms.append(c)
                    operands.append(constant(np.ones(self.sizes[c])))
            grads.append(F.einsum(*operands, equation=self._spec(terms, "".join(renamed))))
        return grads

    def _onto_diagonals(self, xp, g, term: str, unique: str):
        """``g`` (over each letter once) placed where ``term`` repeats a letter on its diagonal."""
        if len(unique) == len(term):
            return g.copy()  # the broadcast materialized (ascontiguousarray makes 0-d 1-d)
        spare = iter(c for c in _LETTERS if c not in self.sizes)
        seen, renamed, eyes = set(), [], []
        for c in term:
            if c in seen:
                fresh = next(spare)
                renamed.append(fresh)
                eyes.append((c + fresh, xp.eye(self.sizes[c], dtype=g.dtype)))
            else:
                seen.add(c)
                renamed.append(c)
        spec = ",".join([unique] + [s for s, _ in eyes]) + "->" + "".join(renamed)
        return xp.einsum(spec, g, *[e for _, e in eyes])


def einsum(*x: Variable, **kw) -> Variable:
    """Einstein summation of the variables by ``equation`` (keyword), e.g.
    ``F.einsum(a, b, equation="bij,bjk->bik")``."""
    (equation,) = variadic_keywords("F.einsum", kw, {"equation": ""})
    return Einsum(equation)(*x)
