"""Min-max quantization with nnabla's parameters: the levels ``ql_min`` and ``ql_max``
(fixed) and the range ``qr_min`` and ``qr_max`` (learned, or kept from x by forward),
in the scope ``min_max_quantize``."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import functions as F
from ..graph import Variable
from ..initializer import ConstantInitializer
from ..parameter import get_parameter_or_create
from ._common import check_input, scope

__all__ = ["min_max_quantize"]


def _levels(name: str, value, ndim: int):
    """A level given as a number becomes a fixed parameter of shape (1,) * ndim."""
    if isinstance(value, (int, float)):
        return get_parameter_or_create(name, (1,) * ndim, np.full((1,) * ndim, value),
                                       False, False)
    return value


def min_max_quantize(x: Variable, ql_min=0, ql_max=255, decay: float = 0.999,
                     x_min_max: bool = False, ema: bool = False, ste_fine_grained: bool = True,
                     eps: float = 0.01, qr_min_init: Callable | np.ndarray | None = None,
                     qr_max_init: Callable | np.ndarray | None = None,
                     fix_parameters: bool = False, outputs=None, name: str | None = None):
    """F.min_max_quantize with ``min_max_quantize/qr_min`` and ``qr_max`` (ql_min's shape,
    -6 and 6 by default; stored as trainable unless both ``x_min_max`` and ``ema``) and
    ``ql_min``/``ql_max`` where those are numbers."""
    with scope(name, "min_max_quantize"):
        check_input("min_max_quantize", x, 0)
        ql_min = _levels("ql_min", ql_min, x.ndim)
        ql_max = _levels("ql_max", ql_max, x.ndim)
        trainable = not (x_min_max and ema)
        qr_min = get_parameter_or_create(
            "qr_min", ql_min.shape,
            ConstantInitializer(-6.0) if qr_min_init is None else qr_min_init,
            trainable, not fix_parameters)
        qr_max = get_parameter_or_create(
            "qr_max", ql_min.shape,
            ConstantInitializer(6.0) if qr_max_init is None else qr_max_init,
            trainable, not fix_parameters)
        return F.min_max_quantize(x, qr_min, qr_max, ql_min, ql_max, decay, x_min_max, ema,
                                  ste_fine_grained, eps, outputs=outputs)
