"""nnabla's ``nnabla.backward_function.slice``."""
from __future__ import annotations

from .. import functions as F
from . import LinearDataGrad


class SliceDataGrad(LinearDataGrad):
    """The gradient of F.slice's data."""

    forward = staticmethod(F.slice)
