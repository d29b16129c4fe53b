"""nnabla's solvers, updating parameters in flat storage with a few whole-array
operations per run of adjacent parameters.

A solver groups its parameters into runs (``dpnb.storage.contiguous_runs``):
the parameters that ``nn.get_parameter_or_create`` made in one dtype and device
are adjacent, so a whole network is one run and ``update()`` is about ten
vectorised operations instead of a Python loop over parameters.  States
(momentum, Adam's moments) are flat arrays laid out like their run, and the step
count ``t`` is kept per run.  Variables outside flat storage are runs of their
own.  The run's arrays are fetched at every call, because flat storage moves
when it grows.  Rules that need per-parameter norms (Lamb, Lars) sum squares per
parameter with ``reduceat`` over each slice of the run, never a loop per parameter.

float16 parameters are updated in float32, as nnabla's mixed precision does:
their states and scratch are float32, and each slice of parameters and
gradients is widened into float32 buffers, updated there and rounded back, so
that ``eps`` (1e-8 is 0 in float16) and ``g**2`` (it underflows) keep their values."""
from __future__ import annotations

import bisect
import dataclasses
import math
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from numbers import Real
from types import ModuleType

import numpy as np

from .context import array_module_of, to_module, with_current_context
from .errors import DpnbError, DpnbValueError
from .hooks import HookRegistry
from .fileio import file_format
from .graph import Variable
from .proto import nnabla_pb2, state_files
from .storage import Run, contiguous_runs

# Elements per slice of a CPU update: five float32 arrays of it (parameters, gradients,
# two states, scratch) take 1.3 MB, within one core's L2 cache.
CPU_SLICE = 1 << 16
# The type a parameter type's update computes and keeps its states in, where it differs.
_WIDER = {np.dtype(np.float16): np.dtype(np.float32)}


def _arithmetic_dtype(dtype) -> np.dtype:
    """The type in which parameters of ``dtype`` are updated and their states kept:
    float32 for float16 parameters, else their own."""
    dtype = np.dtype(dtype)
    return _WIDER.get(dtype, dtype)

__all__ = ["Solver", "SolverState", "Sgd", "Momentum", "Nesterov", "Adam", "AdamW", "Adagrad",
           "RMSprop", "Adadelta", "Adamax", "AMSGRAD", "AdaBound", "AMSBound", "AdaBelief", "Lamb",
           "Lars", "Lion", "RMSpropGraves", "SgdW", "solver_api", "set_solver_pre_hook",
           "set_solver_post_hook", "unset_solver_pre_hook", "unset_solver_post_hook"]

solver_api = with_current_context  # nnabla's name for it in nnabla.solvers
Hook = Callable[[], object] | None  # a solver hook: called with no arguments
# Hooks every solver calls around each parameter's work (set_solver_pre_hook ...).
_solver_pre_hooks = HookRegistry("solver_pre_hook")
_solver_post_hooks = HookRegistry("solver_post_hook")


def set_solver_pre_hook(key: str, hook: Callable[[], object]) -> None:
    """Call ``hook()`` before each parameter's update, weight decay, gradient scaling,
    clipping or check, in every solver, until ``unset_solver_pre_hook(key)``."""
    _solver_pre_hooks.set(key, hook)


def set_solver_post_hook(key: str, hook: Callable[[], object]) -> None:
    """Call ``hook()`` after each parameter's solver work, until ``unset_solver_post_hook(key)``."""
    _solver_post_hooks.set(key, hook)


def unset_solver_pre_hook(key: str) -> None:
    """Remove the hook ``set_solver_pre_hook`` registered under ``key``."""
    _solver_pre_hooks.unset(key)


def unset_solver_post_hook(key: str) -> None:
    """Remove the hook ``set_solver_post_hook`` registered under ``key``."""
    _solver_post_hooks.unset(key)


class SolverState:
    """One parameter's state, as nnabla has it: named arrays ``pstate`` (Variables)
    and the number of updates ``t``; made empty, as ``nnabla.solvers.SolverState()``."""

    def __init__(self):
        self.pstate: dict[str, Variable] = {}
        self.t = 0

    def __repr__(self) -> str:
        return f"SolverState(pstate={sorted(self.pstate)}, t={self.t})"


def _solver_state(pstate: dict[str, Variable], t: int) -> SolverState:
    state = SolverState()
    state.pstate, state.t = pstate, t
    return state


@dataclasses.dataclass
class _Part:
    """One slice of a run that an update handles at a time, and the parameters it
    touches: ``first`` to ``stop`` (exclusive), starting at ``starts`` within the
    slice (for ``reduceat``) and covering ``counts`` of its elements."""

    slice: slice
    first: int
    stop: int
    starts: object
    counts: list[int]

    def add_square_sums(self, xp: ModuleType, x, tmp, sums) -> None:
        """Add each touched parameter's sum of ``x**2`` over this slice to ``sums``;
        ``x`` and ``tmp`` are this slice of a run's array and of scratch."""
        xp.multiply(x, x, out=tmp)
        sums[self.first:self.stop] += xp.add.reduceat(tmp, self.starts)

    def spread(self, xp: ModuleType, per_parameter):
        """The per-parameter values ``per_parameter`` repeated over this slice's elements."""
        return xp.repeat(per_parameter[self.first:self.stop], self.counts)


def _parts(offsets: Sequence[int], size: int, xp: ModuleType, step: int) -> list[_Part]:
    """A run of ``size`` elements with parameters starting at ``offsets``, cut into
    slices of ``step`` elements (one slice on a GPU)."""
    parts = []
    starts = np.asarray(offsets, dtype=np.intp)
    ends = np.append(starts[1:], size)
    for lo in range(0, size, step):
        hi = min(lo + step, size)
        first, stop = bisect.bisect_right(offsets, lo) - 1, bisect.bisect_left(offsets, hi)
        local = np.maximum(starts[first:stop], lo) - lo
        counts = (np.minimum(ends[first:stop], hi) - lo - local).tolist()
        parts.append(_Part(slice(lo, hi), first, stop, xp.asarray(local), counts))
    return parts


@dataclasses.dataclass
class _RunState:
    """A run and what the solver keeps for it: flat state arrays laid out like the
    run, its step count, scratch buffers, the parameters' offsets (an array of
    ``xp``, for segment reductions) and sizes, and the slices of an update.
    States and scratch are in the run's arithmetic type; for a float16 run
    ``wide`` holds float32 buffers of one slice for its parameters and gradients."""

    run: Run
    names: list[str]
    xp: ModuleType
    state: dict[str, object]
    t: int
    scratch: object
    offsets: object
    sizes: tuple[int, ...]
    parts: list[_Part]
    spare: object = None
    wide: tuple | None = None

    def parameter(self, index: int) -> "_RunState":
        """The ``index``-th parameter alone, as a run of its own sharing this run's
        arrays and step count (to work on one parameter at a time)."""
        if len(self.names) == 1:
            return self
        offset, size = self.run.offsets[index], self.sizes[index]
        stretch = slice(offset, offset + size)
        run = Run([self.run.variables[index]], [0], self.run.storage, self.run.start + offset)
        step = CPU_SLICE if self.xp is np else max(size, 1)
        return _RunState(run, [self.names[index]], self.xp,
                         {key: array[stretch] for key, array in self.state.items()}, self.t,
                         self.scratch[stretch], self.xp.zeros(1, dtype=np.intp), (size,),
                         _parts([0], size, self.xp, step),
                         None if self.spare is None else self.spare[stretch], self.wide)

    def slices(self) -> list[tuple[str, slice]]:
        """Each parameter's name and its stretch of the run's flat arrays."""
        return [(name, slice(offset, offset + size))
                for name, offset, size in zip(self.names, self.run.offsets, self.sizes)]

    def data(self, part: _Part):
        """The parameters of ``part`` in the arithmetic type: a view of the run, or for
        a float16 run a float32 copy, which ``store`` writes back."""
        w = self.run.data()[part.slice]
        return w if self.wide is None else _widened(w, self.wide[0])

    def grad(self, part: _Part):
        """The gradients of ``part`` in the arithmetic type (a float32 copy for float16)."""
        g = self.run.grad()[part.slice]
        return g if self.wide is None else _widened(g, self.wide[1])

    def store(self, part: _Part, w) -> None:
        """Write the parameters ``w`` of ``part`` (from ``data``, updated) back into the
        run, rounding them to float16; a view of the run is already there."""
        if self.wide is not None:
            self.run.data()[part.slice] = w


def _widened(x, buffer):
    """``x`` copied into the start of ``buffer``, in its wider type."""
    wide = buffer[:x.size]
    wide[...] = x
    return wide


class Solver:
    """Parameter registration, per-run states, and the gradient operations shared by
    all update rules.  A subclass names its states in ``_state_names`` and its
    boolean options in ``_flags``, and implements ``_update_run`` on the flat arrays
    of one slice of a run (or ``_update_run_state`` for a whole run, where the rule
    needs per-parameter reductions).  ``_fused_decay`` solvers keep the rate that
    ``weight_decay`` sets for the next update (else ``_default_decay``'s value, or 0)."""

    _state_names: tuple[str, ...] = ()
    _lr_name = "lr"
    _flags: tuple[str, ...] = ()
    _fused_decay = False
    _default_decay: str | None = None
    _spare_scratch = False

    def __init__(self, **hyper: float | bool):
        self._hyper = {key: self._checked(key, value) for key, value in hyper.items()}
        self._initial_lr = self._rate(self.name, self._hyper[self._lr_name])
        self._next_decay: float | None = None
        self._params: OrderedDict[str, Variable] = OrderedDict()
        self._runs: list[_RunState] = []

    def _checked(self, key: str, value) -> float | bool:
        """A hyperparameter as nnabla keeps it: a bool for the flags, else a float."""
        if key in self._flags:
            if not isinstance(value, (bool, np.bool_)):
                raise DpnbError(f"{self.name} expects {key} to be True or False, got {value!r}; "
                                f"pass {key}=True or {key}=False")
            return bool(value)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
            raise DpnbError(f"{self.name} expects {key} to be a number, got {value!r} "
                            f"({type(value).__name__}); pass a float such as {key}=0.001")
        return float(value)

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def info(self) -> dict[str, float | bool]:
        """The hyperparameters, by their nnabla names."""
        return dict(self._hyper)

    @property
    def runs(self) -> list[Run]:
        """The stretches of adjacent parameters that are updated together."""
        return [rs.run for rs in self._runs]

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self._hyper.items())})"

    # -- parameters ---------------------------------------------------------
    def set_parameters(self, param_dict: Mapping[str, Variable], reset: bool = True,
                       retain_state: bool = False) -> None:
        """Register ``param_dict`` (name -> Variable, e.g. ``nn.get_parameters()``).

        ``reset`` forgets the parameters registered before; otherwise these are
        added, and a name given again takes the new variable with a fresh state,
        or keeps its state if ``retain_state`` and the shapes agree."""
        if not isinstance(param_dict, Mapping):
            raise DpnbError(f"set_parameters expects a dict of name -> nn.Variable, got "
                            f"{type(param_dict).__name__}; pass nn.get_parameters()")
        for name, value in param_dict.items():
            if not isinstance(value, Variable):
                raise DpnbError(f"set_parameters expects nn.Variable values, but {name!r} is a "
                                f"{type(value).__name__}; pass nn.get_parameters(), or wrap "
                                "arrays with nn.Variable.from_numpy_array(array, need_grad=True)")
        kept = {} if reset else self._states_by_name()
        params = OrderedDict() if reset else OrderedDict(self._params)
        for name, value in param_dict.items():
            old = params.get(name)
            if old is not None and not (retain_state and old.shape == value.shape):
                kept.pop(name, None)
            params[name] = value
        self._rebuild(params, kept)

    def remove_parameters(self, keys: Sequence[str]) -> None:
        """Forget the parameters named ``keys`` and their states."""
        keys = [keys] if isinstance(keys, str) else list(keys)
        unknown = [key for key in keys if key not in self._params]
        if unknown:
            raise DpnbError(f"remove_parameters: the solver has no parameters [{_some(unknown)}]; "
                            f"it has [{_some(list(self._params))}]")
        params = OrderedDict((n, v) for n, v in self._params.items() if n not in keys)
        self._rebuild(params, self._states_by_name())

    def clear_parameters(self) -> None:
        """Forget all parameters and states."""
        self._params, self._runs = OrderedDict(), []

    def get_parameters(self) -> "OrderedDict[str, Variable]":
        return OrderedDict(self._params)

    def _rebuild(self, params: "OrderedDict[str, Variable]", kept: dict) -> None:
        """Group ``params`` into runs with flat states, carrying over the states in
        ``kept`` ({name: ({state: flat array}, t)}).  Runs are split where ``t``
        changes, so that each run has one step count; empty parameters need no run."""
        first_name: dict[int, str] = {}
        for name, value in params.items():
            other = first_name.setdefault(id(value.data), name)
            if other != name:
                raise DpnbError(f"parameters {other!r} and {name!r} are the same array; "
                                "register each parameter once")
        names = [name for name, value in params.items() if value.size > 0]
        runs: list[_RunState] = []
        first = 0
        for run in contiguous_runs([params[name] for name in names]):
            run_names = names[first:first + len(run.variables)]
            first += len(run.variables)
            steps = [kept[name][1] if name in kept else 0 for name in run_names]
            for lo, hi in _equal_stretches(steps):
                base = run.offsets[lo]
                piece = Run(run.variables[lo:hi], [o - base for o in run.offsets[lo:hi]],
                            run.storage, run.start + base)
                runs.append(self._new_run_state(piece, run_names[lo:hi], steps[lo], kept))
        self._params, self._runs = params, runs

    def _new_run_state(self, run: Run, names: list[str], t: int, kept: dict) -> _RunState:
        data = run.data()
        xp = array_module_of(data)
        dtype = _arithmetic_dtype(data.dtype)
        state = {key: xp.zeros(run.size, dtype) for key in self._state_names}
        step = CPU_SLICE if xp is np else max(run.size, 1)
        wide = (None if dtype == data.dtype else
                tuple(xp.empty(min(step, run.size), dtype) for _ in range(2)))
        rs = _RunState(run, names, xp, state, t, xp.empty(run.size, dtype),
                       xp.asarray(np.asarray(run.offsets, dtype=np.intp)),
                       tuple(v.size for v in run.variables),
                       _parts(run.offsets, run.size, xp, step),
                       xp.empty(run.size, dtype) if self._spare_scratch else None, wide)
        for name, stretch in rs.slices():
            for key, array in (kept[name][0].items() if name in kept else ()):
                rs.state[key][stretch] = to_module(array, xp)
        return rs

    def _states_by_name(self) -> dict[str, tuple[dict, int]]:
        """Each parameter's state as views into the flat arrays, with its run's ``t``."""
        return {name: ({key: array[stretch] for key, array in rs.state.items()}, rs.t)
                for rs in self._runs for name, stretch in rs.slices()}

    def _require_runs(self) -> list[_RunState]:
        if not self._runs:
            raise DpnbError(f"the {self.name} solver has no parameters; call "
                            "solver.set_parameters(nn.get_parameters()) after building the network")
        return self._runs

    def _apply(self, action: Callable[[_RunState], object], pre_hook: Hook = None,
               post_hook: Hook = None, labels: tuple[str, str] = ("pre_hook", "post_hook")
               ) -> bool:
        """Call ``action`` on each run; with hooks, on each parameter alone, between
        ``pre_hook()`` and ``post_hook()``, as nnabla calls them once per parameter.
        Stop after the first true result of ``action`` and return True, else False.
        ``labels`` are the hooks' argument names, for errors."""
        for label, hook in zip(labels, (pre_hook, post_hook)):
            if hook is not None and not callable(hook):
                raise DpnbError(f"{self.name}: {label} must be a callable taking no arguments "
                                f"(or None), got {hook!r}")
        pre_hook = _solver_pre_hooks.chained(pre_hook)
        post_hook = _solver_post_hooks.chained(post_hook)
        hooked = pre_hook is not None or post_hook is not None
        for rs in self._runs:
            for target in (rs.parameter(i) for i in range(len(rs.names))) if hooked else (rs,):
                if pre_hook is not None:
                    pre_hook()
                found = action(target)
                if post_hook is not None:
                    post_hook()
                if found:
                    return True
        return False

    # -- gradients and updates ---------------------------------------------
    def zero_grad(self) -> None:
        """Set every registered gradient to zero (they accumulate across backward calls)."""
        for rs in self._runs:
            rs.run.grad().fill(0)

    def update(self, update_pre_hook: Hook = None, update_post_hook: Hook = None) -> None:
        """Apply the update rule to every registered parameter, from its gradient;
        ``update_pre_hook()`` and ``update_post_hook()`` are called before and after each
        parameter's update (which then runs one parameter at a time).

        On the CPU a run is updated in slices of ``CPU_SLICE`` elements, so that
        the update's passes over parameters, gradients, states and scratch stay
        in cache; on a GPU each run is one pass of kernels.  A decay rate set by
        ``weight_decay`` for a fused solver lasts for this update only."""
        try:
            for rs in self._runs:
                rs.t += 1
            self._apply(self._update_run_state, update_pre_hook, update_post_hook,
                        ("update_pre_hook", "update_post_hook"))
        finally:
            self._next_decay = None

    def _update_run_state(self, rs: _RunState) -> None:
        """Update one run, slice by slice, with the element-wise ``_update_run``."""
        for part in rs.parts:
            s = part.slice
            w = rs.data(part)
            self._update_run(rs.xp, w, rs.grad(part), {name: a[s] for name, a in rs.state.items()},
                             rs.t, rs.scratch[s])
            rs.store(part, w)

    def _update_run(self, xp: ModuleType, w, g, state: dict, t: int, tmp) -> None:
        """Update the flat parameters ``w`` in place from the gradients ``g``,
        element by element (``w`` may be a slice of a run); ``state`` holds the
        matching slices of the states and ``tmp`` is scratch of the same size."""
        raise NotImplementedError

    def weight_decay_is_fused(self) -> bool:
        """Whether ``weight_decay`` only sets the decay rate of the next ``update``
        (which applies it its own way) instead of adding to the gradients."""
        return self._fused_decay

    def weight_decay(self, decay_rate: float, pre_hook: Hook = None, post_hook: Hook = None
                     ) -> None:
        """Add ``decay_rate * w`` to each gradient (L2 regularisation), before ``update``,
        calling the hooks around each parameter's; in a fused solver, set the decay
        rate of the next ``update`` instead (no hooks are called, as in nnabla)."""
        decay_rate = self._number("weight_decay", "decay_rate", decay_rate)
        if self.weight_decay_is_fused():
            self._next_decay = decay_rate
            return
        if decay_rate == 0:
            return

        def decay(rs: _RunState) -> None:  # in the arithmetic type: decay * w may underflow float16
            g = rs.run.grad()
            g += rs.xp.multiply(rs.run.data(), decay_rate, out=rs.scratch, dtype=rs.scratch.dtype)
        self._apply(decay, pre_hook, post_hook)

    def _decay_rate(self) -> float:
        """The decay rate a fused solver applies in this update."""
        if self._next_decay is not None:
            return self._next_decay
        return self._hyper[self._default_decay] if self._default_decay else 0.0

    def _lr_scale(self) -> float:
        """The learning rate now over the one given at construction (the schedule's factor)."""
        return self._hyper[self._lr_name] / self._initial_lr

    def _number(self, method: str, what: str, value) -> float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
            raise DpnbError(f"{method} expects {what} to be a number, got {value!r} "
                            f"({type(value).__name__})")
        return float(value)

    def _rate(self, where: str, rate: float) -> float:
        """A learning rate, refused where it is NaN, infinite or negative: nnabla takes
        any float, and such a rate ruins or reverses training without a word."""
        if not math.isfinite(rate) or rate < 0:
            raise DpnbValueError(f"{where} expects a learning rate that is finite and not "
                                 f"negative, got {rate!r}; pass e.g. {self._lr_name}=0.001")
        return rate

    def scale_grad(self, scale: float, pre_hook: Hook = None, post_hook: Hook = None) -> None:
        """Multiply every registered gradient by ``scale`` (e.g. to undo loss scaling),
        in the arithmetic type: a small scale is not rounded to float16 first; the hooks
        are called around each parameter's."""
        scale = self._number("scale_grad", "scale", scale)

        def rescale(rs: _RunState) -> None:
            g = rs.run.grad()
            rs.xp.multiply(g, scale, out=g, dtype=rs.scratch.dtype)
        self._apply(rescale, pre_hook, post_hook)

    def clip_grad_by_norm(self, clip_norm: float, pre_hook: Hook = None, post_hook: Hook = None
                          ) -> None:
        """Scale each parameter's gradient to an L2 norm of at most ``clip_norm``:
        ``g <- clip_norm * g / max(clip_norm, ||g||)``, norms taken per parameter; the
        hooks are called around each parameter's."""
        if not clip_norm > 0:
            raise DpnbError(f"clip_grad_by_norm expects clip_norm > 0, got {clip_norm}")

        def clip(rs: _RunState) -> None:  # squares in the arithmetic type: float16 ones overflow
            xp, g = rs.xp, rs.run.grad()
            squares = xp.multiply(g, g, out=rs.scratch, dtype=rs.scratch.dtype)
            norms = xp.sqrt(xp.add.reduceat(squares, rs.offsets))
            g *= xp.repeat(clip_norm / xp.maximum(norms, clip_norm), rs.sizes)
        self._apply(clip, pre_hook, post_hook)

    def check_inf_or_nan_grad(self, pre_hook: Hook = None, post_hook: Hook = None) -> bool:
        """Whether any registered gradient holds NaN or infinity (to skip a bad step);
        with hooks, they are called around each parameter's check up to the first found."""
        return self._apply(lambda rs: not bool(rs.xp.isfinite(rs.run.grad()).all()),
                           pre_hook, post_hook)

    def check_inf_grad(self, pre_hook: Hook = None, post_hook: Hook = None) -> bool:
        """Whether any registered gradient holds an infinity (hooks as ``check_inf_or_nan_grad``)."""
        return self._apply(lambda rs: bool(rs.xp.isinf(rs.run.grad()).any()), pre_hook, post_hook)

    def check_nan_grad(self, pre_hook: Hook = None, post_hook: Hook = None) -> bool:
        """Whether any registered gradient holds a NaN (hooks as ``check_inf_or_nan_grad``)."""
        return self._apply(lambda rs: bool(rs.xp.isnan(rs.run.grad()).any()), pre_hook, post_hook)

    def setup(self, params) -> None:
        """Removed from nnabla (it raises there too): ``set_parameters`` replaces it."""
        raise DpnbError(f"{self.name}.setup(params) is deprecated and refused, as in nnabla; "
                        "call solver.set_parameters(param_dict) instead")

    def learning_rate(self) -> float:
        return self._hyper[self._lr_name]

    def set_learning_rate(self, learning_rate: float) -> None:
        self._hyper[self._lr_name] = self._rate(
            "set_learning_rate", self._number("set_learning_rate", "learning_rate", learning_rate))

    # -- states -------------------------------------------------------------
    def _host_states(self) -> Iterator[tuple[str, dict[str, np.ndarray], int]]:
        """Each parameter's name, state arrays (host copies in its shape) and ``t``."""
        for rs in self._runs:
            for name, stretch in rs.slices():
                shape = self._params[name].shape
                yield name, {key: to_module(array[stretch], np).reshape(shape).copy()
                             for key, array in rs.state.items()}, rs.t

    def get_states(self) -> "OrderedDict[str, SolverState]":
        """Each parameter's state, copied."""
        return OrderedDict(
            (name, _solver_state({key: Variable.from_numpy_array(a) for key, a in arrays.items()},
                                 t))
            for name, arrays, t in self._host_states())

    def set_states(self, states: Mapping[str, SolverState]) -> None:
        """Set the states of the registered parameters that ``states`` names (states as
        from ``get_states``); the others keep theirs, as in nnabla.  Parameters with
        different step counts ``t`` are updated apart from then on."""
        unknown = [name for name in states if name not in self._params]
        if unknown:
            raise DpnbError(f"the states do not fit this {self.name} solver: states for "
                            f"parameters it does not have: [{_some(unknown)}] (it has "
                            f"[{_some(list(self._params))}]); register the same parameters "
                            "before setting their states")
        kept = self._states_by_name()
        for name, state in states.items():
            pstate, shape = state.pstate, self._params[name].shape
            if name not in kept:  # an empty parameter: no state to keep
                continue
            if sorted(pstate) != sorted(self._state_names):
                raise DpnbError(f"the state of {name!r} has entries {sorted(pstate)}, but "
                                f"{self.name} keeps {sorted(self._state_names)}; it was made by "
                                "another solver type")
            for key, value in pstate.items():
                if tuple(value.shape) != shape:
                    raise DpnbError(f"state {name}/{key} has shape {tuple(value.shape)}, but "
                                    f"parameter {name!r} has shape {shape}; the states belong to "
                                    "a different network")
            kept[name] = ({key: value.d.reshape(-1) for key, value in pstate.items()},
                          int(state.t))
        self._rebuild(self._params, kept)

    def set_states_to_protobuf(self, optimizer) -> None:
        """Write every parameter's states into the ``Optimizer`` message ``optimizer``
        (``nnabla.utils.nnabla_pb2``) under ``solver.states``, replacing entries of the
        same parameters and keeping the rest, as nnabla's save does."""
        state_files.write_optimizer(self._optimizer_message(optimizer, "set_states_to_protobuf"),
                                    OrderedDict((name, (arrays, t))
                                                for name, arrays, t in self._host_states()))

    def set_states_from_protobuf(self, optimizer_proto) -> None:
        """Set the states that the ``Optimizer`` message ``optimizer_proto`` holds in
        ``solver.states`` (as ``set_states`` does: others keep theirs)."""
        message = self._optimizer_message(optimizer_proto, "set_states_from_protobuf")
        _, states = state_files.read_optimizer(
            message, f"the Optimizer message {message.name!r}")
        self.set_states(OrderedDict(
            (name, _solver_state({key: Variable.from_numpy_array(array)
                                  for key, array in arrays.items()}, t))
            for name, (arrays, t) in states.items()))

    def _optimizer_message(self, optimizer, method: str):
        """``optimizer`` if it is an ``Optimizer`` message, else an error saying so."""
        if not isinstance(optimizer, nnabla_pb2.Optimizer):
            raise DpnbError(f"{self.name}.{method} expects an Optimizer message of "
                            f"nnabla.utils.nnabla_pb2 (a network file's optimizer), got "
                            f"{type(optimizer).__name__}; for a state file use save_states or "
                            "load_states")
        return optimizer

    def save_states(self, path: str | os.PathLike) -> None:
        """Write every parameter's states and ``t`` to ``path`` atomically, in the format
        its extension names: nnabla's .h5 or .protobuf layout, or dpnb's .npz."""
        fmt = file_format(path, None, state_files.FORMATS, "save", "solver states")
        self._require_runs()
        states = OrderedDict((name, (arrays, t)) for name, arrays, t in self._host_states())
        state_files.save(path, fmt, self.name, states)

    def load_states(self, path: str | os.PathLike) -> None:
        """Read states written by ``save_states`` (or nnabla's) for the parameters now
        registered; the file must hold the states of this solver type for exactly them."""
        fmt = file_format(path, None, state_files.FORMATS, "load", "solver states")
        names = [name for rs in self._require_runs() for name in rs.names]
        solver_type, states = state_files.load(path, fmt)
        if solver_type is not None and solver_type != self.name:
            raise DpnbError(f"solver state file {os.fspath(path)!r} holds the states of a "
                            f"{solver_type} solver, not of this {self.name} solver; load it into "
                            f"a {solver_type} solver")
        found = {f"{name}/{key}" for name, (arrays, _) in states.items()
                 for key in tuple(arrays) + ("t",)}
        entries = {f"{name}/{key}" for name in names for key in self._state_names + ("t",)}
        unexpected, missing = sorted(found - entries), sorted(entries - found)
        if unexpected or missing:
            foreign = sorted({key.rsplit("/", 1)[0] for key in unexpected} - set(names))
            unused = [key for key in unexpected if key.rsplit("/", 1)[0] in names]
            problems = [f"{what}: {_some(items)}" for what, items in (
                ("states for parameters this solver does not have", foreign),
                ("entries this solver does not use", unused),
                ("missing entries", missing)) if items]
            raise DpnbError(f"solver state file {os.fspath(path)!r} does not fit this {self.name} "
                            f"solver: {'; '.join(problems)}; load states saved by the same solver "
                            "type for the same parameters, after set_parameters")
        self.set_states(OrderedDict(
            (name, _solver_state({key: Variable.from_numpy_array(states[name][0][key])
                                  for key in self._state_names}, states[name][1]))
            for name in names))


def _some(items: list[str], limit: int = 8) -> str:
    """``items`` for an error message, shortened when there are many."""
    shown = ", ".join(repr(item) for item in items[:limit])
    return shown if len(items) <= limit else f"{shown}, ... ({len(items)} in all)"


def _equal_stretches(values: list) -> list[tuple[int, int]]:
    """(start, stop) of the maximal stretches of equal consecutive values."""
    bounds = [i for i in range(1, len(values)) if values[i] != values[i - 1]]
    return list(zip([0] + bounds, bounds + [len(values)]))


class Sgd(Solver):
    """Stochastic gradient descent: ``w <- w - lr * g``."""

    def __init__(self, lr: float = 1e-3):
        super().__init__(lr=lr)

    def _update_run(self, xp, w, g, state, t, tmp):
        w -= xp.multiply(g, self._hyper["lr"], out=tmp)


class Momentum(Solver):
    """SGD with momentum: ``v <- momentum * v + lr * g``, ``w <- w - v``."""

    _state_names = ("m",)

    def __init__(self, lr: float = 1e-3, momentum: float = 0.9):
        super().__init__(lr=lr, momentum=momentum)

    def _update_run(self, xp, w, g, state, t, tmp):
        v = state["m"]
        v *= self._hyper["momentum"]
        v += xp.multiply(g, self._hyper["lr"], out=tmp)
        w -= v


class Nesterov(Solver):
    """Nesterov's accelerated gradient: ``v' <- momentum * v - lr * g``,
    ``w <- w - momentum * v + (1 + momentum) * v'``."""

    _state_names = ("m",)

    def __init__(self, lr: float = 1e-3, momentum: float = 0.9):
        super().__init__(lr=lr, momentum=momentum)

    def _update_run(self, xp, w, g, state, t, tmp):
        momentum, v = self._hyper["momentum"], state["m"]
        w -= xp.multiply(v, momentum, out=tmp)
        v *= momentum
        v -= xp.multiply(g, self._hyper["lr"], out=tmp)
        w += xp.multiply(v, 1 + momentum, out=tmp)


def _adam_step(xp, w, g, m, v, t, tmp, alpha, beta1, beta2, eps) -> None:
    """``m``, ``v`` <- moving averages of ``g`` and ``g**2``;
    ``w <- w - alpha * sqrt(1 - beta2**t) / (1 - beta1**t) * m / (sqrt(v) + eps)``."""
    m *= beta1
    m += xp.multiply(g, 1 - beta1, out=tmp)
    v *= beta2
    xp.multiply(g, g, out=tmp)
    tmp *= 1 - beta2
    v += tmp
    xp.sqrt(v, out=tmp)
    tmp += eps
    xp.divide(m, tmp, out=tmp)
    tmp *= alpha * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
    w -= tmp


class Adam(Solver):
    """Adam, in nnabla's form: bias correction folded into the step size
    ``alpha * sqrt(1 - beta2**t) / (1 - beta1**t)``, ``eps`` added outside the sqrt."""

    _state_names = ("mean", "var")
    _lr_name = "alpha"

    def __init__(self, alpha: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8):
        super().__init__(alpha=alpha, beta1=beta1, beta2=beta2, eps=eps)

    def _update_run(self, xp, w, g, state, t, tmp):
        h = self._hyper
        _adam_step(xp, w, g, state["mean"], state["var"], t, tmp,
                   h["alpha"], h["beta1"], h["beta2"], h["eps"])


class AdamW(Solver):
    """Adam with decoupled weight decay: also ``w <- w - eta_t * wd * w``, where
    ``eta_t = alpha / alpha_0`` follows the learning-rate schedule.  As in nnabla,
    ``weight_decay(rate)`` sets the decay of the next update instead of touching
    gradients; later updates use ``wd`` again."""

    _state_names = ("mean", "var")
    _lr_name = "alpha"
    _fused_decay = True
    _default_decay = "wd"

    def __init__(self, alpha: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, wd: float = 1e-4):
        super().__init__(alpha=alpha, beta1=beta1, beta2=beta2, eps=eps, wd=wd)

    def _update_run(self, xp, w, g, state, t, tmp):
        h = self._hyper
        w *= 1 - self._lr_scale() * self._decay_rate()
        _adam_step(xp, w, g, state["mean"], state["var"], t, tmp,
                   h["alpha"], h["beta1"], h["beta2"], h["eps"])


class Adagrad(Solver):
    """AdaGrad: ``G <- G + g**2``, ``w <- w - lr * g / (sqrt(G) + eps)``."""

    _state_names = ("v",)

    def __init__(self, lr: float = 1e-2, eps: float = 1e-8):
        super().__init__(lr=lr, eps=eps)

    def _update_run(self, xp, w, g, state, t, tmp):
        total = state["v"]
        total += xp.multiply(g, g, out=tmp)
        xp.sqrt(total, out=tmp)
        tmp += self._hyper["eps"]
        xp.divide(g, tmp, out=tmp)
        tmp *= self._hyper["lr"]
        w -= tmp


class RMSprop(Solver):
    """RMSprop: ``v <- decay * v + (1 - decay) * g**2``, ``w <- w - lr * g / (sqrt(v) + eps)``."""

    _state_names = ("v",)

    def __init__(self, lr: float = 1e-3, decay: float = 0.9, eps: float = 1e-8):
        super().__init__(lr=lr, decay=decay, eps=eps)

    def _update_run(self, xp, w, g, state, t, tmp):
        decay, v = self._hyper["decay"], state["v"]
        v *= decay
        xp.multiply(g, g, out=tmp)
        tmp *= 1 - decay
        v += tmp
        xp.sqrt(v, out=tmp)
        tmp += self._hyper["eps"]
        xp.divide(g, tmp, out=tmp)
        tmp *= self._hyper["lr"]
        w -= tmp


class Adadelta(Solver):
    """AdaDelta: ``E[g^2] <- decay * E[g^2] + (1 - decay) * g**2``,
    ``d = sqrt((E[d^2] + eps) / (E[g^2] + eps)) * g``,
    ``E[d^2] <- decay * E[d^2] + (1 - decay) * d**2``, ``w <- w - lr * d``."""

    _state_names = ("e_sqr_grad", "e_sqr_delta")
    _spare_scratch = True

    def __init__(self, lr: float = 1.0, decay: float = 0.95, eps: float = 1e-6):
        super().__init__(lr=lr, decay=decay, eps=eps)

    def _update_run_state(self, rs):
        for part in rs.parts:
            s = part.slice
            w = rs.data(part)
            self._adadelta(rs.xp, w, rs.grad(part), rs.state["e_sqr_grad"][s],
                           rs.state["e_sqr_delta"][s], rs.scratch[s], rs.spare[s])
            rs.store(part, w)

    def _adadelta(self, xp, w, g, e_grad, e_delta, tmp, tmp2):
        decay, eps = self._hyper["decay"], self._hyper["eps"]
        e_grad *= decay
        xp.multiply(g, g, out=tmp)
        tmp *= 1 - decay
        e_grad += tmp
        xp.add(e_grad, eps, out=tmp2)
        xp.add(e_delta, eps, out=tmp)
        tmp /= tmp2
        xp.sqrt(tmp, out=tmp)
        tmp *= g
        e_delta *= decay
        xp.multiply(tmp, tmp, out=tmp2)
        tmp2 *= 1 - decay
        e_delta += tmp2
        tmp *= self._hyper["lr"]
        w -= tmp


class Adamax(Solver):
    """AdaMax: ``m <- beta1 * m + (1 - beta1) * g``, ``u <- max(beta2 * u, |g|)``,
    ``w <- w - alpha / (1 - beta1**t) * m / (u + eps)``.  (nnabla's docstring also
    shows a ``sqrt(1 - beta2**t)`` factor that its update does not apply.)"""

    _state_names = ("m", "u")
    _lr_name = "alpha"

    def __init__(self, alpha: float = 2e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8):
        super().__init__(alpha=alpha, beta1=beta1, beta2=beta2, eps=eps)

    def _update_run(self, xp, w, g, state, t, tmp):
        h, m, u = self._hyper, state["m"], state["u"]
        _moving_average(xp, m, g, h["beta1"], tmp)
        u *= h["beta2"]
        xp.maximum(u, xp.abs(g, out=tmp), out=u)
        xp.add(u, h["eps"], out=tmp)
        xp.divide(m, tmp, out=tmp)
        tmp *= h["alpha"] / (1 - h["beta1"] ** t)
        w -= tmp


def _moving_average(xp, m, g, beta: float, tmp) -> None:
    """``m <- beta * m + (1 - beta) * g``."""
    m *= beta
    m += xp.multiply(g, 1 - beta, out=tmp)


def _moving_square_average(xp, v, g, beta: float, tmp) -> None:
    """``v <- beta * v + (1 - beta) * g**2``."""
    v *= beta
    xp.multiply(g, g, out=tmp)
    tmp *= 1 - beta
    v += tmp


def _bias_corrected(alpha: float, beta1: float, beta2: float, t: int) -> float:
    """Adam's step size ``alpha * sqrt(1 - beta2**t) / (1 - beta1**t)``."""
    return alpha * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)


class AMSGRAD(Solver):
    """AMSGrad: Adam's moments, the running maximum ``v_hat`` of ``v``, and
    ``w <- w - alpha_t * m / (sqrt(v_hat) + eps)``; ``alpha_t`` is ``alpha``, or
    Adam's bias-corrected step size with ``bias_correction``."""

    _state_names = ("m", "v", "v_hat")
    _lr_name = "alpha"
    _flags = ("bias_correction",)

    def __init__(self, alpha: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, bias_correction: bool = False):
        super().__init__(alpha=alpha, beta1=beta1, beta2=beta2, eps=eps,
                         bias_correction=bias_correction)

    def _update_run(self, xp, w, g, state, t, tmp):
        h, m, v, v_hat = self._hyper, state["m"], state["v"], state["v_hat"]
        _moving_average(xp, m, g, h["beta1"], tmp)
        _moving_square_average(xp, v, g, h["beta2"], tmp)
        xp.maximum(v_hat, v, out=v_hat)
        alpha = (_bias_corrected(h["alpha"], h["beta1"], h["beta2"], t)
                 if h["bias_correction"] else h["alpha"])
        xp.sqrt(v_hat, out=tmp)
        tmp += h["eps"]
        xp.divide(m, tmp, out=tmp)
        tmp *= alpha
        w -= tmp


def _bounded_step(xp, w, m, v, tmp, alpha: float, eps: float, low: float, high: float) -> None:
    """``w <- w - clip(alpha / (sqrt(v) + eps), low, high) * m``."""
    xp.sqrt(v, out=tmp)
    tmp += eps
    xp.divide(alpha, tmp, out=tmp)
    xp.clip(tmp, low, high, out=tmp)
    tmp *= m
    w -= tmp


def _ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, infinite for a zero denominator (a bound that is off)."""
    return numerator / denominator if denominator else math.inf


class AdaBound(Solver):
    """AdaBound: Adam whose per-element step size is clipped to
    ``[final_lr * (1 - 1 / (gamma * t + 1)), final_lr * (1 + 1 / (gamma * t))]``,
    ``final_lr`` following the schedule as ``final_lr * alpha / alpha_0``.  (These
    are the bounds nnabla applies; its docstring writes ``1 - gamma`` for ``gamma``.)"""

    _state_names = ("mean", "var")
    _lr_name = "alpha"

    def __init__(self, alpha: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, final_lr: float = 0.1, gamma: float = 1e-3):
        super().__init__(alpha=alpha, beta1=beta1, beta2=beta2, eps=eps, final_lr=final_lr,
                         gamma=gamma)

    def _update_run(self, xp, w, g, state, t, tmp):
        h, m, v = self._hyper, state["mean"], state["var"]
        _moving_average(xp, m, g, h["beta1"], tmp)
        _moving_square_average(xp, v, g, h["beta2"], tmp)
        final_lr, gt = h["final_lr"] * self._lr_scale(), h["gamma"] * t
        _bounded_step(xp, w, m, v, tmp, _bias_corrected(h["alpha"], h["beta1"], h["beta2"], t),
                      h["eps"], final_lr * (1 - 1 / (gt + 1)), final_lr * (1 + _ratio(1, gt)))


class AMSBound(Solver):
    """AMSBound: AdaBound on AMSGrad's running maximum ``v_hat``, Adam's bias
    correction only with ``bias_correction``.  As nnabla 1.39 computes it, the upper
    bound is ``final_lr * (1 + t / gamma)`` (AdaBound's is ``1 + 1 / (gamma * t)``);
    dpnb follows nnabla so that its programs train the same."""

    _state_names = ("m", "v", "v_hat")
    _lr_name = "alpha"
    _flags = ("bias_correction",)

    def __init__(self, alpha: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, final_lr: float = 0.1, gamma: float = 1e-3,
                 bias_correction: bool = False):
        super().__init__(alpha=alpha, beta1=beta1, beta2=beta2, eps=eps, final_lr=final_lr,
                         gamma=gamma, bias_correction=bias_correction)

    def _update_run(self, xp, w, g, state, t, tmp):
        h, m, v, v_hat = self._hyper, state["m"], state["v"], state["v_hat"]
        _moving_average(xp, m, g, h["beta1"], tmp)
        _moving_square_average(xp, v, g, h["beta2"], tmp)
        xp.maximum(v_hat, v, out=v_hat)
        alpha = (_bias_corrected(h["alpha"], h["beta1"], h["beta2"], t)
                 if h["bias_correction"] else h["alpha"])
        final_lr = h["final_lr"] * self._lr_scale()
        _bounded_step(xp, w, m, v_hat, tmp, alpha, h["eps"],
                      final_lr * (1 - 1 / (h["gamma"] * t + 1)),
                      final_lr * (1 + _ratio(t, h["gamma"])))


class AdaBelief(Solver):
    """AdaBelief: ``m`` as Adam's, ``s <- beta2 * s + (1 - beta2) * (g - m)**2 + eps``,
    ``w <- w - alpha / (1 - beta1**t) * m / (sqrt(s / (1 - beta2**t)) + eps)``.

    ``amsgrad`` keeps ``s`` without ``eps`` and steps with ``s_max <- max(s_max, s) + eps``;
    ``rectify`` scales the step as RAdam does, and while RAdam's variance estimate is
    not defined (rho_t <= 4) steps ``alpha * m``; ``weight_decouple`` makes
    ``weight_decay`` fused: ``w <- w * (1 - alpha * wd)``, or ``w * (1 - wd)`` with
    ``fixed_decay``, ``wd`` being replaced for one update by ``weight_decay(rate)``."""

    _lr_name = "alpha"
    _flags = ("amsgrad", "weight_decouple", "fixed_decay", "rectify")
    _default_decay = "wd"

    def __init__(self, alpha: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, wd: float = 0.0, amsgrad: bool = False,
                 weight_decouple: bool = False, fixed_decay: bool = False,
                 rectify: bool = False):
        super().__init__(alpha=alpha, beta1=beta1, beta2=beta2, eps=eps, wd=wd, amsgrad=amsgrad,
                         weight_decouple=weight_decouple, fixed_decay=fixed_decay,
                         rectify=rectify)
        self._state_names = ("mean", "var", "s_max") if amsgrad else ("mean", "var")

    def weight_decay_is_fused(self) -> bool:
        return self._hyper["weight_decouple"]

    def _rectification(self, t: int) -> float | None:
        """RAdam's factor r_t, or None while rho_t <= 4.  rho_t comes from ``beta2`` in
        float32, as nnabla keeps it: rho_t nearly cancels for beta2 near 1."""
        beta2 = float(np.float32(self._hyper["beta2"]))
        rho_inf = 2 / (1 - beta2) - 1
        rho = rho_inf - 2 * t * beta2 ** t / (1 - beta2 ** t)
        if rho <= 4:
            return None
        return math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))

    def _update_run(self, xp, w, g, state, t, tmp):
        h, m, s = self._hyper, state["mean"], state["var"]
        if h["weight_decouple"]:
            decay = self._decay_rate()
            w *= 1 - (decay if h["fixed_decay"] else h["alpha"] * decay)
        _moving_average(xp, m, g, h["beta1"], tmp)
        s *= h["beta2"]
        xp.subtract(g, m, out=tmp)
        tmp *= tmp
        tmp *= 1 - h["beta2"]
        s += tmp
        if h["amsgrad"]:
            s = state["s_max"]
            xp.maximum(s, state["var"], out=s)
        s += h["eps"]
        rectified = self._rectification(t) if h["rectify"] else 1.0
        if rectified is None:
            w -= xp.multiply(m, h["alpha"], out=tmp)
            return
        xp.sqrt(s, out=tmp)
        tmp *= 1 / math.sqrt(1 - h["beta2"] ** t)
        tmp += h["eps"]
        xp.divide(m, tmp, out=tmp)
        tmp *= h["alpha"] * rectified / (1 - h["beta1"] ** t)
        w -= tmp


class Lamb(Solver):
    """LAMB: Adam's moments (bias-corrected with ``bias_correction``),
    ``r = m / (sqrt(v) + eps) + lambda * w`` and, per parameter,
    ``w <- w - eta * clip(||w||, gamma_l, gamma_u) / ||r|| * r``, where ``lambda`` is
    the fused decay rate that ``weight_decay`` sets for one update (else 0)."""

    _state_names = ("mean", "var")
    _lr_name = "eta"
    _flags = ("bias_correction",)
    _fused_decay = True
    _spare_scratch = True

    def __init__(self, eta: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 gamma_l: float = 0.0, gamma_u: float = 10.0, eps: float = 1e-6,
                 bias_correction: bool = False):
        super().__init__(eta=eta, beta1=beta1, beta2=beta2, gamma_l=gamma_l, gamma_u=gamma_u,
                         eps=eps, bias_correction=bias_correction)

    def _update_run_state(self, rs):
        xp, h, t, decay = rs.xp, self._hyper, rs.t, self._decay_rate()
        m_scale, v_scale = ((1 - h["beta1"] ** t, math.sqrt(1 - h["beta2"] ** t))
                            if h["bias_correction"] else (1.0, 1.0))
        w_sums, r_sums = (xp.zeros(len(rs.sizes), rs.scratch.dtype) for _ in range(2))
        for part in rs.parts:  # r into scratch, and the per-parameter norms of w and r
            s = part.slice
            w, g = rs.data(part), rs.grad(part)
            m, v, r, tmp = rs.state["mean"][s], rs.state["var"][s], rs.scratch[s], rs.spare[s]
            _moving_average(xp, m, g, h["beta1"], tmp)
            _moving_square_average(xp, v, g, h["beta2"], tmp)
            xp.sqrt(v, out=r)
            r *= 1 / v_scale
            r += h["eps"]
            xp.divide(m, r, out=r)
            r *= 1 / m_scale
            if decay:
                r += xp.multiply(w, decay, out=tmp)
            part.add_square_sums(xp, w, tmp, w_sums)
            part.add_square_sums(xp, r, tmp, r_sums)
        r_norms = xp.sqrt(r_sums)
        trust = xp.clip(xp.sqrt(w_sums), h["gamma_l"], h["gamma_u"])
        trust /= xp.where(r_norms > 0, r_norms, 1)
        trust *= h["eta"]
        for part in rs.parts:
            s = part.slice
            w = rs.data(part)
            w -= xp.multiply(rs.scratch[s], part.spread(xp, trust), out=rs.spare[s])
            rs.store(part, w)


class Lars(Solver):
    """LARS with momentum: per parameter the local rate
    ``coefficient * ||w|| / (||g|| + lambda * ||w||)`` (that denominator plus ``eps``
    when it is below ``eps``; the rate is 1 when ``||w|| < eps``), then
    ``v <- momentum * v + lr * rate * (g + lambda * w)``, ``w <- w - v``, ``lambda``
    being the fused decay rate that ``weight_decay`` sets for one update (else 0)."""

    _state_names = ("v",)
    _fused_decay = True

    def __init__(self, lr: float = 1e-3, momentum: float = 0.9, coefficient: float = 1e-3,
                 eps: float = 1e-6):
        super().__init__(lr=lr, momentum=momentum, coefficient=coefficient, eps=eps)

    def _update_run_state(self, rs):
        xp, h, decay, eps = rs.xp, self._hyper, self._decay_rate(), self._hyper["eps"]
        dtype = rs.scratch.dtype
        w_sums, g_sums = (xp.zeros(len(rs.sizes), dtype) for _ in range(2))
        for part in rs.parts:
            s = part.slice
            part.add_square_sums(xp, rs.data(part), rs.scratch[s], w_sums)
            part.add_square_sums(xp, rs.grad(part), rs.scratch[s], g_sums)
        w_norms = xp.sqrt(w_sums)
        denominator = xp.sqrt(g_sums) + decay * w_norms
        denominator += xp.where(denominator < eps, eps, 0).astype(dtype)
        rate = xp.where(w_norms < eps, 1, h["coefficient"] * w_norms / denominator)
        rate = (rate * h["lr"]).astype(dtype)
        for part in rs.parts:
            s = part.slice
            w, v, tmp = rs.data(part), rs.state["v"][s], rs.scratch[s]
            xp.multiply(w, decay, out=tmp)
            tmp += rs.grad(part)
            tmp *= part.spread(xp, rate)
            v *= h["momentum"]
            v += tmp
            w -= v
            rs.store(part, w)


class Lion(Solver):
    """Lion: ``u = sign(beta1 * m + (1 - beta1) * g)``, ``w <- w - lr * (u + lambda * w)``,
    ``m <- beta2 * m + (1 - beta2) * g``, ``lambda`` being the fused decay rate that
    ``weight_decay`` sets for one update (else 0)."""

    _state_names = ("m",)
    _fused_decay = True

    def __init__(self, lr: float = 1e-4, beta1: float = 0.9, beta2: float = 0.99):
        super().__init__(lr=lr, beta1=beta1, beta2=beta2)

    def _update_run(self, xp, w, g, state, t, tmp):
        h, m = self._hyper, state["m"]
        xp.subtract(g, m, out=tmp)
        tmp *= 1 - h["beta1"]
        tmp += m
        xp.sign(tmp, out=tmp)
        tmp *= h["lr"]
        w *= 1 - h["lr"] * self._decay_rate()
        w -= tmp
        xp.subtract(g, m, out=tmp)
        tmp *= 1 - h["beta2"]
        m += tmp


class RMSpropGraves(Solver):
    """Graves' RMSprop: ``n <- decay * n + (1 - decay) * g**2``,
    ``g_avg <- decay * g_avg + (1 - decay) * g`` (state ``g``),
    ``d <- momentum * d - lr * g / sqrt(n - g_avg**2 + eps)``, ``w <- w + d``."""

    _state_names = ("n", "g", "d")

    def __init__(self, lr: float = 1e-4, decay: float = 0.95, momentum: float = 0.9,
                 eps: float = 1e-4):
        super().__init__(lr=lr, decay=decay, momentum=momentum, eps=eps)

    def _update_run(self, xp, w, g, state, t, tmp):
        h, n, average, d = self._hyper, state["n"], state["g"], state["d"]
        _moving_square_average(xp, n, g, h["decay"], tmp)
        _moving_average(xp, average, g, h["decay"], tmp)
        xp.multiply(average, average, out=tmp)
        xp.subtract(n, tmp, out=tmp)
        tmp += h["eps"]
        xp.sqrt(tmp, out=tmp)
        xp.divide(g, tmp, out=tmp)
        tmp *= h["lr"]
        d *= h["momentum"]
        d -= tmp
        w += d


class SgdW(Solver):
    """Momentum SGD with decoupled weight decay: ``m <- momentum * m + lr * g``,
    ``w <- w - m - (lr / lr_0) * wd * w``; ``weight_decay(rate)`` replaces ``wd``
    for the next update only."""

    _state_names = ("m",)
    _fused_decay = True
    _default_decay = "wd"

    def __init__(self, lr: float = 1e-3, momentum: float = 0.9, wd: float = 1e-4):
        super().__init__(lr=lr, momentum=momentum, wd=wd)

    def _update_run(self, xp, w, g, state, t, tmp):
        m = state["m"]
        m *= self._hyper["momentum"]
        m += xp.multiply(g, self._hyper["lr"], out=tmp)
        w *= 1 - self._lr_scale() * self._decay_rate()
        w -= m
