"""The embedding layer: PF.embed and its lookup table."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import functions as F
from ..errors import DpnbError
from ..graph import Variable
from ..initializer import UniformInitializer
from ..parameter import get_parameter_or_create
from ._common import applied, scope

__all__ = ["embed"]


def embed(inp: Variable, n_inputs: int, n_features: int, initializer: Callable | None = None,
          fix_parameters: bool = False, apply_w: Callable | None = None,
          name: str | None = None) -> Variable:
    """Embedding: integer ids looked up in the table ``embed/W`` (n_inputs, n_features),
    uniform in [-sqrt(3), sqrt(3)) by default (unit variance), as nnabla."""
    with scope(name, "embed"):
        if not isinstance(inp, Variable):
            raise DpnbError(f"PF.embed expects an nn.Variable of integer ids, got "
                            f"{type(inp).__name__}")
        for label, value in (("n_inputs", n_inputs), ("n_features", n_features)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise DpnbError(f"PF.embed: {label} must be an int >= 1, got {value!r}")
        if initializer is None:
            initializer = UniformInitializer((-np.sqrt(3.0), np.sqrt(3.0)))
        w = get_parameter_or_create("W", (int(n_inputs), int(n_features)), initializer, True,
                                    not fix_parameters)
        return F.embed(inp, applied("embed", "apply_w", apply_w, w))
