"""nnabla's ``nnabla.backward_function.unpooling``."""
from __future__ import annotations

from .. import functions as F
from . import LinearDataGrad


class UnpoolingDataGrad(LinearDataGrad):
    """The gradient of F.unpooling's data."""

    forward = staticmethod(F.unpooling)
