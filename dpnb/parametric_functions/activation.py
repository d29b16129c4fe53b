"""Parametric activations: PF.prelu and its learned slopes."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import functions as F
from ..functions.base import base_axis_of
from ..graph import Variable
from ..initializer import ConstantInitializer
from ..parameter import get_parameter_or_create
from ._common import check_input, scope

__all__ = ["prelu"]


def prelu(inp: Variable, base_axis: int = 1, shared: bool = True, fix_parameters: bool = False,
          slope_init: Callable | np.ndarray | None = None, name: str | None = None) -> Variable:
    """Parametric ReLU with parameter ``prelu/slope``: one value (``shared``, shape ())
    or one per channel of axis ``base_axis``; 0.25 by default, as nnabla."""
    with scope(name, "prelu"):
        check_input("prelu", inp, 1)
        axis = base_axis_of("PF.prelu", base_axis, inp.ndim)
        shape = () if shared else (inp.shape[axis],)
        slope_init = ConstantInitializer(0.25) if slope_init is None else slope_init
        w = get_parameter_or_create("slope", shape, slope_init, True, not fix_parameters)
        return F.prelu(inp, w, base_axis)
