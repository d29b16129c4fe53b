"""nnabla's ``nnabla.backward_function.deconvolution``."""
from __future__ import annotations

from .. import functions as F
from . import BilinearDataGrad, BilinearFilterGrad


class DeconvolutionDataGrad(BilinearDataGrad):
    """The gradient of F.deconvolution's data."""

    forward = staticmethod(F.deconvolution)


class DeconvolutionFilterGrad(BilinearFilterGrad):
    """The gradient of F.deconvolution's weight."""

    forward = staticmethod(F.deconvolution)
