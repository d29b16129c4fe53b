"""The solver base: registration of parameters in runs, the update loop around each
rule's ``_update_run``, weight decay, clipping, gradient checks, states and their
files, and the hooks every solver calls."""
from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from numbers import Real
from types import ModuleType

import numpy as np

from ..context import array_module_of, to_module
from ..errors import DpnbError, DpnbValueError
from ..formats.files import file_format
from ..hooks import HookRegistry
from ..graph import Variable
from ..formats import nnabla_pb2, state_files
from ..storage import Run, contiguous_runs
from .runs import RunState, arithmetic_dtype, cut_into_parts, slice_elements

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
        self._runs: list[RunState] = []

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
        runs: list[RunState] = []
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

    def _new_run_state(self, run: Run, names: list[str], t: int, kept: dict) -> RunState:
        data = run.data()
        xp = array_module_of(data)
        dtype = arithmetic_dtype(data.dtype)
        state = {key: xp.zeros(run.size, dtype) for key in self._state_names}
        step = slice_elements(xp, run.size)
        wide = (None if dtype == data.dtype else
                tuple(xp.empty(min(step, run.size), dtype) for _ in range(2)))
        rs = RunState(run, names, xp, state, t, xp.empty(run.size, dtype),
                       xp.asarray(np.asarray(run.offsets, dtype=np.intp)),
                       tuple(v.size for v in run.variables),
                       cut_into_parts(run.offsets, run.size, xp, step),
                       xp.empty(run.size, dtype) if self._spare_scratch else None, wide)
        for name, stretch in rs.slices():
            for key, array in (kept[name][0].items() if name in kept else ()):
                rs.state[key][stretch] = to_module(array, xp)
        return rs

    def _states_by_name(self) -> dict[str, tuple[dict, int]]:
        """Each parameter's state as views into the flat arrays, with its run's ``t``."""
        return {name: ({key: array[stretch] for key, array in rs.state.items()}, rs.t)
                for rs in self._runs for name, stretch in rs.slices()}

    def _require_runs(self) -> list[RunState]:
        if not self._runs:
            raise DpnbError(f"the {self.name} solver has no parameters; call "
                            "solver.set_parameters(nn.get_parameters()) after building the network")
        return self._runs

    def _apply(self, action: Callable[[RunState], object], pre_hook: Hook = None,
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

    def _update_run_state(self, rs: RunState) -> None:
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

        def decay(rs: RunState) -> None:  # in the arithmetic type: decay * w may underflow float16
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

        def rescale(rs: RunState) -> None:
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

        def clip(rs: RunState) -> None:  # squares in the arithmetic type: float16 ones overflow
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
        """Whether any registered gradient holds an infinity (hooks as
        ``check_inf_or_nan_grad``)."""
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
