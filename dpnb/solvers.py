"""nnabla's solvers, updating parameters in flat storage with a few whole-array
operations per run of adjacent parameters.

A solver groups its parameters into runs (``dpnb.storage.contiguous_runs``):
the parameters that ``nn.get_parameter_or_create`` made in one dtype and device
are adjacent, so a whole network is one run and ``update()`` is about ten
vectorised operations instead of a Python loop over parameters.  States
(momentum, Adam's moments) are flat arrays laid out like their run, and the step
count ``t`` is kept per run.  Variables outside flat storage are runs of their
own.  The run's arrays are fetched at every call, because flat storage moves
when it grows."""
from __future__ import annotations

import dataclasses
import math
import os
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from types import ModuleType

import numpy as np

from .context import array_module_of, to_module
from .errors import DpnbError
from .fileio import file_format
from .graph import Variable
from .proto import state_files
from .storage import Run, contiguous_runs

# Elements per slice of a CPU update: five float32 arrays of it (parameters, gradients,
# two states, scratch) take 1.3 MB, within one core's L2 cache.
CPU_SLICE = 1 << 16

__all__ = ["Solver", "SolverState", "Sgd", "Momentum", "Nesterov", "Adam", "AdamW", "Adagrad",
           "RMSprop"]


@dataclasses.dataclass
class SolverState:
    """One parameter's state, as nnabla has it: named arrays (``pstate``, as
    Variables) and the number of updates ``t``."""

    pstate: dict[str, Variable]
    t: int


@dataclasses.dataclass
class _RunState:
    """A run and what the solver keeps for it: flat state arrays laid out like the
    run, its step count, a scratch buffer, and the parameters' offsets (an
    array of ``xp``, for segment reductions) and sizes."""

    run: Run
    names: list[str]
    xp: ModuleType
    state: dict[str, object]
    t: int
    scratch: object
    offsets: object
    sizes: tuple[int, ...]

    def slices(self) -> list[tuple[str, slice]]:
        """Each parameter's name and its stretch of the run's flat arrays."""
        return [(name, slice(offset, offset + size))
                for name, offset, size in zip(self.names, self.run.offsets, self.sizes)]


class Solver:
    """Parameter registration, per-run states, and the gradient operations shared by
    all update rules.  A subclass names its states in ``_state_names`` and
    implements ``_update_run`` on the flat arrays of one run."""

    _state_names: tuple[str, ...] = ()
    _lr_name = "lr"

    def __init__(self, **hyper: float):
        self._hyper = {key: float(value) for key, value in hyper.items()}
        self._params: OrderedDict[str, Variable] = OrderedDict()
        self._runs: list[_RunState] = []

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def info(self) -> dict[str, float]:
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
        if reset and not param_dict:
            raise DpnbError("set_parameters got no parameters; build the network (which creates "
                            "them) before solver.set_parameters(nn.get_parameters()), and check "
                            "that it is called in the right parameter_scope")
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
        state = {key: xp.zeros(run.size, data.dtype) for key in self._state_names}
        rs = _RunState(run, names, xp, state, t, xp.empty(run.size, data.dtype),
                       xp.asarray(np.asarray(run.offsets, dtype=np.intp)),
                       tuple(v.size for v in run.variables))
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

    # -- gradients and updates ---------------------------------------------
    def zero_grad(self) -> None:
        """Set every registered gradient to zero (they accumulate across backward calls)."""
        for rs in self._require_runs():
            rs.run.grad().fill(0)

    def update(self) -> None:
        """Apply the update rule to every registered parameter, from its gradient.

        On the CPU a run is updated in slices of ``CPU_SLICE`` elements, so that
        the update's passes over parameters, gradients, states and scratch stay
        in cache; on a GPU each run is one pass of kernels."""
        for rs in self._require_runs():
            rs.t += 1
            w, g = rs.run.data(), rs.run.grad()
            if rs.xp is not np or w.size <= CPU_SLICE:
                self._update_run(rs.xp, w, g, rs.state, rs.t, rs.scratch)
                continue
            for start in range(0, w.size, CPU_SLICE):
                part = slice(start, start + CPU_SLICE)
                self._update_run(np, w[part], g[part],
                                 {name: s[part] for name, s in rs.state.items()}, rs.t,
                                 rs.scratch[part])

    def _update_run(self, xp: ModuleType, w, g, state: dict, t: int, tmp) -> None:
        """Update the flat parameters ``w`` in place from the gradients ``g``,
        element by element (``w`` may be a slice of a run); ``state`` holds the
        matching slices of the states and ``tmp`` is scratch of the same size."""
        raise NotImplementedError

    def weight_decay(self, decay_rate: float) -> None:
        """Add ``decay_rate * w`` to each gradient (L2 regularisation), before ``update``."""
        runs = self._require_runs()
        if decay_rate == 0:
            return
        for rs in runs:
            g = rs.run.grad()
            g += rs.xp.multiply(rs.run.data(), decay_rate, out=rs.scratch)

    def clip_grad_by_norm(self, clip_norm: float) -> None:
        """Scale each parameter's gradient to an L2 norm of at most ``clip_norm``:
        ``g <- clip_norm * g / max(clip_norm, ||g||)``, norms taken per parameter."""
        if not clip_norm > 0:
            raise DpnbError(f"clip_grad_by_norm expects clip_norm > 0, got {clip_norm}")
        for rs in self._require_runs():
            xp, g = rs.xp, rs.run.grad()
            norms = xp.sqrt(xp.add.reduceat(xp.multiply(g, g, out=rs.scratch), rs.offsets))
            g *= xp.repeat(clip_norm / xp.maximum(norms, clip_norm), rs.sizes)

    def check_inf_or_nan_grad(self) -> bool:
        """Whether any registered gradient holds NaN or infinity (to skip a bad step)."""
        return any(not bool(rs.xp.isfinite(rs.run.grad()).all()) for rs in self._require_runs())

    def learning_rate(self) -> float:
        return self._hyper[self._lr_name]

    def set_learning_rate(self, learning_rate: float) -> None:
        self._hyper[self._lr_name] = float(learning_rate)

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
            (name, SolverState({key: Variable.from_numpy_array(a) for key, a in arrays.items()}, t))
            for name, arrays, t in self._host_states())

    def set_states(self, states: Mapping[str, SolverState]) -> None:
        """Replace the state of every registered parameter (states as from ``get_states``)."""
        runs = self._require_runs()
        expected = [name for rs in runs for name in rs.names]
        unknown = [name for name in states if name not in self._params]
        missing = [name for name in expected if name not in states]
        if unknown or missing:
            raise DpnbError(f"the states do not fit this {self.name} solver: states for "
                            f"parameters it does not have: [{_some(unknown)}]; no states for: "
                            f"[{_some(missing)}]; register the same parameters before setting "
                            "their states")
        for name in expected:
            pstate, shape = states[name].pstate, self._params[name].shape
            if sorted(pstate) != sorted(self._state_names):
                raise DpnbError(f"the state of {name!r} has entries {sorted(pstate)}, but "
                                f"{self.name} keeps {sorted(self._state_names)}; it was made by "
                                "another solver type")
            for key, value in pstate.items():
                if tuple(value.shape) != shape:
                    raise DpnbError(f"state {name}/{key} has shape {tuple(value.shape)}, but "
                                    f"parameter {name!r} has shape {shape}; the states belong to "
                                    "a different network")
        for rs in runs:
            steps = {name: int(states[name].t) for name in rs.names}
            if len(set(steps.values())) > 1:
                raise DpnbError(f"the step counts t {steps} differ among parameters that this "
                                "solver updates together; save and load the states of one "
                                "solver's parameters as a whole")
        for rs in runs:
            rs.t = int(states[rs.names[0]].t)
            for name, stretch in rs.slices():
                for key, value in states[name].pstate.items():
                    rs.state[key][stretch] = to_module(value.d, rs.xp).reshape(-1)

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
            (name, SolverState({key: Variable.from_numpy_array(states[name][0][key])
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

    def __init__(self, alpha: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, wd: float = 1e-4):
        super().__init__(alpha=alpha, beta1=beta1, beta2=beta2, eps=eps, wd=wd)
        self._initial_alpha = float(alpha)
        self._next_decay: float | None = None

    def weight_decay(self, decay_rate: float) -> None:
        """Use ``decay_rate`` instead of ``wd`` in the next ``update`` (decoupled decay)."""
        self._require_runs()
        self._next_decay = float(decay_rate)

    def update(self) -> None:
        super().update()
        self._next_decay = None

    def _update_run(self, xp, w, g, state, t, tmp):
        h = self._hyper
        decay = h["wd"] if self._next_decay is None else self._next_decay
        w *= 1 - h["alpha"] / self._initial_alpha * decay
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
