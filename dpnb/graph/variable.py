"""The graph's variables: ``Variable`` (an array, its gradient, and the function that made
it), the passes run from variables (``forward``, ``backward``, ``forward_all``), and the
links of a graph seen from its variables (``parent``, ``rewire_on``, ``visit`` ...)."""
from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

import numpy as np

from ..context import array_module_of, get_current_context, to_module
from ..errors import DpnbError
from ..ndarray import NdArray
from .modes import function_post_hooks, function_pre_hooks, state
from .schedule import Schedule, functions_in_order, graph_changed, schedule_of


class FunctionNode:
    """A function of the graph, as its variables know it: dpnb.graph.function's ``Function``
    derives from it, as that module imports this one, not the reverse.  Variables read
    their functions' ``inputs``, ``outputs``, ``rank`` and ``serial``, and have them note
    a rewiring (``_replace_output``, ``_note_inputs``)."""


Hook = Callable[[FunctionNode], object]

_SETTABLE = ("d", "g", "data", "grad", "need_grad", "persistent", "recompute", "name", "info",
             "parent")


class Variable:
    """A node of data in the graph: an array, its gradient, and the function that made it."""

    def __init__(self, shape: int | Sequence[int] = (), need_grad: bool = False, dtype=None):
        ctx = get_current_context()
        data = NdArray(shape, dtype=dtype or ctx.dtype, xp=ctx.xp)
        data.owner = f"Variable{data.shape}"
        self._init(data, bool(need_grad), None)

    def _init(self, data: NdArray, need_grad: bool, parent: FunctionNode | None,
              grad: NdArray | None = None) -> None:
        self._data = data
        self._grad = grad
        self._need_grad = need_grad
        self._need_grad_set = False  # set on a function's output: it decides, not the leaves
        self.persistent = False
        self._recompute = state.recompute
        self._parent = parent
        self._schedule: Schedule | None = None
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
            graph_changed()

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
            graph_changed()

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
    def parent(self) -> FunctionNode | None:
        """The function that computes this variable; None for a leaf."""
        return self._parent

    @parent.setter
    def parent(self, func: FunctionNode | None) -> None:
        """Re-link this variable: None cuts it from its graph (it becomes a leaf);
        a function must have it among its outputs."""
        if func is not None and not (isinstance(func, FunctionNode)
                                     and any(y is self for y in func.outputs)):
            raise DpnbError(f"parent must be None or a Function that has this variable among its "
                            f"outputs, got {func!r}")
        self._parent = func
        graph_changed()

    def clear_all_graph_links(self) -> None:
        """Cut every link of the graph up to this variable: each of its variables becomes
        a leaf, keeping its data (nnabla's truncation of backpropagation through time)."""
        for fn in functions_in_order([self]):
            for y in fn.outputs:
                y._parent = None
            for x in fn.inputs:
                if x._consumers is not None:
                    x._consumers.discard(fn)
        graph_changed()

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
        graph_changed()

    @property
    def rank(self) -> int:
        """The depth of this variable in its graph: 0 for a leaf, else one more than
        the deepest input of its parent."""
        return 0 if self._parent is None else self._parent.rank

    @property
    def function_references(self) -> list[FunctionNode]:
        """The live functions that take this variable as an input, the newest first."""
        if not self._consumers:
            return []
        return sorted(self._consumers, key=lambda f: f.serial, reverse=True)

    def visit(self, f: Hook) -> None:
        """Call ``f`` with each function this variable depends on, in forward order."""
        for fn in functions_in_order([self]):
            f(fn)

    def visit_check(self, f: Hook) -> object:
        """``visit`` that stops at the first function for which ``f`` returns a true
        value, and then returns True; otherwise ``f``'s last result, as nnabla."""
        result = None
        for fn in functions_in_order([self]):
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
        if state.reshape is None:
            raise DpnbError("a linked reshape needs dpnb.functions, which is not imported yet; "
                            "import dpnb (or dpnb.functions) first")
        y = state.reshape(self, shape, inplace=True)
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
        graph_changed()

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
    def forward(self, clear_buffer: bool = False, clear_no_need_grad: bool = False,
                function_pre_hook: Hook | None = None,
                function_post_hook: Hook | None = None) -> None:
        """Recompute this variable from the graph's leaves.

        ``clear_buffer`` frees intermediate results as soon as no later function
        needs them (inference); ``clear_no_need_grad`` frees only those that
        backward will not read either.  The hooks are called with each function
        just before and just after it runs."""
        schedule_of(self).forward([self], clear_buffer, clear_no_need_grad,
                                  function_pre_hooks.chained(function_pre_hook),
                                  function_post_hooks.chained(function_post_hook))

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
        schedule_of(self).backward(self, self._seed(grad), clear_buffer, callbacks,
                                   function_pre_hooks.chained(function_pre_hook),
                                   function_post_hooks.chained(function_post_hook), made_seed)

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
    Schedule(roots).forward(roots, clear_buffer, clear_no_need_grad,
                            function_pre_hooks.chained(function_pre_hook),
                            function_post_hooks.chained(function_post_hook))


def _as_list(callbacks) -> list:
    if callbacks is None:
        return []
    return list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]


