"""nnabla's ``nnabla.backward_function.embed``."""
from __future__ import annotations

from .. import functions as F
from ..functions.graph_module import LinearBackward
from ..graph import Variable
from . import GradFunction


class EmbedFilterGrad(GradFunction):
    """The gradient of F.embed's weight (of the shape ``wshape``), called on the output
    gradient and the ids."""

    forward = staticmethod(F.embed)

    def _apply(self, gy: Variable, x: Variable) -> Variable:
        return LinearBackward(self._function_on(x, self.wshape), (1,))(gy, x)
