"""nnabla's ``nnabla.backward_function.transpose``."""
from __future__ import annotations

from .. import functions as F
from . import LinearDataGrad


class TransposeDataGrad(LinearDataGrad):
    """The gradient of F.transpose's data."""

    forward = staticmethod(F.transpose)
