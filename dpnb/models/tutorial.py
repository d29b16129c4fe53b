"""The small network of the data-parallel tutorial: one convolution, one affine layer."""
from __future__ import annotations

from collections.abc import Callable

from .. import functions as F
from .. import parametric_functions as PF
from ..graph import Variable


def tutorial_network(x: Variable, y: Variable, n_class: int = 2, maps: int = 1,
                     kernel: tuple[int, int] = (3, 3), pad: tuple[int, int] = (1, 1),
                     stride: tuple[int, int] = (1, 1), w_init: Callable | None = None) -> Variable:
    """Mean softmax cross-entropy of ``PF.affine(PF.convolution(x))`` against labels ``y``."""
    h = PF.convolution(x, maps, kernel, pad, stride, w_init=w_init)
    pred = PF.affine(h, n_class, w_init=w_init)
    return F.mean(F.softmax_cross_entropy(pred, y))
