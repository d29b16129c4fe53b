"""The fully connected layer."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import functions as F
from ..graph import Variable
from ..initializer import UniformInitializer, calc_uniform_lim_glorot
from ..ndarray import as_shape
from ._common import check_input, scope, weight_and_bias

__all__ = ["affine"]


def affine(inp: Variable, n_outmaps: int | Sequence[int], base_axis: int = 1,
           w_init: Callable | np.ndarray | None = None, b_init: Callable | np.ndarray | None = None,
           fix_parameters: bool = False, rng: np.random.RandomState | None = None,
           with_bias: bool = True, apply_w: Callable | None = None,
           apply_b: Callable | None = None, name: str | None = None) -> Variable:
    """Fully connected layer: parameters ``affine/W`` (inputs, *n_outmaps) and
    ``affine/b`` (*n_outmaps), Glorot-uniform and zero by default."""
    with scope(name, "affine"):
        check_input("affine", inp, base_axis + 1)
        outmaps = as_shape(n_outmaps, "affine's n_outmaps")
        inmaps = int(np.prod(inp.shape[base_axis:]))
        if w_init is None:
            w_init = UniformInitializer(calc_uniform_lim_glorot(inmaps, int(np.prod(outmaps))),
                                        rng=rng)
        w, b = weight_and_bias("affine", (inmaps,) + outmaps, outmaps, w_init, b_init,
                                fix_parameters, with_bias, apply_w, apply_b)
        return F.affine(inp, w, b, base_axis)
