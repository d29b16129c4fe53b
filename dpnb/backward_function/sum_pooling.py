"""nnabla's ``nnabla.backward_function.sum_pooling``."""
from __future__ import annotations

from .. import functions as F
from . import LinearDataGrad


class SumPoolingDataGrad(LinearDataGrad):
    """The gradient of F.sum_pooling's data."""

    forward = staticmethod(F.sum_pooling)
