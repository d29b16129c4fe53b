"""nnabla's parameter initializers: callables ``init(shape) -> numpy.ndarray``.

They return float64 NumPy arrays; ``nn.get_parameter_or_create`` casts them to
the context's dtype and device.  ``rng=None`` draws from ``dpnb.random.prng``,
looked up at call time, so ``nn.seed(n)`` decides the values and every rank
starts from the same parameters."""
from __future__ import annotations

from collections.abc import Sequence
from numbers import Real

import numpy as np

from . import random as _random
from .errors import DpnbError

__all__ = [
    "BaseInitializer", "UniformInitializer", "NormalInitializer", "ConstantInitializer",
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
