"""nnabla's ``nnabla.backward_function.pad``."""
from __future__ import annotations

from .. import functions as F
from . import LinearDataGrad


def _pad_linear(x, pad_width, mode="constant", constant_value=0.0):
    """F.pad's linear part: its constant has no gradient, so its gradient's adjoint pads
    with zeros."""
    return F.pad(x, pad_width, mode, 0.0)


class PadDataGrad(LinearDataGrad):
    """The gradient of F.pad's data."""

    forward = staticmethod(_pad_linear)
