"""nnabla's ``nnabla.backward_functions``: ``registry`` maps a function's type name to its
backward function, ``register`` adds one (for a ``PythonFunction``).

A backward function takes nnabla's arguments ``(grad_outputs, inputs, input_shapes,
outputs, output_shapes, *args, **info_args)`` and returns the inputs' gradients as
variables (None where an input gets none), as nnabla's do: the one variable of a
function with one input, else a list.  dpnb keeps no table of them: each one is the
function's own graph backward (``dpnb.functions.graph_module``), for the function that
made ``outputs`` or, where they come from elsewhere, one made from the type name and
``info_args``; what ``register`` adds takes precedence, in ``nn.grad`` too."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from . import functions as F
from .errors import DpnbError
from .formats.function_messages import function_instance
from .formats.function_specs import exported_types, spec_of_type
from .functions.graph_module import custom_backwards, graph_backward, made_type_names
from .graph import Function, Variable
from .ndarray import NdArray

__all__ = ["registry", "register"]

BackwardFunction = Callable[..., list]

_registered = custom_backwards  # what nn.grad consults too


def register(func_name: str, func: BackwardFunction) -> None:
    """Make ``func`` the backward function of the function type ``func_name``."""
    _registered[func_name] = func


def registered(func_name: str) -> BackwardFunction | None:
    """The backward function ``register`` gave ``func_name``, or None."""
    return _registered.get(func_name)


class _Registry(Mapping):
    """Type name -> backward function, for every function type dpnb has, those its graph
    backwards made (``ConvolutionDataGrad`` ...), and those registered."""

    def __getitem__(self, type_name: str) -> BackwardFunction:
        if type_name in _registered:
            return _registered[type_name]
        if type_name not in exported_types() and type_name not in made_type_names:
            raise KeyError(type_name)
        return _backward_function(type_name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @staticmethod
    def _names() -> dict:
        return dict.fromkeys([*exported_types(), *sorted(made_type_names), *_registered])


registry = _Registry()


def _backward_function(type_name: str) -> BackwardFunction:
    def backward(grad_outputs, inputs, input_shapes=None, outputs=None, output_shapes=None,
                 *args, **info_args) -> list[Variable | None]:
        info_args.update(_named_arguments(type_name, args))
        fn = _function_of(type_name, list(inputs), outputs, info_args)
        gys = [_as_variable(g, y) for g, y in zip(_listed(grad_outputs), fn.outputs)]
        grads = graph_backward(fn, fn.inputs, fn.outputs, gys, [x.need_grad for x in fn.inputs])
        return grads[0] if len(grads) == 1 else grads
    backward.__name__ = backward.__qualname__ = f"{type_name}Backward"
    return backward


def _named_arguments(type_name: str, args: tuple) -> dict:
    """The function's arguments given by position after the five of every backward
    function (nnabla's ``registry['Dropout'](..., p, seed)``), by their names."""
    if not args:
        return {}
    names = spec_of_type(type_name).params
    if len(args) > len(names):
        raise DpnbError(f"{type_name}'s backward function takes at most {len(names)} arguments "
                        f"after output_shapes ({', '.join(names) or 'none'}), got {len(args)}")
    return dict(zip(names, args))


def _listed(values) -> list:
    return list(values) if isinstance(values, (list, tuple)) else [values]


def _function_of(type_name: str, inputs: list[Variable], outputs, info_args: dict) -> Function:
    """The function of ``outputs`` where it is of ``type_name`` on ``inputs``, else the
    newest such function already applied to ``inputs`` (so that a function drawing random
    numbers or updating statistics is not run a second time); else a new one made from
    the type name and ``info_args``, unless it draws random numbers (its gradient needs
    the draw of the function it belongs to)."""
    given = _listed(outputs)[0] if outputs else None
    candidates = [given.parent] if isinstance(given, Variable) else []
    if inputs and isinstance(inputs[0], Variable):
        candidates += inputs[0].function_references
    for fn in candidates:
        if (isinstance(fn, Function) and _type_name(fn) == type_name
                and len(fn.inputs) == len(inputs)
                and all(a is b for a, b in zip(fn.inputs, inputs))):
            return fn
    if getattr(spec_of_type(type_name).cls, "draws_random_numbers", False):
        raise DpnbError(f"{type_name} draws random numbers, and its gradient needs the draw "
                        f"of the {type_name} it belongs to; none takes these inputs: apply "
                        "the function to them first (y = F.dropout(x, p, seed))")
    built = function_instance(type_name, **info_args)(*inputs)
    first = built[0] if isinstance(built, tuple) else built
    fn = first.parent
    if not isinstance(fn, Function) or _type_name(fn) != type_name:
        raise DpnbError(f"{type_name}: dpnb builds it from other functions, so it has no "
                        "backward function of its own; differentiate it with nn.grad")
    return fn


def _type_name(fn: Function) -> str:
    try:
        return fn.info.type_name
    except DpnbError:  # a function with no nnabla form
        return fn.name


def _as_variable(g, y: Variable) -> Variable:
    if g is None:
        return F.constant(0.0, y.shape)
    if isinstance(g, Variable):
        return g
    v = Variable(y.shape, dtype=y.dtype)
    v.d = g.data if isinstance(g, NdArray) else g
    return v
