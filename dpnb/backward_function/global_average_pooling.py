"""nnabla's ``nnabla.backward_function.global_average_pooling``."""
from __future__ import annotations

from .. import functions as F
from . import LinearDataGrad


class GlobalAveragePoolingDataGrad(LinearDataGrad):
    """The gradient of F.global_average_pooling's data."""

    forward = staticmethod(F.global_average_pooling)
