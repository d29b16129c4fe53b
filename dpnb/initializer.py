"""nnabla's parameter initializers: callables ``init(shape) -> numpy.ndarray``.

They return NumPy arrays of nnabla's dtypes (float64 for most, float32 for
OrthogonalInitializer, int64 for integer ranges and draws, the weight's dtype for
WeightNormalizationScaleInitializer); ``nn.get_parameter_or_create`` casts them to
the context's dtype and device.  ``rng=None`` draws from ``dpnb.random.prng``,
looked up at call time, so ``nn.seed(n)`` decides the values and every rank
starts from the same parameters."""
from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real

import numpy as np

from . import random as _random
from .context import to_module
from .errors import DpnbError
from .graph import Variable

__all__ = [
    "BaseInitializer", "UniformInitializer", "NormalInitializer", "ConstantInitializer",
    "UniformIntInitializer", "RangeInitializer", "OrthogonalInitializer",
    "WeightNormalizationScaleInitializer",
    "calc_uniform_lim_glorot", "calc_normal_std_glorot", "calc_normal_std_he_forward",
    "calc_normal_std_he_backward",
]


class BaseInitializer:
    """An initializer: called with a shape, returns an array of that shape."""

    def __call__(self, shape: Sequence[int]) -> np.ndarray:
        raise NotImplementedError


class _RandomInitializer(BaseInitializer):
    """An initializer drawing from ``rng``, or from the default generator when it is None."""

    def __init__(self, rng):
        self.rng = rng

    def _generator(self):
        return _random.prng if self.rng is None else self.rng


class UniformInitializer(_RandomInitializer):
    """Uniform values in ``lim``: a pair ``(a, b)``, or a number ``l`` meaning ``(-l, l)``."""

    def __init__(self, lim: float | tuple[float, float] = (-1, 1), rng=None):
        super().__init__(rng)
        pair = (-lim, lim) if isinstance(lim, Real) else lim
        try:
            low, high = (float(x) for x in pair)
            valid = low <= high
        except (TypeError, ValueError):
            valid = False
        if not valid:
            raise DpnbError(f"UniformInitializer expects lim as (low, high) with low <= high, "
                            f"or one number l for (-l, l); got {lim!r}")
        self.lim = (low, high)

    def __repr__(self) -> str:
        return f"UniformInitializer({self.lim!r})"

    def __call__(self, shape: Sequence[int]) -> np.ndarray:
        return np.asarray(self._generator().uniform(self.lim[0], self.lim[1], size=tuple(shape)))


class NormalInitializer(_RandomInitializer):
    """Normal values with mean 0 and standard deviation ``sigma``."""

    def __init__(self, sigma: float = 1.0, rng=None):
        super().__init__(rng)
        self.sigma = sigma

    def __repr__(self) -> str:
        return f"NormalInitializer({self.sigma!r})"

    def __call__(self, shape: Sequence[int]) -> np.ndarray:
        return np.asarray(self._generator().standard_normal(size=tuple(shape))) * self.sigma


class ConstantInitializer(BaseInitializer):
    """Every element equal to ``value``."""

    def __init__(self, value: float = 0):
        self.value = value

    def __repr__(self) -> str:
        return f"ConstantInitializer({self.value!r})"

    def __call__(self, shape: Sequence[int]) -> np.ndarray:
        return np.full(tuple(shape), self.value, dtype=np.float64)


class UniformIntInitializer(_RandomInitializer):
    """Integers drawn uniformly from ``[low, high)`` for ``lim = (low, high)`` (int64)."""

    def __init__(self, lim: tuple[int, int] = (0, 10), rng=None):
        super().__init__(rng)
        try:
            low, high = lim
            valid = all(isinstance(x, Integral) and not isinstance(x, bool) for x in (low, high))
            valid = valid and low < high
        except (TypeError, ValueError):
            valid = False
        if not valid:
            raise DpnbError(f"UniformIntInitializer expects lim as two integers (low, high) with "
                            f"low < high, the draws lying in [low, high); got {lim!r}")
        self.lim = (int(low), int(high))

    def __repr__(self) -> str:
        return f"UniformIntInitializer({self.lim!r})"

    def __call__(self, shape: Sequence[int]) -> np.ndarray:
        generator, (low, high) = self._generator(), self.lim
        draw = generator.randint if hasattr(generator, "randint") else generator.integers
        return np.asarray(draw(low, high, size=tuple(shape)), dtype=np.int64)


class RangeInitializer(BaseInitializer):
    """``start + step * i`` along the last axis, the same for every leading index
    (int64 for integer ``start`` and ``step``, else float64)."""

    def __init__(self, start: float = 0, step: float = 1):
        for what, value in (("start", start), ("step", step)):
            if isinstance(value, bool) or not isinstance(value, Real):
                raise DpnbError(f"RangeInitializer expects {what} to be a number, got {value!r}")
        self.start, self.step = start, step

    def __repr__(self) -> str:
        return f"RangeInitializer({self.start!r}, {self.step!r})"

    def __call__(self, shape: Sequence[int]) -> np.ndarray:
        shape = tuple(shape)
        if not shape:
            raise DpnbError("RangeInitializer counts along the last axis, so it needs a shape "
                            "with at least one axis; got the scalar shape ()")
        integral = all(isinstance(x, Integral) for x in (self.start, self.step))
        dtype = np.int64 if integral else np.float64
        row = self.start + self.step * np.arange(shape[-1], dtype=dtype)
        return np.broadcast_to(row.astype(dtype), shape).copy()


class OrthogonalInitializer(_RandomInitializer):
    """A random orthogonal matrix times ``gain`` (Saxe et al.), float32 as in nnabla:
    the array viewed as ``shape[0]`` rows of ``prod(shape[1:])`` has orthonormal rows,
    or orthonormal columns where there are more rows than columns."""

    def __init__(self, gain: float = 1.0, rng=None):
        super().__init__(rng)
        if isinstance(gain, bool) or not isinstance(gain, Real):
            raise DpnbError(f"OrthogonalInitializer expects gain to be a number, got {gain!r}")
        self.gain = gain

    def __repr__(self) -> str:
        return f"OrthogonalInitializer({self.gain!r})"

    def __call__(self, shape: Sequence[int]) -> np.ndarray:
        shape = tuple(shape)
        if not shape:
            raise DpnbError("OrthogonalInitializer makes matrices of shape[0] rows, so it needs "
                            "a shape with at least one axis; got the scalar shape ()")
        rows, cols = shape[0], math.prod(shape[1:])
        tall = np.asarray(self._generator().standard_normal(size=(max(rows, cols),
                                                                  min(rows, cols))))
        q, r = np.linalg.qr(tall)
        q *= np.where(np.diag(r) < 0, -1.0, 1.0)  # the sign convention that makes q Haar-uniform
        matrix = q if rows >= cols else q.T
        return (self.gain * matrix).reshape(shape).astype(np.float32)


class WeightNormalizationScaleInitializer(BaseInitializer):
    """The initial scale ``g`` of weight normalization: for each index along ``dim`` of
    the weight ``w``, ``sqrt(sum of w**2 over the other axes + eps)``, so that the
    normalized weight starts equal to ``w``."""

    def __init__(self, w: Variable, dim: int = 0, eps: float = 1e-12):
        if not isinstance(w, Variable):
            raise DpnbError(f"WeightNormalizationScaleInitializer expects w to be the weight "
                            f"nn.Variable, got {type(w).__name__}")
        if isinstance(dim, bool) or not isinstance(dim, Integral) or not 0 <= dim < w.ndim:
            raise DpnbError(f"WeightNormalizationScaleInitializer expects dim in [0, {w.ndim}) "
                            f"for a weight of shape {w.shape}, got {dim!r}; nnabla sums over "
                            "every axis for other values, which is no per-kernel norm")
        self.w, self.dim, self.eps = w, int(dim), eps

    def __repr__(self) -> str:
        return (f"WeightNormalizationScaleInitializer(w of shape {self.w.shape}, dim={self.dim}, "
                f"eps={self.eps!r})")

    def __call__(self, shape: Sequence[int]) -> np.ndarray:
        shape = tuple(shape)
        w = to_module(self.w.d, np)
        count = w.shape[self.dim]
        if math.prod(shape) != count:
            raise DpnbError(f"WeightNormalizationScaleInitializer gives one scale per index "
                            f"along dim {self.dim} of the weight of shape {w.shape}, so "
                            f"{count} values, but shape {shape} was asked for; create the "
                            f"scale with shape ({count},)")
        axes = tuple(a for a in range(w.ndim) if a != self.dim)
        squares = np.sum(np.square(w, dtype=np.float64), axis=axes)
        return np.sqrt(squares + self.eps).astype(w.dtype).reshape(shape)


def _kernel_size(kernel: Sequence[int]) -> np.float64:
    """K, the number of kernel elements (1 for an empty kernel)."""
    return np.prod(kernel, dtype=np.float64)


def calc_uniform_lim_glorot(inmaps: float, outmaps: float,
                            kernel: Sequence[int] = (1, 1)) -> tuple[np.float64, np.float64]:
    """Glorot's uniform limits ``(-b, b)``, ``b = sqrt(6 / (K * (inmaps + outmaps)))`` with
    K the product of the kernel sizes, as nnabla defines them (NumPy float64 values)."""
    b = np.sqrt(6.0 / (_kernel_size(kernel) * (inmaps + outmaps)))
    return -b, b


def calc_normal_std_glorot(inmaps: float, outmaps: float,
                           kernel: Sequence[int] = (1, 1)) -> np.float64:
    """Glorot's standard deviation ``sqrt(2 / (K * (inmaps + outmaps)))`` (nnabla's)."""
    return np.sqrt(2.0 / (_kernel_size(kernel) * (inmaps + outmaps)))


def calc_normal_std_he_forward(inmaps: float, outmaps: float,
                               kernel: Sequence[int] = (1, 1)) -> np.float64:
    """He's standard deviation for the forward pass, ``sqrt(2 / (K * inmaps))`` (nnabla's)."""
    return np.sqrt(2.0 / (_kernel_size(kernel) * inmaps))


def calc_normal_std_he_backward(inmaps: float, outmaps: float,
                                kernel: Sequence[int] = (1, 1)) -> np.float64:
    """He's standard deviation for the backward pass, ``sqrt(2 / (K * outmaps))`` (nnabla's)."""
    return np.sqrt(2.0 / (_kernel_size(kernel) * outmaps))
