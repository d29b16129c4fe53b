"""nnabla's ``nnabla.backward_function`` modules, as far as nnabla's tests reach into them:
the classes of the gradients of linear and bilinear functions (``SliceDataGrad``,
``ConvolutionDataGrad``, ``ConvolutionFilterGrad`` ...), made with the forward
function's arguments and called on the output gradient (and the other operand).

Each is the function dpnb's own graph backward makes (``graph_module.LinearBackward``,
``BilinearPart``), so they are differentiable to any order; the shapes nnabla's
classes are told (``xshape``, ``wshape``) give the operand they do not receive.

``BatchNormalizationBackward`` and ``FusedBatchNormalizationBackward`` (the gradients of
the normalizations, called on the output gradient and the forward's inputs) are
``graph_module.GraphFunction``s: their graph is the normalization's composite
differentiated, evaluated as one function and differentiated again for higher orders."""
from __future__ import annotations

from collections.abc import Callable

from ..context import Context, context_scope
from ..functions.graph_module import BilinearPart, LinearBackward
from ..graph import Variable, auto_forward


class GradFunction:
    """Base of nnabla's ``<Function>DataGrad`` / ``FilterGrad`` classes: ``forward``
    builds the forward function on variables and its arguments."""

    forward: Callable[..., Variable]
    unused_inputs: tuple = ()  # given as None between the operands and the arguments (a bias)

    def __init__(self, ctx: Context | None, *args, **kwargs):
        self.ctx, self.args, self.kwargs = ctx, args, kwargs
        self.xshape = self.wshape = self.xshapes = None

    def _function_on(self, *operands: Variable):
        """The forward function on stand-ins of the operands' shapes (never computed)."""
        with auto_forward(False):
            stand_ins = [Variable(v.shape, dtype=v.dtype) if isinstance(v, Variable)
                         else Variable(v) for v in operands]
            return type(self).forward(*stand_ins, *self.unused_inputs, *self.args,
                                      **self.kwargs).parent

    def __call__(self, *inputs: Variable, **kwargs) -> Variable:
        scope = context_scope(self.ctx) if self.ctx is not None else _nothing()
        with scope:
            return self._apply(*inputs)

    def _apply(self, *inputs: Variable) -> Variable:
        raise NotImplementedError


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class LinearDataGrad(GradFunction):
    """The gradient of a function linear in its one input: called on the output gradient."""

    def _apply(self, gy: Variable) -> Variable:
        return LinearBackward(self._function_on(self.xshape))(gy)


class BilinearDataGrad(GradFunction):
    """The gradient of a bilinear function's data: called on the output gradient and the
    weight."""

    unused_inputs = (None,)  # the bias

    def _apply(self, gy: Variable, w: Variable) -> Variable:
        return BilinearPart(self._function_on(self.xshape, w), 0)(gy, w)


class BilinearFilterGrad(GradFunction):
    """The gradient of a bilinear function's weight: called on the output gradient and the
    data."""

    unused_inputs = (None,)  # the bias

    def _apply(self, gy: Variable, x: Variable) -> Variable:
        return BilinearPart(self._function_on(x, self.wshape), 1)(gy, x)
