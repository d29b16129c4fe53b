"""nnabla's ``nnabla.backward_function.convolution``."""
from __future__ import annotations

from .. import functions as F
from . import BilinearDataGrad, BilinearFilterGrad


class ConvolutionDataGrad(BilinearDataGrad):
    """The gradient of F.convolution's data."""

    forward = staticmethod(F.convolution)


class ConvolutionFilterGrad(BilinearFilterGrad):
    """The gradient of F.convolution's weight."""

    forward = staticmethod(F.convolution)
