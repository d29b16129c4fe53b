"""The graph's global modes and hooks: eager computation (``auto_forward``), ``no_grad``,
the ``recompute`` flag new variables get, function hooks, the recorders of network
definitions, and what the layers above install (a linked reshape, nnabla's arguments).

The variables and functions read the modes from ``state``, which only this module writes."""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

from ..hooks import HookRegistry


class _State:
    """The modes as they are now (set through the functions below)."""
    __slots__ = ("auto_forward", "no_grad", "recompute", "reshape", "export_arguments")

    def __init__(self):
        self.auto_forward = False  # every function computes as soon as it is added
        self.no_grad = False       # a no_grad block is active
        self.recompute = False     # the recompute flag new variables get (set_global_recompute)
        # The function behind a linked ``Variable.reshape`` and the one answering
        # ``Function.arguments`` (install_reshape, install_arguments).
        self.reshape: Callable | None = None
        self.export_arguments: Callable | None = None


state = _State()

# Input types that stand for variables of a network definition (graph_def's ProtoVariable):
# a function called on one goes to the type's recorder instead of into a graph.
recorders: dict[type, Callable] = {}
# Hooks every function's forward and backward calls (set_function_pre_hook ...).
function_pre_hooks = HookRegistry("function_pre_hook")
function_post_hooks = HookRegistry("function_post_hook")


def get_auto_forward() -> bool:
    return state.auto_forward


def set_auto_forward(auto: bool) -> None:
    """Compute every function as soon as it is added to a graph (eager mode)."""
    state.auto_forward = bool(auto)


@contextlib.contextmanager
def auto_forward(auto: bool = True) -> Iterator[None]:
    """Eager mode inside the ``with`` block."""
    previous = state.auto_forward
    set_auto_forward(auto)
    try:
        yield
    finally:
        set_auto_forward(previous)


def get_no_grad() -> bool:
    """Whether a ``no_grad`` block is active (parameters are then handed out without gradients)."""
    return state.no_grad


@contextlib.contextmanager
def no_grad(no_grad_: bool = True) -> Iterator[None]:
    """No gradients for what is built inside the block, as nnabla: parameters come
    without ``need_grad``, and in ``auto_forward`` mode the results are computed
    without being linked into a graph, so their inputs can be freed at once."""
    previous = state.no_grad
    state.no_grad = bool(no_grad_)
    try:
        yield
    finally:
        state.no_grad = previous


def set_global_recompute(recompute: bool) -> None:
    """The ``recompute`` flag of the variables created from now on (nnabla's default: False)."""
    state.recompute = bool(recompute)


@contextlib.contextmanager
def recompute(recompute_: bool = True) -> Iterator[None]:
    """Give the variables created inside the block the ``recompute`` flag ``recompute_``;
    blocks nest, and the flag before the block comes back after it."""
    previous = state.recompute
    set_global_recompute(recompute_)
    try:
        yield
    finally:
        set_global_recompute(previous)


def recompute_fn(recompute_: bool = True) -> Callable[[Callable], Callable]:
    """Decorator: the function's calls run inside ``recompute(recompute_)``."""
    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with recompute(recompute_):
                return fn(*args, **kwargs)
        return wrapped
    return decorate


def register_recorder(kind: type, record: Callable) -> None:
    """Send functions called on inputs of type ``kind`` to ``record(function, inputs)``,
    which returns what the call returns (how graph_def records network definitions)."""
    recorders[kind] = record


def is_recorded(x) -> bool:
    """Whether ``x`` stands for a variable of a network definition (a recorder takes it)."""
    return type(x) in recorders


def set_function_pre_hook(key: str, hook: Callable) -> None:
    """Call ``hook(function)`` just before every function's forward and backward, in every
    pass and eager call, until ``unset_function_pre_hook(key)``."""
    function_pre_hooks.set(key, hook)


def set_function_post_hook(key: str, hook: Callable) -> None:
    """Call ``hook(function)`` just after every function's forward and backward, until
    ``unset_function_post_hook(key)``."""
    function_post_hooks.set(key, hook)


def unset_function_pre_hook(key: str) -> None:
    """Remove the hook ``set_function_pre_hook`` registered under ``key``."""
    function_pre_hooks.unset(key)


def unset_function_post_hook(key: str) -> None:
    """Remove the hook ``set_function_post_hook`` registered under ``key``."""
    function_post_hooks.unset(key)


# The direction between the graph and the functions: the functions import the graph,
# never the other way.  A variable's arithmetic operators (``x + y``, ``-x``, ``x ** 2``)
# are functions, a layer above this package, so dpnb.functions installs them on
# Variable when it is imported (dpnb.functions.operators, as Chainer does; ``import
# dpnb`` imports it), and it hands over the function behind a linked ``reshape`` here.
def install_reshape(reshape: Callable) -> None:
    """Make ``reshape(x, shape, inplace=True)`` (dpnb.functions.reshape) build the Reshape
    behind ``Variable.reshape``; called by dpnb.functions when it is imported."""
    state.reshape = reshape


def install_arguments(export: Callable) -> None:
    """Make ``export(fn)`` (nnabla's ``*_param`` values of a function, which
    dpnb.formats.function_specs knows) answer ``Function.arguments``; called by
    function_specs when it is imported."""
    state.export_arguments = export
