"""The computation graph: variables, the Function base class, and the forward
and backward passes over a graph defined once and re-run (define-and-run), or
computed as it is built (``auto_forward``).

A graph that is re-run keeps its schedule: the first ``forward``/``backward``
from a variable orders the functions it depends on and plans what to free and
where each gradient goes; later runs reuse that plan.  The functions upstream of
a variable never change by building more graph, so the plan stays valid until
something reshapes or rewires a graph (``reset_shape``, setting ``parent``),
which every plan notices through a global counter; the leaves' ``need_grad``
may change between runs, and the backward plan is checked against it."""
from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import weakref
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import NamedTuple

import numpy as np

from ..context import Context, array_module_of, get_current_context, to_module
from ..errors import DpnbError
from ..hooks import HookRegistry
from ..ndarray import NdArray

logger = logging.getLogger(__name__)

Hook = Callable[["Function"], object]

_auto_forward = False
_no_grad = False
_recompute = False  # the recompute flag new variables get (set_global_recompute)
_epoch = 0  # bumped whenever a graph is reshaped or rewired: plans made before are stale
# Input types that stand for variables of a network definition (graph_def's ProtoVariable):
# a function called on one goes to the type's recorder instead of into a graph.
_recorders: dict[type, Callable[["Function", tuple], object]] = {}
_serial = itertools.count()  # creation order of functions, for function_references
# Hooks every function's forward and backward calls (set_function_pre_hook ...).
_function_pre_hooks = HookRegistry("function_pre_hook")
_function_post_hooks = HookRegistry("function_post_hook")


def get_auto_forward() -> bool:
    return _auto_forward


def set_auto_forward(auto: bool) -> None:
    """Compute every function as soon as it is added to a graph (eager mode)."""
    global _auto_forward
    _auto_forward = bool(auto)


@contextlib.contextmanager
def auto_forward(auto: bool = True) -> Iterator[None]:
    """Eager mode inside the ``with`` block."""
    previous = _auto_forward
    set_auto_forward(auto)
    try:
        yield
    finally:
        set_auto_forward(previous)


def get_no_grad() -> bool:
    """Whether a ``no_grad`` block is active (parameters are then handed out without gradients)."""
    return _no_grad


@contextlib.contextmanager
def no_grad(no_grad_: bool = True) -> Iterator[None]:
    """No gradients for what is built inside the block, as nnabla: parameters come
    without ``need_grad``, and in ``auto_forward`` mode the results are computed
    without being linked into a graph, so their inputs can be freed at once."""
    global _no_grad
    previous = _no_grad
    _no_grad = bool(no_grad_)
    try:
        yield
    finally:
        _no_grad = previous


class ClearFlags:
    """What the graph passes released, function by function, while recording: per function
    forward ran, its inputs' (data, grad) ``clear_called`` flags after its step; per
    function backward ran, its outputs'.  nnabla's tests read them through
    ``nnabla.testing.clear_called_flag_recorder``."""

    def __init__(self):
        self.inputs: list[list[tuple[bool, bool]]] = []
        self.outputs: list[list[tuple[bool, bool]]] = []

    @staticmethod
    def of(variables: Sequence["Variable"],
           seed_of: "Variable | None" = None) -> list[tuple[bool, bool]]:
        """The flags of ``variables``; ``seed_of``'s gradient for the pass was a seed the
        pass made and has released (nnabla's clear_buffer frees it there)."""
        return [(x._data.clear_called,
                 x is seed_of or (x._grad is not None and x._grad.clear_called))
                for x in variables]


_clear_flags: ClearFlags | None = None


def record_clear_flags(record: ClearFlags | None) -> None:
    """Record into ``record`` what the passes from now on release (None: stop recording)."""
    global _clear_flags
    _clear_flags = record


def register_recorder(kind: type, record: Callable[["Function", tuple], object]) -> None:
    """Send functions called on inputs of type ``kind`` to ``record(function, inputs)``,
    which returns what the call returns (how graph_def records network definitions)."""
    _recorders[kind] = record


def is_recorded(x) -> bool:
    """Whether ``x`` stands for a variable of a network definition (a recorder takes it)."""
    return type(x) in _recorders


def set_function_pre_hook(key: str, hook: Hook) -> None:
    """Call ``hook(function)`` just before every function's forward and backward, in every
    pass and eager call, until ``unset_function_pre_hook(key)``."""
    _function_pre_hooks.set(key, hook)


def set_function_post_hook(key: str, hook: Hook) -> None:
    """Call ``hook(function)`` just after every function's forward and backward, until
    ``unset_function_post_hook(key)``."""
    _function_post_hooks.set(key, hook)


def unset_function_pre_hook(key: str) -> None:
    """Remove the hook ``set_function_pre_hook`` registered under ``key``."""
    _function_pre_hooks.unset(key)


def unset_function_post_hook(key: str) -> None:
    """Remove the hook ``set_function_post_hook`` registered under ``key``."""
    _function_post_hooks.unset(key)


def set_global_recompute(recompute: bool) -> None:
    """The ``recompute`` flag of the variables created from now on (nnabla's default: False)."""
    global _recompute
    _recompute = bool(recompute)


@contextlib.contextmanager
def recompute(recompute_: bool = True) -> Iterator[None]:
    """Give the variables created inside the block the ``recompute`` flag ``recompute_``;
    blocks nest, and the flag before the block comes back after it."""
    previous = _recompute
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


# The direction between the graph and the functions: the functions import the graph,
# never the other way.  A variable's arithmetic operators (``x + y``, ``-x``, ``x ** 2``)
# are functions, a layer above this module, so dpnb.functions installs them on
# Variable when it is imported (dpnb.functions.operators, as Chainer does; ``import
# dpnb`` imports it), and it hands over the function behind a linked ``reshape`` here.
_reshape_function: Callable[..., "Variable"] | None = None


def install_reshape(reshape: Callable[..., "Variable"]) -> None:
    """Make ``reshape(x, shape, inplace=True)`` (dpnb.functions.reshape) build the Reshape
    behind ``Variable.reshape``; called by dpnb.functions when it is imported."""
    global _reshape_function
    _reshape_function = reshape


_export_arguments: Callable[["Function"], dict] | None = None


def install_arguments(export: Callable[["Function"], dict]) -> None:
    """Make ``export(fn)`` (nnabla's ``*_param`` values of a function, which
    dpnb.utils.function_specs knows) answer ``Function.arguments``; called by
    function_specs when it is imported."""
    global _export_arguments
    _export_arguments = export


def _graph_changed() -> None:
    global _epoch
    _epoch += 1


_SETTABLE = ("d", "g", "data", "grad", "need_grad", "persistent", "recompute", "name", "info",
             "parent")


class Variable:
    """A node of data in the graph: an array, its gradient, and the function that made it."""

    def __init__(self, shape: int | Sequence[int] = (), need_grad: bool = False, dtype=None):
        ctx = get_current_context()
        data = NdArray(shape, dtype=dtype or ctx.dtype, xp=ctx.xp)
        data.owner = f"Variable{data.shape}"
        self._init(data, bool(need_grad), None)

    def _init(self, data: NdArray, need_grad: bool, parent: "Function | None",
              grad: NdArray | None = None) -> None:
        self._data = data
        self._grad = grad
        self._need_grad = need_grad
        self._need_grad_set = False  # set on a function's output: it decides, not the leaves
        self.persistent = False
        self._recompute = _recompute
        self._parent = parent
        self._schedule: _Schedule | None = None
        self._consumers: weakref.WeakSet | None = None
        self.name = ""
        self.info = None

    @classmethod
    def from_numpy_array(cls, data, grad=None, need_grad: bool = False) -> "Variable":
        """A leaf variable holding a copy of ``data``, keeping its dtype."""
        data = np.asarray(data) if array_module_of(data) is np else data
        v = cls(data.shape, need_grad=need_grad, dtype=data.dtype)
        v.d = data
        if grad is not None:
            v.g = grad
        return v

    def apply(self, **kwargs) -> "Variable":
        """Set attributes (``need_grad=``, ``persistent=``, ``name=`` ...) and return
        self, for chaining."""
        for key, value in kwargs.items():
            if key not in _SETTABLE:
                raise DpnbError(f"Variable.apply: {key!r} is not a settable attribute of a "
                                f"variable; expected some of {', '.join(_SETTABLE)}")
            setattr(self, key, value)
        return self

    @property
    def recompute(self) -> bool:
        """nnabla's flag: forward frees this intermediate's data once no later function reads
        it, and backward computes it again where its functions need it (memory for time)."""
        return self._recompute

    @recompute.setter
    def recompute(self, value: bool) -> None:
        if bool(value) != self._recompute:
            self._recompute = bool(value)
            _graph_changed()

    # -- arrays -----------------------------------------------------------
    @property
    def data(self) -> NdArray:
        return self._data

    @data.setter
    def data(self, value) -> None:
        """Copy an NdArray's (or array's) values into this variable's data."""
        self._data.data = value

    @property
    def grad(self) -> NdArray:
        if self._grad is None:
            data = self._data
            self._grad = NdArray(data.shape, dtype=data.dtype, xp=data.xp,
                                 owner=f"gradient of {data.owner}")
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        self.grad.data = value

    @property
    def d(self):
        return self._data.data

    @d.setter
    def d(self, value) -> None:
        self._data.data = value

    @property
    def g(self):
        return self.grad.data

    @g.setter
    def g(self, value) -> None:
        self.grad.data = value

    @property
    def need_grad(self) -> bool:
        return self._need_grad

    @need_grad.setter
    def need_grad(self, value: bool) -> None:
        """Whether this variable gets a gradient.  Set on a function's output, it decides
        from then on, as in nnabla: False stops backward there (the GAN idiom of
        ``fake.need_grad = False``), True gives it a gradient whatever its inputs need."""
        self._need_grad = bool(value)
        if self._parent is not None:
            self._need_grad_set = True
            _graph_changed()

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        return self._data.size

    def size_from_axis(self, axis: int = -1) -> int:
        """The number of elements in the axes from ``axis`` on; the whole size for ``axis <= 0``."""
        return self._data.size_from_axis(axis)

    def __len__(self) -> int:
        return self.shape[0]

    def __bool__(self) -> bool:
        """A variable is always true, whatever its shape, as nnabla's (``if v:``)."""
        return True

    # -- graph links ------------------------------------------------------
    @property
    def parent(self) -> "Function | None":
        """The function that computes this variable; None for a leaf."""
        return self._parent

    @parent.setter
    def parent(self, func: "Function | None") -> None:
        """Re-link this variable: None cuts it from its graph (it becomes a leaf);
        a function must have it among its outputs."""
        if func is not None and not (isinstance(func, Function)
                                     and any(y is self for y in func.outputs)):
            raise DpnbError(f"parent must be None or a Function that has this variable among its "
                            f"outputs, got {func!r}")
        self._parent = func
        _graph_changed()

    def clear_all_graph_links(self) -> None:
        """Cut every link of the graph up to this variable: each of its variables becomes
        a leaf, keeping its data (nnabla's truncation of backpropagation through time)."""
        for fn in _functions_in_order([self]):
            for y in fn.outputs:
                y._parent = None
            for x in fn.inputs:
                if x._consumers is not None:
                    x._consumers.discard(fn)
        _graph_changed()

    def rewire_on(self, var: "Variable") -> None:
        """Put this variable in ``var``'s place: it becomes the output of ``var``'s function,
        over ``var``'s arrays, and ``var`` is cut from that function.  A graph built on this
        variable now runs on top of ``var``'s (nnabla's way of joining two graphs)."""
        if not isinstance(var, Variable):
            raise DpnbError(f"rewire_on expects an nn.Variable, got {type(var).__name__}")
        if var.shape != self.shape:
            raise DpnbError(f"rewire_on: this variable's shape {self.shape} differs from "
                            f"{var.shape}, the shape of the variable it would replace")
        self._data, self._grad = var._data, var.grad
        for consumer in list(self._consumers or ()):  # they read the new arrays
            consumer._note_inputs()
        fn = var._parent
        if fn is not None:
            fn._replace_output(var, self)
            self._parent, var._parent = fn, None
        _graph_changed()

    @property
    def rank(self) -> int:
        """The depth of this variable in its graph: 0 for a leaf, else one more than
        the deepest input of its parent."""
        return 0 if self._parent is None else self._parent.rank

    @property
    def function_references(self) -> list["Function"]:
        """The live functions that take this variable as an input, the newest first."""
        if not self._consumers:
            return []
        return sorted(self._consumers, key=lambda f: f.serial, reverse=True)

    def visit(self, f: Hook) -> None:
        """Call ``f`` with each function this variable depends on, in forward order."""
        for fn in _functions_in_order([self]):
            f(fn)

    def visit_check(self, f: Callable[["Function"], object]) -> object:
        """``visit`` that stops at the first function for which ``f`` returns a true
        value, and then returns True; otherwise ``f``'s last result, as nnabla."""
        result = None
        for fn in _functions_in_order([self]):
            result = f(fn)
            if result:
                return True
        return result

    def get_unlinked_variable(self, need_grad: bool | None = None) -> "Variable":
        """A new leaf sharing this variable's data and gradient, cut from the graph;
        ``need_grad`` defaults to this variable's."""
        v = Variable.__new__(Variable)
        v._init(self._data, self.need_grad if need_grad is None else bool(need_grad), None,
                grad=self.grad)
        return v

    def unlinked(self, need_grad: bool | None = None) -> "Variable":
        """The older name of ``get_unlinked_variable``."""
        return self.get_unlinked_variable(need_grad)

    def reshape(self, shape: Sequence[int], unlink: bool = False) -> "Variable":
        """This variable in a new shape, sharing its data.  Linked (the default),
        the result is computed by a Reshape in the graph, so gradients flow back to
        this variable; with ``unlink`` it is a new leaf sharing data and gradient."""
        if unlink:
            v = Variable.__new__(Variable)
            data = NdArray(shape, dtype=self.dtype, xp=self._data.xp,
                           owner=f"reshaped {self._data.owner}")
            if data.size != self.size:
                raise DpnbError(f"cannot reshape {self.shape} ({self.size} elements) to "
                                f"{data.shape}; the new shape must hold the same number of "
                                "elements")
            data.bind(self.d.reshape(data.shape))
            grad = NdArray(data.shape, dtype=self.dtype, xp=self._data.xp,
                           owner=f"gradient of {data.owner}")
            grad.bind(self.g.reshape(data.shape))
            v._init(data, self.need_grad, None, grad=grad)
            return v
        if _reshape_function is None:
            raise DpnbError("a linked reshape needs dpnb.functions, which is not imported yet; "
                            "import dpnb (or dpnb.functions) first")
        y = _reshape_function(self, shape, inplace=True)
        if self._data.allocated:
            y._data.bind(self._data.data.reshape(y.shape))
        return y

    def reset_shape(self, shape: Sequence[int], force: bool = False) -> None:
        """Change this variable's shape in place: same size keeps the values; a new
        size needs ``force=True`` and starts from zeros.  Functions reading it set
        themselves up again at the next forward."""
        self._data.reset_shape(shape, force)
        if self._grad is not None:
            self._grad.reset_shape(shape, force)
        _graph_changed()

    def __repr__(self) -> str:
        return f"<Variable({self.shape}, need_grad={self.need_grad}) at {id(self):#x}>"

    def __eq__(self, other) -> bool:
        """The same variable: the same data, as an unlinked variable and its origin are
        (nnabla compares the variables underneath)."""
        return isinstance(other, Variable) and other._data is self._data

    def __hash__(self) -> int:
        """The identity of this variable's data (which ``rewire_on`` and ``x[key] = value``
        replace: keep such a variable out of sets and dict keys across those)."""
        return id(self._data)

    # -- passes -----------------------------------------------------------
    def _plan(self) -> "_Schedule":
        schedule = self._schedule
        if schedule is None or schedule.epoch != _epoch:
            schedule = self._schedule = _Schedule([self])
        return schedule

    def forward(self, clear_buffer: bool = False, clear_no_need_grad: bool = False,
                function_pre_hook: Hook | None = None,
                function_post_hook: Hook | None = None) -> None:
        """Recompute this variable from the graph's leaves.

        ``clear_buffer`` frees intermediate results as soon as no later function
        needs them (inference); ``clear_no_need_grad`` frees only those that
        backward will not read either.  The hooks are called with each function
        just before and just after it runs."""
        self._plan().forward([self], clear_buffer, clear_no_need_grad,
                             _function_pre_hooks.chained(function_pre_hook),
                             _function_post_hooks.chained(function_post_hook))

    def backward(self, grad=1, clear_buffer: bool = False, communicator_callbacks=None,
                 function_pre_hook: Hook | None = None,
                 function_post_hook: Hook | None = None) -> None:
        """Back-propagate from this variable into every leaf that needs a gradient.

        ``grad`` (a scalar, array or NdArray) is this variable's gradient for this
        pass, broadcast to its shape (1: ones); None uses the gradient it holds
        (``y.g = G; y.backward(grad=None)``).  This variable's own gradient is left
        as it is.  Leaf gradients (parameters) accumulate until zeroed; the
        gradients of intermediate variables are those of this call.
        ``communicator_callbacks`` get ``on_finish_function_backward(fn)`` after
        each function and ``on_finish()`` at the end (gradient all-reduce
        overlapped with backward); the hooks are called with each function just
        before and after its backward."""
        if self._parent is None:
            raise DpnbError("backward() starts from a variable computed by a function, but this "
                            "one is a leaf (it has no parent); call it on the loss, or on a "
                            "variable of the graph built from this one")
        callbacks = _as_list(communicator_callbacks)
        # A seed made from a number or array lives only for the pass; one the caller holds
        # (None: this variable's gradient; an NdArray) stays.
        made_seed = not (grad is None or isinstance(grad, NdArray))
        self._plan().backward(self, self._seed(grad), clear_buffer, callbacks,
                              _function_pre_hooks.chained(function_pre_hook),
                              _function_post_hooks.chained(function_post_hook), made_seed)

    def _seed(self, grad):
        """The gradient backward starts from, as an array of this variable's shape and type."""
        xp = self._data.xp
        if grad is None:
            return self.g.copy()
        if isinstance(grad, NdArray):
            grad = grad.data
        elif isinstance(grad, (list, tuple)):
            grad = np.asarray(grad)
        if not hasattr(grad, "shape"):
            return xp.full(self.shape, grad, self.dtype)
        grad = to_module(grad, xp)
        if grad.ndim and tuple(grad.shape) != self.shape:
            raise DpnbError(f"backward(grad=...) needs a scalar or an array of this variable's "
                            f"shape {self.shape}, got shape {tuple(grad.shape)}")
        seed = xp.empty(self.shape, self.dtype)
        seed[...] = grad
        return seed

    # -- operators: the arithmetic ones are installed by dpnb.functions.operators -----
    def __pos__(self):
        return self


def forward_all(variables: Sequence[Variable], clear_buffer: bool = False,
                clear_no_need_grad: bool = False, function_pre_hook: Hook | None = None,
                function_post_hook: Hook | None = None) -> None:
    """Forward of several variables that share a graph, running each function once;
    with ``clear_buffer`` the given variables are kept, whatever their ``persistent``."""
    if isinstance(variables, Variable) or not isinstance(variables, Sequence):
        raise DpnbError(f"forward_all expects a list of nn.Variable, got "
                        f"{type(variables).__name__}; wrap a single variable in a list, or "
                        "call its forward()")
    roots = list(variables)
    for i, v in enumerate(roots):
        if not isinstance(v, Variable):
            raise DpnbError(f"forward_all: item {i} must be an nn.Variable, got {type(v).__name__}")
    _Schedule(roots).forward(roots, clear_buffer, clear_no_need_grad,
                             _function_pre_hooks.chained(function_pre_hook),
                             _function_post_hooks.chained(function_post_hook))


class FunctionInfo(NamedTuple):
    """What nnabla's ``Function.info`` holds."""
    type_name: str
    args: dict


class Function:
    """One operation of the graph, with its forward and backward side by side.

    A subclass keeps its arguments as attributes and implements:

    - ``output_specs(inputs)``: check the input variables' shapes and dtypes
      (raise through ``self.error``) and return ``[(shape, dtype), ...]`` per output;
    - ``forward_arrays(xp, xs)``: output arrays from input arrays;
    - ``backward_arrays(xp, xs, ys, gys, need_grads)``: input gradients (or None
      where not needed) from output gradients.  ``ys`` is given only to functions
      with ``grad_depends_on_outputs``, ``xs`` only to those with
      ``grad_depends_on_inputs`` (None at the indices of ``grad_skips_inputs``, which
      ``forward(clear_no_need_grad=True)`` frees); keep input shapes from
      ``output_specs`` if needed.
      Never modify ``gys`` in place: they may be another variable's gradient.

    Graph passes call these.  nnabla's own surface, ``setup``, ``forward`` and
    ``backward`` on variables given explicitly (``y.parent.forward(inputs, outputs)``),
    and recomputation, are built on them below.  A function that draws random numbers
    (``draws_random_numbers``) keeps its generator in ``rng``.
    """

    differentiable = True          # False: outputs never carry a gradient
    grad_depends_on_inputs = True  # backward reads the inputs' data
    grad_skips_inputs: tuple[int, ...] = ()  # but for these (a bias): given as None
    grad_depends_on_outputs = False  # backward reads the outputs' data
    draws_random_numbers = False   # True: forward draws from ``self.rng``
    updated_inputs: tuple[int, ...] = ()  # inputs forward updates in place (running statistics)
    keeps_inputs = False           # True: forward never frees its inputs (F.sink's results)
    output_views_input = False     # True: the output is a view of the input (in-place reshape)

    inputs: list[Variable]
    context: Context
    rank: int    # the rank of its outputs: one more than its deepest input's
    serial: int  # creation order

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def arguments(self) -> dict:
        """nnabla's parameters of this function (its ``*_param`` fields), as in nnabla."""
        if _export_arguments is None:
            raise DpnbError("Function.arguments needs dpnb.utils.function_specs, which knows "
                            "nnabla's parameters of each function; import it first")
        return _export_arguments(self)

    def set_active_input_mask(self, mask) -> None:
        """nnabla's: compute with the inputs where ``mask`` is True only; AddN and MulN
        have it, as in nnabla."""
        raise self.error("set_active_input_mask is for AddN and MulN only, as in nnabla")

    @property
    def info(self) -> "FunctionInfo":
        """nnabla's ``info``: the type name and the arguments, as function hooks read them."""
        return FunctionInfo(self.name, self.arguments)

    @property
    def xp(self) -> ModuleType:
        """The array module this function computes with (on a GPU: after selecting its device)."""
        return np if self._xp is np else self.context.xp

    def output_specs(self, inputs: Sequence[Variable]) -> list[tuple[tuple[int, ...], np.dtype]]:
        raise NotImplementedError

    def forward_arrays(self, xp: ModuleType, xs: list) -> tuple:
        raise NotImplementedError

    def backward_arrays(self, xp: ModuleType, xs: list, ys: list | None, gys: list,
                        need_grads: list[bool]) -> tuple:
        raise DpnbError(f"{self.name} has no gradient")

    def error(self, message: str, kind: type[DpnbError] = DpnbError) -> DpnbError:
        """An error naming this function, to raise from ``output_specs``; ``kind`` where
        nnabla raises another class than RuntimeError (``DpnbValueError``)."""
        return kind(f"{self.name}: {message}")

    # -- nnabla's surface: this function on variables given explicitly -----------
    def setup(self, inputs: Sequence[Variable], outputs: Sequence[Variable]) -> None:
        """Check ``inputs`` and give ``outputs`` the shapes this function computes from them."""
        specs = self.output_specs(list(inputs))
        self._check_outputs(outputs, len(specs))
        for y, (shape, _) in zip(outputs, specs):
            if tuple(shape) != y.shape:
                y.reset_shape(shape, force=True)

    def forward(self, inputs: Sequence[Variable], outputs: Sequence[Variable]) -> None:
        """Compute ``outputs``' data from ``inputs``' data (they keep their arrays)."""
        self._check_outputs(outputs, len(self.outputs))
        xp = self.xp
        xs = [to_module(x.data.data, xp) for x in inputs]
        for y, array in zip(outputs, self.forward_arrays(xp, xs)):
            if any(xp.may_share_memory(array, x) for x in xs):
                array = array.copy()  # an output never aliases an input its caller rewrites
            y.data.take(to_module(array, y.data.xp), self)

    def backward(self, inputs: Sequence[Variable], outputs: Sequence[Variable],
                 accum: Sequence[bool] | None = None) -> None:
        """Compute the gradients of the ``inputs`` that need one from ``outputs``'
        gradients: added to what they hold where ``accum`` says True (the default, also
        for inputs past the flags given), written over it where False (zero, from a
        function that is not differentiable)."""
        accum = [] if accum is None else list(accum)
        if len(accum) > len(inputs):
            raise self.error(f"backward: accum needs one flag per input ({len(inputs)}), "
                             f"got {len(accum)}")
        accum += [True] * (len(inputs) - len(accum))  # nnabla's tests give fewer flags
        need_grads = [x.need_grad for x in inputs]
        if not any(need_grads):
            return
        if not self.differentiable:  # its gradient is zero, as nnabla's is for these
            for x, add, need in zip(inputs, accum, need_grads):
                if need and not add:
                    x.grad.zero()
            return
        xp = self.xp
        xs = ([None if i in self.grad_skips_inputs else to_module(x.data.data, xp)
               for i, x in enumerate(inputs)] if self.grad_depends_on_inputs else None)
        ys = ([to_module(y.data.data, xp) for y in outputs] if self.grad_depends_on_outputs
              else None)
        gys = [to_module(y.grad.data, xp) for y in outputs]
        grads = self.backward_arrays(xp, xs, ys, gys, need_grads)
        for x, gx, add, need in zip(inputs, grads, accum, need_grads):
            if not need:
                continue
            if gx is None:  # no gradient flows there (running statistics): zero, as nnabla's
                if not add:
                    x.grad.zero()
                continue
            gx = to_module(gx, x.grad.xp)
            if add:
                x.grad.data[...] += gx
            else:
                x.grad.data[...] = gx

    def need_setup_recompute(self, output: int) -> bool:
        """Whether recomputing output ``output`` needs ``setup_recompute`` before the
        forward it repeats: so for a function that draws random numbers or updates inputs."""
        return self.draws_random_numbers or bool(self.updated_inputs)

    def setup_recompute(self, inputs: Sequence[Variable], outputs: Sequence[Variable]) -> None:
        """Remember what the coming forward changes: the random generator's state, and the
        inputs it updates, for ``recompute`` to repeat that forward exactly."""
        self._before_forward = (self.rng.get_state() if self.draws_random_numbers else None,
                                [inputs[i].d.copy() for i in self.updated_inputs])

    def recompute(self, inputs: Sequence[Variable], outputs: Sequence[Variable]) -> None:
        """Compute ``outputs`` again as the forward after ``setup_recompute`` did: from the
        same random state and updated inputs as they were, which it updates the same way
        again; the random generator goes on from where it was."""
        if not self.need_setup_recompute(0):
            self.forward(inputs, outputs)
            return
        saved = getattr(self, "_before_forward", None)
        if saved is None:
            raise self.error("recompute repeats a forward that draws random numbers or updates "
                             "its inputs only after setup_recompute(inputs, outputs), called "
                             "before that forward")
        rng_state, updated = saved
        for i, value in zip(self.updated_inputs, updated):
            inputs[i].d = value
        if rng_state is None:
            self.forward(inputs, outputs)
            return
        now = self.rng.get_state()
        self.rng.set_state(rng_state)
        try:
            self.forward(inputs, outputs)
        finally:
            self.rng.set_state(now)

    def _check_outputs(self, outputs: Sequence[Variable], expected: int) -> None:
        if len(outputs) != expected:
            raise self.error(f"expected {expected} output variable(s), got {len(outputs)}")

    def __repr__(self) -> str:
        return f"<Function {self.name} at {id(self):#x}>"

    def __str__(self) -> str:
        return self.name

    def __call__(self, *inputs: "Variable | NdArray"):
        """Add this function to the graph; returns its output variable(s).  Called on
        NdArrays (with or without variables), it computes at once, as nnabla does, and
        returns NdArrays: no graph is built."""
        for i, x in enumerate(inputs):
            if not isinstance(x, Variable):
                if any(isinstance(v, NdArray) for v in inputs):
                    return self._compute_on_arrays(inputs)
                if type(x) in _recorders:
                    return _recorders[type(x)](self, inputs)
                raise self.error(f"input {i} must be an nn.Variable, got {type(x).__name__}; "
                                 "wrap arrays with nn.Variable.from_numpy_array(...)")
        self.context = ctx = get_current_context()
        self._xp = xp = ctx.xp
        self.inputs = list(inputs)
        specs = self.output_specs(self.inputs)
        self._note_inputs()
        self.serial = next(_serial)
        self.rank = 1 + max((x.rank for x in inputs), default=0)
        linked = not (_auto_forward and _no_grad)  # no_grad in eager mode builds no graph
        need_grad = linked and self.differentiable and any(x.need_grad for x in inputs)
        parent = self if linked else None
        outputs = []
        for shape, dtype in specs:
            y = Variable.__new__(Variable)
            y._init(NdArray(shape, dtype=dtype, xp=xp, owner=f"output of {self.name}"),
                    need_grad, parent)
            outputs.append(y)
        self._outputs = [weakref.ref(y) for y in outputs]
        self._out_handles = [y._data for y in outputs]
        self._outputs_need_grad = need_grad
        if linked:
            for x in inputs:
                if x._consumers is None:
                    x._consumers = weakref.WeakSet()
                x._consumers.add(self)
        if _auto_forward:
            pre, post = _function_pre_hooks.chained(None), _function_post_hooks.chained(None)
            if pre is not None:
                pre(self)
            self._run_forward()
            if post is not None:
                post(self)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    @property
    def outputs(self) -> list[Variable]:
        """The output variables.  A function holds them weakly (each holds its function), so
        that a graph nobody holds is freed at once, as nnabla's; an output no longer held
        comes back as a new variable over the same arrays."""
        outputs = []
        for i, ref in enumerate(self._outputs):
            y = ref()
            if y is None:
                y = Variable.__new__(Variable)
                y._init(self._out_handles[i], self._outputs_need_grad, self)
                self._outputs[i] = weakref.ref(y)
            outputs.append(y)
        return outputs

    def _replace_output(self, old: Variable, new: Variable) -> None:
        """Make ``new`` the output where ``old`` was (``rewire_on``)."""
        i = next(i for i, ref in enumerate(self._outputs) if ref() is old)
        self._outputs[i] = weakref.ref(new)

    def _compute_on_arrays(self, inputs: Sequence["Variable | NdArray"]):
        """This function computed on the arrays of ``inputs`` (variables' data, NdArrays
        themselves, not copied): its outputs' NdArrays."""
        variables = []
        for x in inputs:
            if isinstance(x, NdArray):
                v = Variable.__new__(Variable)
                v._init(x, False, None)
                x = v
            variables.append(x)
        with auto_forward(), no_grad():  # eager and without gradients: links no graph
            outputs = self(*variables)
        if isinstance(outputs, Variable):
            return outputs.data
        return tuple(y.data for y in outputs)

    def _note_inputs(self) -> None:
        """Remember what ``output_specs`` saw, and whether inputs must move to this
        function's device."""
        self._in_shapes = [x.shape for x in self.inputs]
        self._in_handles = [x._data for x in self.inputs]
        self._mixed = any(h.xp is not self._xp for h in self._in_handles)

    def _setup_again_if_reshaped(self) -> None:
        """Set up again where an input's shape changed since (``reset_shape``), as nnabla does."""
        shapes = [x.shape for x in self.inputs]
        if shapes == self._in_shapes:
            return
        logger.info("%s: input shapes changed from %s to %s; setting it up again",
                    self.name, self._in_shapes, shapes)
        specs = self.output_specs(self.inputs)
        self._note_inputs()
        for y, (shape, _) in zip(self.outputs, specs):
            if tuple(shape) != y.shape:
                y._data.reset_shape(shape, force=True)
                if y._grad is not None:
                    y._grad.reset_shape(shape, force=True)

    def _run_forward(self) -> None:
        xp = self._xp
        if xp is not np:
            xp = self.context.xp
        if self._mixed:
            xs = [to_module(h.data, xp) for h in self._in_handles]
        else:
            xs = [h.data for h in self._in_handles]
        for handle, array in zip(self._out_handles, self.forward_arrays(xp, xs)):
            handle.take(array, self)


def _as_list(callbacks) -> list:
    if callbacks is None:
        return []
    return list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]


# What frees a variable whose ``recompute`` flag is set; backward computes such ones again.
FREED_FOR_RECOMPUTE = "forward, as the variable's recompute flag asks"


class _Schedule:
    """What running a graph up to some roots needs: its functions in order, the
    variables each step may free, and (per leaf ``need_grad`` state) the backward
    plan.  Valid while the graph epoch it was made in lasts."""

    def __init__(self, roots: list[Variable]):
        self.epoch = _epoch
        self.order = _functions_in_order(roots)
        # The outputs held for the schedule's life: functions hold theirs weakly, and the
        # passes key variables by identity.
        self.outputs = [y for fn in self.order for y in fn.outputs]
        # The device a pass makes current once, before its functions run (a GPU graph's).
        self.device_context = next((fn.context for fn in self.order if fn._xp is not np), None)
        for fn in self.order:
            fn._setup_again_if_reshaped()
        self.root_ids = {id(v) for v in roots}
        # Inputs of functions that keep them (F.sink's): no pass frees them.
        self.kept = {id(x) for fn in self.order if fn.keeps_inputs for x in fn.inputs}
        # Variables sharing their memory with a neighbour (an in-place view): forward keeps
        # them, as freeing one would not release the memory.
        self.views = {id(v) for fn in self.order if fn.output_views_input
                      for v in (*fn.inputs, *fn.outputs)}
        # Intermediates with the recompute flag: every forward frees them, backward computes
        # them again.
        self.recomputed = {id(x) for fn in self.order for x in fn.inputs
                           if x._parent is not None and x._recompute and id(x) not in self.views
                           and id(x) not in self.root_ids and id(x) not in self.kept}
        leaves: dict[int, Variable] = {}
        for fn in self.order:
            for x in fn.inputs:
                if x._parent is None:
                    leaves.setdefault(id(x), x)
        self.leaves = list(leaves.values())
        self._needs_for: tuple | None = None
        self._needs: dict[int, bool] = {}
        self._backward_plan: list = []
        self._slots: dict[int, int] = {}
        self._frees: dict[tuple, list[list[tuple[Variable, str]]]] = {}

    # -- forward ----------------------------------------------------------
    def forward(self, roots: list[Variable], clear_buffer: bool, clear_no_need_grad: bool,
                pre: Hook | None, post: Hook | None) -> None:
        if self.device_context is not None:
            self.device_context.use_device()
        record = _clear_flags
        if not (clear_buffer or clear_no_need_grad or pre or post or record or self.recomputed):
            for fn in self.order:
                fn._run_forward()
            return
        frees = self._frees_for(clear_buffer, clear_no_need_grad)
        for step, fn in enumerate(self.order):
            if pre is not None:
                pre(fn)
            if any(id(y) in self.recomputed for y in fn.outputs) and fn.need_setup_recompute(0):
                fn.setup_recompute(fn.inputs, fn.outputs)  # to repeat this forward exactly
            fn._run_forward()
            if post is not None:
                post(fn)
            for x, by in frees[step]:
                if not x.persistent:
                    x._data.free(by)
            if record is not None:
                record.inputs.append(ClearFlags.of(fn.inputs))

    def _frees_for(self, clear_buffer: bool,
                   clear_no_need_grad: bool) -> list[list[tuple[Variable, str]]]:
        """Per step, the intermediates that no later function reads and that the pass frees,
        each with what frees it: every one with ``clear_buffer``, those backward does not
        read either with ``clear_no_need_grad``, and those with the recompute flag; never
        the roots, in-place views, or the inputs of functions that keep them."""
        key = (clear_buffer, self._leaf_flags() if clear_no_need_grad else None)
        if key not in self._frees:
            if clear_buffer:
                flag, read = "forward(clear_buffer=True)", set()
            elif clear_no_need_grad:
                flag, read = "forward(clear_no_need_grad=True)", self._read_by_backward()
                read |= {id(x) for fn in self.order  # to compute recomputed ones again
                         if any(id(y) in self.recomputed for y in fn.outputs) for x in fn.inputs}
            last_use = {id(x): (step, x) for step, fn in enumerate(self.order) for x in fn.inputs}
            frees: list[list[tuple[Variable, str]]] = [[] for _ in self.order]
            for key_id, (step, x) in last_use.items():
                if (x._parent is None or key_id in self.root_ids or key_id in self.kept
                        or key_id in self.views):
                    continue
                if key_id in self.recomputed:
                    frees[step].append((x, FREED_FOR_RECOMPUTE))
                elif (clear_buffer or clear_no_need_grad) and key_id not in read:
                    frees[step].append((x, flag))
            self._frees[key] = frees
        return self._frees[key]

    def _read_by_backward(self) -> set[int]:
        needs = self._grad_needs()
        read: set[int] = set()
        for fn in self.order:
            if any(needs[id(y)] for y in fn.outputs):
                if fn.grad_depends_on_inputs:
                    read.update(id(x) for i, x in enumerate(fn.inputs)
                                if i not in fn.grad_skips_inputs)
                if fn.grad_depends_on_outputs:
                    read.update(id(y) for y in fn.outputs)
        return read

    # -- backward ---------------------------------------------------------
    def _leaf_flags(self) -> tuple[bool, ...]:
        return tuple([x.need_grad for x in self.leaves])

    def _grad_needs(self) -> dict[int, bool]:
        """Which variables need a gradient now: leaves by their ``need_grad``,
        intermediates when a differentiable function links them to such a leaf.
        Re-derived (with the backward plan) only when a leaf's flag changed."""
        flags = self._leaf_flags()
        if flags != self._needs_for:
            self._needs = _grad_requirements(self.order)
            self._backward_plan, self._slots = self._make_backward_plan(self._needs)
            self._needs_for = flags
        return self._needs

    def _make_backward_plan(self, needs: dict[int, bool]) -> tuple[list, dict[int, int]]:
        """Per function that runs backward (last first): its outputs, their gradient
        handles and slots, its inputs' need_grads, and where each input's gradient
        goes: ``None``, ``(True, leaf gradient handle, move)`` (accumulate) or
        ``(False, slot, move)`` (pending), ``move`` the input's array module where
        it is not the function's, else None."""
        slots: dict[int, int] = {}
        for fn in self.order:
            for y in fn.outputs:
                slots[id(y)] = len(slots)
        plan = []
        for fn in reversed(self.order):
            if not any(needs[id(y)] for y in fn.outputs):
                continue
            need_grads = [needs[id(x)] for x in fn.inputs]
            targets = []
            for x, need in zip(fn.inputs, need_grads):
                move = x._data.xp if x._data.xp is not fn._xp else None
                if not need:
                    targets.append(None)
                elif x._parent is None:
                    targets.append((True, x.grad, move))
                else:
                    targets.append((False, slots[id(x)], move))
            plan.append((fn, fn.outputs, [y.grad for y in fn.outputs],
                         [slots[id(y)] for y in fn.outputs], need_grads, targets))
        return plan, slots

    def backward(self, root: Variable, seed, clear_buffer: bool, callbacks: list,
                 pre: Hook | None, post: Hook | None, made_seed: bool = False) -> None:
        if self.device_context is not None:
            self.device_context.use_device()
        self._grad_needs()
        pending: list = [None] * len(self._slots)
        pending[self._slots[id(root)]] = seed
        read = self._read_by_backward() if self.recomputed else None
        for fn, outputs, out_grads, out_slots, need_grads, targets in self._backward_plan:
            if read is not None:
                self._recompute_for(fn, read)
            if pre is not None:
                pre(fn)
            xp = fn._xp
            if xp is not np:
                xp = fn.context.xp
            gys = []
            for y, handle, slot in zip(outputs, out_grads, out_slots):
                gy = pending[slot]
                if gy is None:
                    gy = xp.zeros(handle.shape, handle.dtype)
                else:
                    pending[slot] = None
                    if y is not root and (not clear_buffer or y.persistent):
                        handle.take(gy, fn)
                gys.append(gy)
            if fn.grad_depends_on_inputs:
                skips = fn.grad_skips_inputs
                xs = [h.data for h in fn._in_handles] if not skips else [
                    None if i in skips else h.data for i, h in enumerate(fn._in_handles)]
                if fn._mixed:
                    xs = [x if x is None else to_module(x, xp) for x in xs]
            else:
                xs = None
            ys = [h.data for h in fn._out_handles] if fn.grad_depends_on_outputs else None
            gxs = fn.backward_arrays(xp, xs, ys, gys, need_grads)
            for target, gx in zip(targets, gxs):
                if target is None or gx is None:
                    continue
                is_leaf, where, move = target
                if move is not None:
                    gx = to_module(gx, move)
                if is_leaf:
                    where.accumulate(gx)
                else:
                    current = pending[where]
                    pending[where] = gx if current is None else current + gx
            if post is not None:  # the hook sees the inputs' gradients so far, as nnabla's
                for x, target in zip(fn.inputs, targets):
                    if target is not None and not target[0] and pending[target[1]] is not None:
                        x.grad.take(pending[target[1]], fn)
            if clear_buffer:
                for y, handle in zip(outputs, out_grads):
                    if not (y.persistent or y is root or id(y) in self.kept):
                        y._data.free("backward(clear_buffer=True)")
                        handle.free("backward(clear_buffer=True)")
            if _clear_flags is not None:
                _clear_flags.inputs.append(ClearFlags.of(fn.inputs))
                released = root if clear_buffer and made_seed and not root.persistent else None
                _clear_flags.outputs.append(ClearFlags.of(outputs, released))
            if post is not None:
                post(fn)
            for cb in callbacks:
                cb.on_finish_function_backward(fn)
        for cb in callbacks:
            cb.on_finish()


    def _recompute_for(self, fn: Function, read: set[int]) -> None:
        """Compute again the arrays ``fn``'s backward reads that forward freed for recompute."""
        needed = []
        if fn.grad_depends_on_inputs:
            needed += [x for i, x in enumerate(fn.inputs) if i not in fn.grad_skips_inputs]
        if fn.grad_depends_on_outputs:
            needed += fn.outputs
        for v in needed:
            if v._data.freed_by == FREED_FOR_RECOMPUTE:
                self._compute_again(v, read)

    def _compute_again(self, v: Variable, read: set[int]) -> None:
        """Run ``v``'s function again (its freed inputs first, recursively, back to data that
        is there), then free again the inputs backward does not read."""
        fn = v._parent
        for x in fn.inputs:
            if x._data.freed_by == FREED_FOR_RECOMPUTE:
                self._compute_again(x, read)
        fn.recompute(fn.inputs, fn.outputs)
        for x in fn.inputs:
            if id(x) in self.recomputed and id(x) not in read and not x.persistent:
                x._data.free(FREED_FOR_RECOMPUTE)
        if _clear_flags is not None:
            _clear_flags.inputs.append(ClearFlags.of(fn.inputs))


def _functions_in_order(roots: list[Variable]) -> list[Function]:
    """The functions ``roots`` depend on, each once, after all of its inputs' producers."""
    order: list[Function] = []
    seen: set[int] = set()
    for root in roots:
        if root._parent is None or id(root._parent) in seen:
            continue
        stack: list[tuple[Function, bool]] = [(root._parent, False)]
        while stack:
            fn, expanded = stack.pop()
            if expanded:
                order.append(fn)
                continue
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            stack.append((fn, True))
            stack.extend((x._parent, False) for x in reversed(fn.inputs)
                         if x._parent is not None and id(x._parent) not in seen)
    return order


def _grad_requirements(order: list[Function]) -> dict[int, bool]:
    """Which variables need a gradient now: leaves by their ``need_grad``,
    intermediates when a differentiable function links them to such a leaf, or as
    their ``need_grad`` says where it was set on them."""
    needs: dict[int, bool] = {}
    for fn in order:
        for x in fn.inputs:
            if x._parent is None:
                needs[id(x)] = x.need_grad
        flows = fn.differentiable and any(needs[id(x)] for x in fn.inputs)
        for y in fn.outputs:
            needs[id(y)] = y._need_grad if y._need_grad_set else flows
    return needs
