"""Reference cases of functions and parametric functions, one module per family
(``functions_<family>.py``, each with a list ``CASES``): record_functions.py runs them
with nnabla, test_nnabla_functions.py with dpnb.

A case calls one function on fixed inputs.  Its result is every output, the gradient
of every input and parameter for fixed random output gradients, and any input or
parameter that the call changed (batch normalization's running statistics); the
parameters a parametric function creates get fixed values first, chosen from their
names, so that both libraries compute from the same numbers."""
from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

SEPARATOR = "::"  # between a case's name and a result's key in the fixture files


@dataclass(frozen=True)
class Case:
    """One call of one function.

    ``build(lib, *variables)`` returns the output variable or a tuple of them; ``lib``
    has the library's ``nn``, ``F`` and ``PF``.  Float inputs get gradients unless
    ``need_grad`` says otherwise; ``grad=False`` skips backward (no gradient exists),
    ``fd=False`` skips the finite-difference check (say why in the case's name or a
    comment).  ``params(name, shape, rng)`` gives a parameter's values (default:
    uniform in [-1, 1), or [0.5, 1.5) for names ending in ``var``), or None to keep those
    the layer made (a seeded initializer, a factorization, compared through the results).
    ``reference``, for a function nnabla's CPU build lacks (CUDA only), gives the results
    ``run`` gives from the float32 inputs, computed with NumPy: the recorder records them
    in nnabla's place."""

    name: str
    build: Callable
    inputs: tuple
    grad: bool = True
    fd: bool = True
    need_grad: tuple | None = None
    params: Callable | None = None
    rtol: float = 1e-4
    atol: float = 1e-5
    fd_atol: float = 1e-6
    fd_rtol: float = 1e-5
    reference: Callable | None = None


def library(nn, F, PF, double_context=None) -> SimpleNamespace:
    """The modules a case builds with, and the context that makes float64 parameters
    (needed for finite differences only)."""
    return SimpleNamespace(nn=nn, F=F, PF=PF, double_context=double_context)


def default_params(name: str, shape: tuple, rng: np.random.RandomState) -> np.ndarray:
    """Values for a parameter: positive for variances, else around zero."""
    if name.endswith("var"):
        return rng.uniform(0.5, 1.5, shape)
    return rng.uniform(-1.0, 1.0, shape)


def host(a) -> np.ndarray:
    """A library's array as a NumPy copy (CuPy arrays come back from the device)."""
    return np.array(a.get() if hasattr(a, "get") else a, copy=True)


def _unchanged(now: np.ndarray, before: np.ndarray) -> bool:
    """Whether an input or parameter still holds its values (NaN where it was NaN)."""
    return np.array_equal(now, before, equal_nan=bool(np.issubdtype(before.dtype, np.floating)))


def _needs_grad(case: Case) -> list[bool]:
    if case.need_grad is not None:
        return list(case.need_grad)
    return [np.issubdtype(np.asarray(a).dtype, np.floating) for a in case.inputs]


def _as_tuple(outputs) -> tuple:
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


def output_grad(i: int, shape: tuple) -> np.ndarray:
    """The fixed gradient of float output ``i``."""
    return np.asarray(np.random.RandomState(100 + i).randn(*shape))


def output_grads(outputs: Sequence) -> list[np.ndarray | None]:
    """The fixed gradient of each float output (None for integer outputs)."""
    return [output_grad(i, y.shape) if np.issubdtype(y.d.dtype, np.floating) else None
            for i, y in enumerate(outputs)]


class Built:
    """A case's graph, built in one library at one float dtype, with its parameters set."""

    def __init__(self, lib, case: Case, dtype=np.float32):
        nn = lib.nn
        nn.clear_parameters()
        self.lib, self.case = lib, case
        self.inputs = [np.array(a, dtype) if np.issubdtype(np.asarray(a).dtype, np.floating)
                       else np.array(a) for a in case.inputs]
        self.xs = [nn.Variable.from_numpy_array(a.copy(), need_grad=n)
                   for a, n in zip(self.inputs, _needs_grad(case))]
        if dtype == np.float32:
            self.outputs = _as_tuple(case.build(lib, *self.xs))
        else:
            with nn.context_scope(lib.double_context):
                self.outputs = _as_tuple(case.build(lib, *self.xs))
        self.params = dict(nn.get_parameters(grad_only=False))
        choose = case.params or default_params
        self.param_values = {}
        for name, p in self.params.items():
            value = choose(name, p.shape, np.random.RandomState(zlib.crc32(name.encode())))
            if value is not None:
                value = np.asarray(value)
                p.d = value.astype(dtype) if np.issubdtype(value.dtype, np.floating) else value
            self.param_values[name] = host(p.d)

    def reset(self) -> None:
        """Inputs and parameters back to their first values (a forward may change them)."""
        for x, a in zip(self.xs, self.inputs):
            x.d = a
        for name, p in self.params.items():
            p.d = self.param_values[name]

    def forward(self) -> None:
        if len(self.outputs) == 1:
            self.outputs[0].forward()
        else:
            self.lib.nn.forward_all(list(self.outputs))

    def backward(self, grads: Sequence[np.ndarray | None]) -> None:
        """Backward from the outputs with ``grads`` (None: that output passes nothing)."""
        for x in self.xs:
            if x.need_grad:
                x.grad.zero()
        for p in self.params.values():
            if p.need_grad:
                p.grad.zero()
        seeded = [(y, g) for y, g in zip(self.outputs, grads) if g is not None]
        if len(seeded) == 1 and len(self.outputs) == 1:
            self.outputs[0].backward(seeded[0][1])
            return
        for y, g in zip(self.outputs, grads):
            y.g = 0 if g is None else g
        self.lib.F.sink(*self.outputs, one_input_grad=False).backward()

    def objective(self, grads: Sequence[np.ndarray | None]) -> float:
        """sum(y * g) over the seeded outputs, after a fresh forward."""
        self.reset()
        self.forward()
        return float(sum(np.sum(host(y.d).astype(np.float64) * g)
                         for y, g in zip(self.outputs, grads) if g is not None))


def run(lib, case: Case) -> dict[str, np.ndarray]:
    """The case's results in ``lib`` (float32): outputs ``y0``..., input gradients
    ``g0``..., parameter gradients ``grad:<name>``, and changed inputs ``x0``... and
    parameters ``param:<name>``."""
    built = Built(lib, case)
    built.forward()
    result = {f"y{i}": host(y.d) for i, y in enumerate(built.outputs)}
    for i, (x, a) in enumerate(zip(built.xs, built.inputs)):
        if not _unchanged(host(x.d), a):
            result[f"x{i}"] = host(x.d)
    for name, p in built.params.items():
        if not _unchanged(host(p.d), built.param_values[name]):
            result[f"param:{name}"] = host(p.d)
    if case.grad:
        built.backward(output_grads(built.outputs))
        for i, x in enumerate(built.xs):
            if x.need_grad:
                result[f"g{i}"] = host(x.g)
        for name, p in built.params.items():
            if p.need_grad:
                result[f"grad:{name}"] = host(p.g)
    return result


def central_differences(array: np.ndarray, objective: Callable[[], float],
                        eps: float = 1e-6) -> np.ndarray:
    """d objective / d array by central differences, moving each element of ``array``
    (which ``objective`` reads) in place and putting it back."""
    flat, numeric = array.reshape(-1), np.zeros(array.size)
    assert np.shares_memory(flat, array), "the array must be contiguous to move in place"
    for j in range(flat.size):
        old = flat[j]
        flat[j] = old + eps
        up = objective()
        flat[j] = old - eps
        down = objective()
        flat[j] = old
        numeric[j] = (up - down) / (2 * eps)
    return numeric.reshape(array.shape)


def finite_difference_errors(lib, case: Case, eps: float = 1e-6) -> list[str]:
    """Where the analytic float64 gradients of the case differ from central differences
    (empty when they agree within the case's ``fd_atol`` and ``fd_rtol``)."""
    built = Built(lib, case, np.float64)
    built.forward()
    grads = output_grads(built.outputs)
    built.reset()
    built.forward()
    built.backward(grads)
    sources = [(f"input {i}", x, built.inputs[i]) for i, x in enumerate(built.xs) if x.need_grad]
    sources += [(f"parameter {name}", p, built.param_values[name])
                for name, p in built.params.items() if p.need_grad]
    analytic = [host(v.g).astype(np.float64) for _, v, _ in sources]
    errors = []
    for (label, v, source), expected in zip(sources, analytic):
        numeric = central_differences(source, lambda: built.objective(grads), eps)
        if not np.allclose(expected, numeric, rtol=case.fd_rtol, atol=case.fd_atol):
            worst = float(np.max(np.abs(expected - numeric)))
            errors.append(f"{label}: analytic and numeric gradients differ by up to {worst:.3g}")
    return errors


def second_order_errors(lib, case: Case, eps: float = 1e-6) -> list[str]:
    """Where the float64 gradient graph that ``nn.grad`` builds for the case is wrong.

    Its values must be ``backward()``'s first-order gradients, and the gradient of
    s = sum_i <v_i, dL/dx_i> (L = sum(y * w), directions v_i fixed at random) with
    respect to every input, parameter and output gradient w must equal the central
    differences of s computed from ``backward()``'s gradients: so a graph right in value
    but wrong in how it depends on x or w is found."""
    nn, F = lib.nn, lib.F
    built = Built(lib, case, np.float64)
    built.forward()
    grads = output_grads(built.outputs)
    sources = [(f"input {i}", x, built.inputs[i]) for i, x in enumerate(built.xs) if x.need_grad]
    sources += [(f"parameter {name}", p, built.param_values[name])
                for name, p in built.params.items() if p.need_grad]
    seeded = [(y, nn.Variable.from_numpy_array(g, need_grad=True))
              for y, g in zip(built.outputs, grads) if g is not None]
    try:
        graph = nn.grad([y for y, _ in seeded], [v for _, v, _ in sources],
                        grad_outputs=[w for _, w in seeded])
    except Exception as error:  # what dpnb says when a function has no graph backward
        return [f"nn.grad: {type(error).__name__}: {error}"]
    rng = np.random.RandomState(7)
    directions = [rng.randn(*g.shape) for g in graph]
    s = F.sum(F.mul2(graph[0], nn.Variable.from_numpy_array(directions[0])))
    for g, v in zip(graph[1:], directions[1:]):
        s = F.add2(s, F.sum(F.mul2(g, nn.Variable.from_numpy_array(v))))

    def first_order() -> list[np.ndarray]:
        built.reset()
        built.forward()
        built.backward(grads)
        return [host(v.g).astype(np.float64) for _, v, _ in sources]

    def reference_s() -> float:
        return float(sum(np.sum(g * v) for g, v in zip(first_order(), directions)))

    expected_first = first_order()
    built.reset()
    s.forward()
    errors = [f"{label}: nn.grad's gradient differs from backward()'s by up to "
              f"{float(np.max(np.abs(host(g.d) - want))):.3g}"
              for (label, _, _), g, want in zip(sources, graph, expected_first)
              if not np.allclose(host(g.d), want, rtol=1e-9, atol=1e-9)]
    wrt = sources + [(f"output gradient {i}", w, w.d) for i, (_, w) in enumerate(seeded)]
    for _, v, _ in wrt:
        v.grad.zero()
    s.backward()
    analytic = [host(v.g).astype(np.float64) for _, v, _ in wrt]
    # the output gradients' values live in ``grads``, which reference_s reads
    arrays = [source for _, _, source in sources] + [g for g in grads if g is not None]
    for (label, _, _), source, expected in zip(wrt, arrays, analytic):
        numeric = central_differences(source, reference_s, eps)
        if not np.allclose(expected, numeric, rtol=case.fd_rtol, atol=case.fd_atol):
            worst = float(np.max(np.abs(expected - numeric)))
            errors.append(f"{label}: second derivative and central differences of the "
                          f"first differ by up to {worst:.3g}")
    return errors


def families() -> list[str]:
    """The families with a case module beside this one."""
    here = Path(__file__).parent
    return sorted(p.stem[len("functions_"):] for p in here.glob("functions_*.py"))


def family_cases(family: str) -> list[Case]:
    """The cases of one family, checked to have distinct names."""
    cases = importlib.import_module(f"{__package__}.functions_{family}").CASES
    names = [c.name for c in cases]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"functions_{family}.py names these cases more than once: {duplicated}")
    return cases


def all_cases() -> list[tuple[str, Case]]:
    """(family, case) for every case of every family."""
    return [(family, case) for family in families() for case in family_cases(family)]


class _Recording:
    """A module stand-in that notes which of its names are looked up."""

    def __init__(self, module, used: set[str]):
        self._module, self._used = module, used

    def __getattr__(self, name: str):
        self._used.add(name)
        return getattr(self._module, name)


def called_functions(lib, cases: Sequence[Case]) -> set[str]:
    """The names of ``lib.F`` and ``lib.PF`` (as ``PF.<name>``) the cases' builds call."""
    used_f: set[str] = set()
    used_pf: set[str] = set()
    recording = SimpleNamespace(nn=lib.nn, F=_Recording(lib.F, used_f),
                                PF=_Recording(lib.PF, used_pf), double_context=None)
    for case in cases:
        Built(recording, case)
    lib.nn.clear_parameters()
    return used_f | {f"PF.{name}" for name in used_pf}
