"""The graph's functions: ``Function``, the base class of every operation, with its
forward and backward on arrays, nnabla's surface on variables given explicitly, and
the call that adds it to a graph (or computes it at once in ``auto_forward`` mode)."""
from __future__ import annotations

import itertools
import logging
import weakref
from collections.abc import Sequence
from types import ModuleType
from typing import NamedTuple

import numpy as np

from ..context import Context, get_current_context, to_module
from ..errors import DpnbError
from ..ndarray import NdArray
from .modes import auto_forward, function_post_hooks, function_pre_hooks, no_grad, recorders, state
from .variable import FunctionNode, Variable

logger = logging.getLogger(__name__)

_serial = itertools.count()  # creation order of functions, for function_references


class FunctionInfo(NamedTuple):
    """What nnabla's ``Function.info`` holds."""
    type_name: str
    args: dict


class Function(FunctionNode):
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
    _given_inputs = None           # the variables an explicit forward(inputs, outputs) runs on

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
        if state.export_arguments is None:
            raise DpnbError("Function.arguments needs dpnb.formats.function_specs, which knows "
                            "nnabla's parameters of each function; import it first")
        return state.export_arguments(self)

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
        """Compute ``outputs``' data from ``inputs``' data (they keep their arrays); an
        input this function updates is updated in ``inputs`` (``update_input``)."""
        self._check_outputs(outputs, len(self.outputs))
        xp = self.xp
        xs = [to_module(x.data.data, xp) for x in inputs]
        self._given_inputs = inputs
        try:
            computed = self.forward_arrays(xp, xs)
        finally:
            self._given_inputs = None
        for y, array in zip(outputs, computed):
            if any(xp.may_share_memory(array, x) for x in xs):
                array = array.copy()  # an output never aliases an input its caller rewrites
            y.data.take(to_module(array, y.data.xp), self)

    def update_input(self, i: int, value) -> None:
        """Write ``value`` into input ``i`` (a running statistic, a range): of the variables
        given to ``forward`` where it runs so (nnabla's tests do), else of the graph."""
        (self._given_inputs or self.inputs)[i].d = value

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
                if type(x) in recorders:
                    return recorders[type(x)](self, inputs)
                raise self.error(f"input {i} must be an nn.Variable, got {type(x).__name__}; "
                                 "wrap arrays with nn.Variable.from_numpy_array(...)")
        self.context = ctx = get_current_context()
        self._xp = xp = ctx.xp
        self.inputs = list(inputs)
        specs = self.output_specs(self.inputs)
        self._note_inputs()
        self.serial = next(_serial)
        self.rank = 1 + max((x.rank for x in inputs), default=0)
        eager = state.auto_forward
        linked = not (eager and state.no_grad)  # no_grad in eager mode builds no graph
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
        if eager:
            pre, post = function_pre_hooks.chained(None), function_post_hooks.chained(None)
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

    def compute_into(self, i: int, array: NdArray) -> None:
        """Make ``array`` (a parameter's data, say) output ``i``'s array, which every forward
        then writes (nnabla's ``outputs=[ndarray]``); it must have that output's shape."""
        handle = self._out_handles[i]
        if array.shape != handle.shape:
            raise self.error(f"outputs[{i}] must have the output's shape {handle.shape}, got "
                             f"{array.shape}")
        if handle.allocated:  # computed already (auto_forward)
            array.take(handle.data, self)
        self._out_handles[i] = array
        y = self._outputs[i]()
        if y is not None:
            y._data = array

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

