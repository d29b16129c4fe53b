"""Named parameters: scopes, creation in flat storage, listing, saving and loading."""
from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from .context import get_current_context, to_module
from .errors import DpnbError
from .fileio import load_arrays, save_arrays
from .graph import Variable
from .storage import clear_storages, storage_for

_parameters: "OrderedDict[str, Variable]" = OrderedDict()
_scope: list[str] = []
_NEED_GRAD_KEY = "__need_grad__"


@contextlib.contextmanager
def parameter_scope(name: str) -> Iterator[None]:
    """Prefix the names of parameters created or listed inside the block with ``name/``."""
    if not name or "/" in name.strip("/"):
        raise DpnbError(f"parameter_scope needs one non-empty name without '/', got {name!r}; "
                        "nest scopes for deeper paths")
    _scope.append(name.strip("/"))
    try:
        yield
    finally:
        _scope.pop()


def get_current_parameter_scope() -> str:
    return "/".join(_scope)


def _full_name(name: str) -> str:
    return "/".join(_scope + [name])


def get_parameter_or_create(name: str, shape: Sequence[int] | None = None,
                            initializer: Callable | np.ndarray | None = None,
                            need_grad: bool = True, as_need_grad: bool | None = None) -> Variable:
    """The parameter ``name`` of the current scope, created (in flat storage) if missing.

    ``initializer`` is called with the shape (an nnabla initializer) or is an
    array; without one the parameter starts at zero.  ``as_need_grad`` returns
    a view of the parameter with that ``need_grad`` (used by ``fix_parameters``)."""
    full = _full_name(name)
    param = _parameters.get(full)
    if param is None:
        if shape is None:
            raise DpnbError(f"parameter {full!r} does not exist and no shape was given to create it")
        shape = tuple(int(s) for s in shape)
        initial = _initial_value(full, shape, initializer)
        ctx = get_current_context()
        param = Variable(shape, need_grad=need_grad, dtype=ctx.dtype)
        param.data.owner = full
        param.grad.owner = f"gradient of {full}"
        storage_for(ctx.dtype, ctx.xp, trainable=need_grad).add(param, to_module(initial, ctx.xp))
        _parameters[full] = param
    elif shape is not None and tuple(shape) != param.shape:
        raise DpnbError(f"parameter {full!r} exists with shape {param.shape}, but shape "
                        f"{tuple(shape)} was asked for; use another parameter_scope or "
                        "nn.clear_parameters()")
    if as_need_grad is not None and as_need_grad != param.need_grad:
        view = param.unlinked()
        view.need_grad = as_need_grad
        return view
    return param


def _initial_value(name: str, shape: tuple[int, ...], initializer) -> np.ndarray:
    if initializer is None:
        return np.zeros(shape)
    value = initializer(shape) if callable(initializer) else initializer
    if tuple(np.shape(value)) != shape:
        raise DpnbError(f"the initializer of {name!r} gave shape {tuple(np.shape(value))}, "
                        f"expected {shape}")
    return value


def set_parameter(name: str, param: Variable) -> None:
    """Register an existing variable as parameter ``name`` of the current scope (outside flat storage)."""
    _parameters[_full_name(name)] = param


def get_parameters(params: dict | None = None, path: str | None = None,
                   grad_only: bool = True) -> "OrderedDict[str, Variable]":
    """Parameters under the current scope (or ``path``), in creation order, named relative to it."""
    prefix = path if path is not None else get_current_parameter_scope()
    prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
    source = _parameters if params is None else params
    return OrderedDict((name[len(prefix):], v) for name, v in source.items()
                       if name.startswith(prefix) and (v.need_grad or not grad_only))


def clear_parameters() -> None:
    """Forget every parameter and start the flat storage afresh."""
    _parameters.clear()
    clear_storages()


def save_parameters(path: str | os.PathLike, params: dict | None = None) -> None:
    """Write all parameters (or ``params``) to ``path`` as .npz, atomically."""
    params = _parameters if params is None else params
    arrays = {name: to_module(v.d, np) for name, v in params.items()}
    arrays[_NEED_GRAD_KEY] = np.array([name for name, v in params.items() if v.need_grad], dtype=str)
    save_arrays(path, arrays)


def load_parameters(path: str | os.PathLike) -> None:
    """Load parameters saved by ``save_parameters`` into the current scope.

    Existing parameters are overwritten in place (their shapes must match);
    missing ones are created."""
    arrays = load_arrays(path, "parameter")
    if _NEED_GRAD_KEY not in arrays:
        raise DpnbError(f"parameter file {os.fspath(path)!r} has no {_NEED_GRAD_KEY!r} entry: "
                        "it was not written by dpnb.save_parameters")
    need_grad = set(arrays.pop(_NEED_GRAD_KEY).tolist())
    for name, value in arrays.items():
        existing = _parameters.get(_full_name(name))
        if existing is not None and existing.shape != value.shape:
            raise DpnbError(f"parameter {name!r} in {os.fspath(path)!r} has shape {value.shape}, "
                            f"but the network's has shape {existing.shape}; the file belongs "
                            "to a different network")
    for name, value in arrays.items():
        param = get_parameter_or_create(name, value.shape, value, need_grad=name in need_grad)
        param.d = value
