"""What the parametric functions share: nnabla's scoping (and its decorator for
parametric functions that users write), input checks and the weight-and-bias pair
most layers own."""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence

from ..errors import DpnbError
from ..graph import Variable, is_recorded
from ..ndarray import NdArray
from ..initializer import ConstantInitializer
from ..parameter import get_parameter_or_create, parameter_scope


def scope(name: str | None, scope_name: str):
    """nnabla's scoping of a parametric function: ``scope_name``, under ``name`` when given."""
    return parameter_scope(scope_name if name is None else f"{name}/{scope_name}")


def parametric_function_api(scope_name: str | None = None,
                            param_desc: Sequence[tuple] | None = None) -> Callable:
    """nnabla's decorator for parametric functions: the function (which must take
    ``fix_parameters``) runs under the parameter scope ``scope_name`` (default: its own
    name) and gains a last argument ``name`` that puts that scope under ``name``.
    ``param_desc`` lists (name, description, shape, need_grad) of the parameters it
    registers, for its docstring."""
    def decorate(func: Callable) -> Callable:
        signature = inspect.signature(func)
        if "fix_parameters" not in signature.parameters:
            raise DpnbError(f"parametric_function_api: {func.__name__}{signature} must take "
                            "fix_parameters, as every parametric function does")
        if "name" in signature.parameters:
            raise DpnbError(f"parametric_function_api: {func.__name__}{signature} already takes "
                            "name, which the decorator adds; rename that argument")
        own_scope = scope_name or func.__name__
        params = list(signature.parameters.values())
        keyword_only = any(p.kind in (p.VAR_POSITIONAL, p.KEYWORD_ONLY) for p in params)
        named = inspect.Parameter("name", inspect.Parameter.KEYWORD_ONLY if keyword_only
                                  else inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
        at = len(params) - (bool(params) and params[-1].kind is inspect.Parameter.VAR_KEYWORD)
        with_name = signature.replace(parameters=params[:at] + [named] + params[at:])

        @functools.wraps(func)
        def parametric(*args, **kwargs):
            bound = with_name.bind(*args, **kwargs)
            name = bound.arguments.pop("name", None)
            with scope(name, own_scope):
                return func(*bound.args, **bound.kwargs)

        parametric.__signature__ = with_name
        if param_desc:
            lines = [f"    * {d[0]} (need_grad={d[3]}): {d[1]} (shape: {d[2]})" for d in param_desc]
            parametric.__doc__ = (func.__doc__ or "") + (
                f"\n\n    Parameters registered in the scope ``{own_scope}``:\n\n"
                + "\n".join(lines) + "\n")
        return parametric

    return decorate


def check_input(fn_name: str, inp, min_ndim: int) -> None:
    """A parametric function's input: a variable, an NdArray (computed at once, as nnabla
    does) or a graph_def ProtoVariable, of at least ``min_ndim`` dimensions."""
    if not isinstance(inp, (Variable, NdArray)) and not is_recorded(inp):
        raise DpnbError(f"PF.{fn_name} expects an nn.Variable or NdArray input, got "
                        f"{type(inp).__name__}")
    if len(inp.shape) < min_ndim:
        raise DpnbError(f"PF.{fn_name} expects an input of at least {min_ndim} dimensions, "
                        f"got shape {inp.shape}")


def applied(fn_name: str, label: str, apply: Callable | None, var: Variable) -> Variable:
    """``apply(var)`` (e.g. a weight normalization) where ``apply`` is given."""
    if apply is None:
        return var
    if not callable(apply):
        raise DpnbError(f"PF.{fn_name}: {label} must be a callable taking and returning an "
                        f"nn.Variable, got {type(apply).__name__}")
    return apply(var)


def weight_and_bias(fn_name: str, w_shape: tuple, b_shape: tuple, w_init, b_init,
                     fix_parameters: bool, with_bias: bool, apply_w, apply_b) -> tuple:
    """Parameters ``W`` and (with ``with_bias``) ``b``, zero-initialized by default,
    passed through ``apply_w`` / ``apply_b``."""
    w = get_parameter_or_create("W", w_shape, w_init, True, not fix_parameters)
    w = applied(fn_name, "apply_w", apply_w, w)
    if not with_bias:
        return w, None
    b_init = ConstantInitializer() if b_init is None else b_init
    b = get_parameter_or_create("b", b_shape, b_init, True, not fix_parameters)
    return w, applied(fn_name, "apply_b", apply_b, b)
