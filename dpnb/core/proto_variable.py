"""nnabla's ``nn.ProtoVariable``: a variable of a network definition, which functions,
parametric functions and modules called on it record into graph_def's current network."""
from __future__ import annotations

from .. import functions as F
from ..graph import Variable
from ..ndarray import NdArray
from ..formats import nnabla_pb2
from .proto_initializer import initializer_from_proto, initializer_to_proto


def _proto_operand(x):
    """An nn.Variable or NdArray operand of a ProtoVariable's operator, as a new
    ProtoVariable of its shape (as nnabla); anything else as it is."""
    return ProtoVariable(x.shape) if isinstance(x, (NdArray, Variable)) else x


def _record_operator(x, y, two, scalar):
    """``x`` (op) ``y`` recorded as ``two(x, y)`` where ``y`` is a variable (or becomes
    one), else as ``scalar(x, y)``: the two functions each operator has in nnabla."""
    x, y = _proto_operand(x), _proto_operand(y)
    return two(x, y) if isinstance(y, ProtoVariable) else scalar(x, y)


class ProtoVariable:
    """A variable of a network definition: given to functions, parametric functions or
    modules in place of an nn.Variable, it records them into the current graph_def
    network (nothing is computed).  ``parent`` names the function computing it,
    ``required`` those reading it; ``variable_instance`` is the nn.Variable it stands
    for once the network is built."""

    def __init__(self, shape, name=None, need_grad=False, var_type="Buffer"):
        self.name = name
        self.shape = tuple(shape)
        self.need_grad = need_grad
        self.parent = None
        self.required = []
        self.type = var_type
        self.initializer = None
        self.variable_instance = None
        self.repeat_id = []
        self._proto = None

    def __repr__(self) -> str:
        return f"<ProtoVariable {self.name!r} {self.shape} {self.type}>"

    @property
    def ndim(self) -> int:
        """The number of axes, as an nn.Variable has (dpnb's parametric functions read it)."""
        return len(self.shape)

    def clone(self) -> "ProtoVariable":
        v = ProtoVariable(self.shape, self.name, self.need_grad, self.type)
        v.parent = self.parent
        v.required = list(self.required)
        v.initializer = self.initializer
        v.variable_instance = self.variable_instance
        v.repeat_id = list(self.repeat_id)
        return v

    def to_message(self):
        """This variable as nnabla's ``Variable`` message, from its present state."""
        message = nnabla_pb2.Variable()
        message.name = self.name
        message.type = self.type
        message.repeat_id.extend(self.repeat_id)
        message.shape.dim.extend(int(d) for d in self.shape)
        initializer_to_proto(self.initializer, message)
        return message

    @staticmethod
    def from_message(message, rng) -> "ProtoVariable":
        """The variable of nnabla's ``Variable`` message, with the initializer it names
        (drawing from ``rng``)."""
        v = ProtoVariable(list(message.shape.dim), message.name, message.type == "Parameter",
                          message.type)
        v.initializer = initializer_from_proto(message, rng)
        v.repeat_id = list(message.repeat_id)
        return v

    @property
    def proto(self):
        """nnabla's ``Variable`` message of this variable, made once and then kept (edits
        to it stay, as in nnabla)."""
        if self._proto is None:
            self._proto = self.to_message()
        return self._proto

    # -- operators: they record the function, as nnabla's ProtoVariable does -------
    def __pos__(self):
        return self

    def __neg__(self):
        return F.mul_scalar(self, -1)

    def __add__(x, y):
        return _record_operator(x, y, F.add2, F.add_scalar)

    def __sub__(x, y):
        return _record_operator(x, y, F.sub2, lambda a, b: F.add_scalar(a, -b))

    def __mul__(x, y):
        return _record_operator(x, y, F.mul2, F.mul_scalar)

    def __truediv__(x, y):
        return _record_operator(x, y, F.div2, lambda a, b: F.mul_scalar(a, 1.0 / b))

    def __pow__(x, y, z=None):
        if z is not None:
            return NotImplemented
        return _record_operator(x, y, F.pow2, F.pow_scalar)
