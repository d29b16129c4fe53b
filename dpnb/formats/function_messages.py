"""nnabla's ``Function`` messages (type, inputs, outputs, ``*_param``) and dpnb's
functions: a message made from plain values or from a set-up function, a message's
parameters as a dict, and a message turned into a callable that adds that function
to a dpnb graph, as the writers and readers of network files need."""
from __future__ import annotations

from ..context import Context, context_scope, get_current_context
from ..errors import DpnbError
from ..graph import Function, Variable
from ..graph import auto_forward as eager_mode
from . import nnabla_pb2
from .function_specs import FunctionSpec, spec_of_function, spec_of_type
from .messages import fill_message, message_to_dict


class FunctionInstance:
    """One nnabla function with its parameters set, in a context: calling it on input
    variables adds it to the graph (computing it at once with ``auto_forward``) and
    returns its output, or a tuple of them, as nnabla's function objects do."""

    def __init__(self, ctx: Context | None, spec: FunctionSpec, params: dict):
        self.ctx = ctx if ctx is not None else get_current_context()
        self.spec = spec
        self.params = params

    @property
    def name(self) -> str:
        return self.spec.type_name

    @property
    def arguments(self) -> dict:
        return dict(self.params)

    def __repr__(self) -> str:
        return f"{self.name}({self.params})"

    def __call__(self, *inputs: Variable, n_outputs: int = -1, auto_forward: bool = False):
        for x in inputs:
            if not isinstance(x, Variable):
                raise DpnbError(f"{self.name} takes nn.Variable inputs, got "
                                f"{type(x).__name__}")
        with context_scope(self.ctx), eager_mode(bool(auto_forward)):
            built = self.spec.build(list(inputs), self.params, n_outputs)
        outputs = built if isinstance(built, tuple) else (built,)
        if n_outputs >= 0 and len(outputs) != n_outputs:
            raise DpnbError(f"{self.name} gives {len(outputs)} outputs, but n_outputs="
                            f"{n_outputs} was asked for; the network is inconsistent")
        return built


def function_instance(type_name: str, ctx: Context | None = None, **params) -> FunctionInstance:
    """nnabla's function ``type_name`` (``"Affine"``) with the ``*_param`` fields given
    and nnabla's defaults for the others, as ``nnabla.function.<Type>(ctx, ...)`` makes."""
    spec = spec_of_type(type_name)
    values = {}
    if spec.param_field is not None:
        defaults = getattr(nnabla_pb2.Function(), spec.param_field)
        values = message_to_dict(defaults)
        unknown = sorted(set(params) - set(values))
        if unknown:
            raise DpnbError(f"{type_name} has no parameters {unknown}; its parameters are "
                            f"{sorted(values)}")
        values.update({k: list(v) if isinstance(v, tuple) else v for k, v in params.items()})
    elif params:
        raise DpnbError(f"{type_name} takes no parameters, got {sorted(params)}")
    return FunctionInstance(ctx, spec, values)


def create_function_instance(ctx: Context | None, f) -> FunctionInstance:
    """The function of a ``Function`` message (nnabla's type and ``*_param``) in ``ctx``."""
    spec = spec_of_type(f.type)
    return FunctionInstance(ctx, spec, function_params(f))


def function_params(f) -> dict:
    """The ``*_param`` fields of a ``Function`` message as a dict (empty for a type
    that has none)."""
    field = spec_of_type(f.type).param_field
    return {} if field is None else message_to_dict(getattr(f, field))


def function_message(name: str, type_name: str, inputs: list[str], outputs: list[str],
                     repeat_id: list[str], params: dict):
    """nnabla's ``Function`` message of a function ``type_name`` with ``params``."""
    message = nnabla_pb2.Function()
    message.name, message.type = name, type_name
    message.input.extend(inputs)
    message.output.extend(outputs)
    message.repeat_id.extend(repeat_id)
    field = spec_of_type(type_name).param_field
    if field is not None:
        fill_message(getattr(message, field), params)
    return message


def exported_params(fn: Function) -> tuple[str, dict]:
    """nnabla's type of a set-up function and its ``*_param`` fields, every one of them
    (those the function does not set at the message's defaults)."""
    spec = spec_of_function(fn)
    if spec.param_field is None:
        return spec.type_name, {}
    message = getattr(nnabla_pb2.Function(), spec.param_field)
    fill_message(message, spec.export(fn))
    return spec.type_name, message_to_dict(message)
