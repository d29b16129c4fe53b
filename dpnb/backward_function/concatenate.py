"""nnabla's ``nnabla.backward_function.concatenate``."""
from __future__ import annotations

from .. import functions as F
from ..functions.graph_module import LinearBackward
from ..graph import Variable
from . import GradFunction


class ConcatenateDataGrad(GradFunction):
    """The gradients of F.concatenate's inputs (of the shapes ``xshapes``): the pieces of
    the output gradient."""

    forward = staticmethod(F.concatenate)

    def _apply(self, gy: Variable):
        of = self._function_on(*self.xshapes)
        return LinearBackward(of, tuple(range(len(self.xshapes))))(gy)
