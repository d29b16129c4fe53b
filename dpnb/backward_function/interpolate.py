"""nnabla's ``nnabla.backward_function.interpolate``."""
from __future__ import annotations

from ..functions.pooling import interpolate
from . import LinearDataGrad


def _interpolate_to_size(x, output_size, *args, **kwargs):
    """F.interpolate to ``output_size``, as nnabla's InterpolateDataGrad takes it."""
    return interpolate(x, None, output_size, *args, **kwargs)


class InterpolateDataGrad(LinearDataGrad):
    """The gradient of F.interpolate's data."""

    forward = staticmethod(_interpolate_to_size)
