"""nnabla's ``nnabla.backward_function.affine``."""
from __future__ import annotations

from .. import functions as F
from . import BilinearDataGrad, BilinearFilterGrad


class AffineDataGrad(BilinearDataGrad):
    """The gradient of F.affine's data."""

    forward = staticmethod(F.affine)


class AffineFilterGrad(BilinearFilterGrad):
    """The gradient of F.affine's weight."""

    forward = staticmethod(F.affine)
