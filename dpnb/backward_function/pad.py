"""nnabla's ``nnabla.backward_function.pad``."""
from __future__ import annotations

from .. import functions as F
from . import LinearDataGrad


class PadDataGrad(LinearDataGrad):
    """The gradient of F.pad's data."""

    forward = staticmethod(F.pad)
