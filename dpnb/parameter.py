"""Named parameters, held as nnabla holds them: a tree of scope dicts (name ->
parameter, or name -> nested scope), the parameters' arrays living in flat storage;
creation, listing, saving and loading."""
from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from .context import get_current_context, to_module
from .errors import DpnbError
from .formats import nnabla_pb2, parameter_files
from .formats.files import describe
from .graph import Variable, get_no_grad, no_grad  # noqa: F401 (nnabla.parameter.no_grad)
from .ndarray import as_shape
from .storage import clear_storages, storage_for

Scope = OrderedDict[str, object]  # name -> Variable, or name -> nested Scope

_root: Scope = OrderedDict()
_current: Scope = _root
_current_path: tuple[str, ...] = ()


def _parts(name: str, what: str) -> list[str]:
    """The non-empty '/'-separated parts of ``name``."""
    if not isinstance(name, str):
        raise DpnbError(f"{what} must be a str such as 'conv1' or 'net/conv1', "
                        f"got {type(name).__name__} {name!r}")
    return [part for part in name.split("/") if part]


def _child(scope: Scope, part: str, path: tuple[str, ...]) -> Scope:
    """The sub-scope ``part`` of ``scope``, created if missing."""
    sub = scope.setdefault(part, OrderedDict())
    if not isinstance(sub, dict):
        raise DpnbError(f"{'/'.join(path + (part,))!r} is a parameter, not a parameter scope; "
                        "choose another scope name")
    return sub


@contextlib.contextmanager
def parameter_scope(name: str, scope: dict | None = None) -> Iterator[Scope]:
    """Create or list parameters under ``name`` (``'a/b'`` nests ``b`` in ``a``) inside
    the block, which gets the scope's dict; ``scope`` starts from that dict instead of
    the current scope, as nnabla does."""
    global _current, _current_path
    if scope is not None and not isinstance(scope, dict):
        raise DpnbError(f"parameter_scope's scope must be a dict (e.g. an OrderedDict that "
                        f"holds parameters), got {type(scope).__name__}")
    target, path = (_current, _current_path) if scope is None else (scope, ())
    for part in _parts(name, "parameter_scope's name"):
        target = _child(target, part, path)
        path += (part,)
    previous = _current, _current_path
    _current, _current_path = target, path
    try:
        yield target
    finally:
        _current, _current_path = previous


def get_current_parameter_scope() -> Scope:
    """The current scope's dict (name -> parameter or nested scope dict), as in nnabla."""
    return _current


def _located(key: str) -> tuple[Scope, str, tuple[str, ...]]:
    """The scope holding ``key`` (created if missing), its last part, and its path."""
    *scopes, leaf = _parts(key, "a parameter name") or [""]
    if not leaf:
        raise DpnbError(f"a parameter name must not be empty, got {key!r}")
    scope, path = _current, _current_path
    for part in scopes:
        scope = _child(scope, part, path)
        path += (part,)
    return scope, leaf, path


def get_parameter_or_create(name: str, shape: Sequence[int] | None = None,
                            initializer: Callable | np.ndarray | None = None,
                            need_grad: bool = True, as_need_grad: bool | None = None) -> Variable:
    """The parameter ``name`` of the current scope, created (in flat storage) if missing.

    ``initializer`` is an nnabla initializer (called with the shape) or an array
    (``shape`` may then be omitted); without one the parameter starts at zero.  As
    in nnabla, an existing parameter takes the ``need_grad`` given, and the result
    is a variable named ``name``'s last part, sharing the parameter's arrays, with
    ``need_grad=as_need_grad`` (``need_grad`` when None; False inside ``no_grad``)."""
    scope, leaf, path = _located(name)
    full = "/".join(path + (leaf,))
    param = scope.get(leaf)
    if isinstance(param, dict):
        raise DpnbError(f"{full!r} is a parameter scope, not a parameter; choose another name")
    if param is None:
        initial = _initial_value(full, shape, initializer)
        ctx = get_current_context()
        param = Variable(initial.shape, need_grad=need_grad, dtype=ctx.dtype)
        param.data.owner = full
        param.grad.owner = f"gradient of {full}"
        storage_for(ctx.dtype, ctx.xp, trainable=need_grad).add(param, to_module(initial, ctx.xp))
        scope[leaf] = param
    else:
        if shape is not None and tuple(int(s) for s in shape) != param.shape:
            raise DpnbError(f"parameter {full!r} exists with shape {param.shape}, but shape "
                            f"{tuple(shape)} was asked for; use another parameter_scope or "
                            "nn.clear_parameters()")
        param.need_grad = bool(need_grad)
    wanted = need_grad if as_need_grad is None else as_need_grad
    view = param.get_unlinked_variable(need_grad=bool(wanted) and not get_no_grad())
    view.name = leaf
    return view


def _is_array(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not callable(value)


def _initial_value(name: str, shape: Sequence[int] | None, initializer):
    """The initial array of a new parameter, checked against ``shape``."""
    if shape is not None:
        shape = as_shape(shape, f"the shape of parameter {name!r}")
    if _is_array(initializer):
        value = initializer
    elif initializer is not None and not callable(initializer):
        raise DpnbError(f"the initializer of {name!r} must be a NumPy/CuPy array or an "
                        f"initializer (a callable taking the shape), got "
                        f"{type(initializer).__name__}; wrap lists with numpy.array(...)")
    elif shape is None:
        raise DpnbError(f"parameter {name!r} does not exist and no shape was given to create it; "
                        "pass shape= or an array as initializer")
    else:
        value = np.zeros(shape) if initializer is None else initializer(shape)
    if shape is not None and tuple(np.shape(value)) != shape:
        raise DpnbError(f"the initializer of {name!r} gave shape {tuple(np.shape(value))}, "
                        f"expected {shape}; give an array (or initializer) of the "
                        "parameter's shape")
    return value


def get_parameter(key: str) -> Variable | None:
    """The parameter ``key`` of the current scope, or None where there is none."""
    scope, leaf, _ = _located(key)
    param = scope.get(leaf)
    return param if isinstance(param, Variable) else None


def pop_parameter(key: str) -> Variable | None:
    """Remove the parameter ``key`` from the current scope and return it (None if absent)."""
    scope, leaf, _ = _located(key)
    return scope.pop(leaf) if isinstance(scope.get(leaf), Variable) else None


def set_parameter(key: str, param: Variable) -> None:
    """Register an existing variable as parameter ``key`` of the current scope (it stays
    outside flat storage)."""
    if not isinstance(param, Variable):
        raise DpnbError(f"set_parameter expects an nn.Variable, got {type(param).__name__}")
    scope, leaf, _ = _located(key)
    scope[leaf] = param


def get_parameters(params: dict | None = None, path: str = "",
                   grad_only: bool = True) -> OrderedDict[str, Variable]:
    """Parameters under the current scope, named relative to it (each name prefixed with
    ``path/`` where ``path`` is given) and added to ``params`` (a new OrderedDict when None),
    which is returned; ``grad_only`` keeps those with ``need_grad``."""
    found = OrderedDict() if params is None else params
    pending = [(path, iter(_current.items()))]
    while pending:
        prefix, items = pending[-1]
        entry = next(items, None)
        if entry is None:
            pending.pop()
            continue
        key, value = entry
        full = f"{prefix}/{key}" if prefix else key
        if isinstance(value, dict):
            pending.append((full, iter(value.items())))
        elif not grad_only or value.need_grad:
            found[full] = value
    return found


def clear_parameters() -> None:
    """Forget the parameters of the current scope; at the root this also starts the flat
    storage afresh."""
    _current.clear()
    if _current is _root:
        clear_storages()


def save_parameters(path, params: dict | None = None, extension: str | None = None) -> None:
    """Write the parameters of the current scope (or ``params``) in the format the path's
    extension (or, for a file object, ``extension``) names: .h5, .protobuf,
    .nntxt/.prototxt or .nnp as nnabla lays them out, or dpnb's .npz; a path is
    replaced atomically."""
    params = get_parameters(grad_only=False) if params is None else params
    parameter_files.write_parameters(path, params, extension)


def load_parameters(path, proto: nnabla_pb2.NNablaProtoBuf | None = None, needs_proto: bool = False,
                    extension: str = ".nntxt") -> nnabla_pb2.NNablaProtoBuf:
    """Load parameters from a file of any format ``save_parameters`` writes (or nnabla
    does) into the current scope, and return the file's protobuf contents, as nnabla does.

    Existing parameters are overwritten in place (their shapes must match); missing
    ones are created.  The whole file is decoded and checked first: a file that cannot
    be loaded whole changes nothing.  The returned NNablaProtoBuf (``proto``, filled,
    when given) holds what a .protobuf, .nntxt or .nnp file has besides parameters, and
    the parameters themselves for .protobuf and .nntxt files, or with ``needs_proto``."""
    entries, rest = parameter_files.read_parameters(path, extension, needs_proto,
                                                    expected=existing_shape)
    assign_entries(entries, f"parameter file {describe(path)}")
    proto = nnabla_pb2.NNablaProtoBuf() if proto is None else proto
    proto.MergeFrom(rest)
    return proto


def _name_parts(name) -> tuple[str, ...]:
    """The non-empty '/'-separated parts of a parameter name read from a file."""
    return tuple(part for part in str(name).split("/") if part)


def _existing(parts: tuple[str, ...]) -> object | None:
    """What the current scope holds at ``parts`` (a parameter or a scope dict; None
    where nothing, or where a parameter lies on the way), creating nothing."""
    node: object = _current
    for part in parts:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return None
    return node


def existing_shape(name: str) -> tuple[int, ...] | None:
    """The shape of the current scope's parameter ``name``, None where there is none."""
    node = _existing(_name_parts(name))
    return node.shape if isinstance(node, Variable) else None


def shapes_in(scope: dict) -> Callable[[str], tuple[int, ...] | None]:
    """``existing_shape`` for the parameters of ``scope`` (a dict as parameter_scope takes)."""
    def shape(name: str) -> tuple[int, ...] | None:
        with parameter_scope("", scope):
            return existing_shape(name)
    return shape


def _placement_problems(entries) -> list[str]:
    """Why some of ``entries`` (name, array, need_grad) could not go into the current
    scope: empty names, names both a parameter and a scope, one name given two shapes."""
    problems, shapes = [], {}
    for name, value, _ in entries:
        parts = _name_parts(name)
        if not parts:
            problems.append(f"a parameter has the empty name {name!r}")
        elif shapes.setdefault(parts, np.shape(value)) != np.shape(value):
            problems.append(f"{name!r} appears twice, with shapes {shapes[parts]} and "
                            f"{np.shape(value)}")
    names = set(shapes)
    for parts in sorted(names):
        problems += [f"{'/'.join(parts[:i])!r} is both a parameter and a parameter scope"
                     for i in range(1, len(parts)) if parts[:i] in names]
        problems += _scope_conflicts(parts, shapes[parts])
    return problems


def _scope_conflicts(parts: tuple[str, ...], shape: tuple[int, ...]) -> list[str]:
    """Where the current scope holds a parameter on the way to ``parts``, a scope at it,
    or a parameter of another shape."""
    for i in range(1, len(parts)):
        if isinstance(_existing(parts[:i]), Variable):
            return [f"{'/'.join(parts[:i])!r} is a parameter of the network, not a scope"]
    node = _existing(parts)
    if isinstance(node, dict):
        return [f"{'/'.join(parts)!r} is a parameter scope of the network, not a parameter"]
    if isinstance(node, Variable) and node.shape != shape:
        return [f"{'/'.join(parts)!r} is {shape} in the file, {node.shape} in the network"]
    return []


def assign_entries(entries, label: str) -> None:
    """Put decoded (name, array, need_grad) entries into the current scope, all or none:
    everything that could fail is checked before the first parameter changes."""
    problems = _placement_problems(entries)
    if problems:
        raise DpnbError(f"{label} cannot be loaded here: {'; '.join(problems[:8])}; nothing "
                        "was loaded; load it into another parameter_scope")
    for name, value, need_grad in entries:
        param = get_parameter_or_create(name, value.shape, value, need_grad=need_grad)
        param.d = value
