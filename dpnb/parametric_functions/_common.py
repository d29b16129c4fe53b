"""What the parametric functions share: nnabla's scoping, input checks and the
weight-and-bias pair most layers own."""
from __future__ import annotations

from collections.abc import Callable

from ..errors import DpnbError
from ..graph import Variable
from ..initializer import ConstantInitializer
from ..parameter import get_parameter_or_create, parameter_scope


def scope(name: str | None, scope_name: str):
    """nnabla's scoping of a parametric function: ``scope_name``, under ``name`` when given."""
    return parameter_scope(scope_name if name is None else f"{name}/{scope_name}")


def check_input(fn_name: str, inp, min_ndim: int) -> None:
    if not isinstance(inp, Variable):
        raise DpnbError(f"PF.{fn_name} expects an nn.Variable input, got {type(inp).__name__}")
    if inp.ndim < min_ndim:
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
