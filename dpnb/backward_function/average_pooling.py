"""nnabla's ``nnabla.backward_function.average_pooling``."""
from __future__ import annotations

from .. import functions as F
from . import LinearDataGrad


class AveragePoolingDataGrad(LinearDataGrad):
    """The gradient of F.average_pooling's data."""

    forward = staticmethod(F.average_pooling)
