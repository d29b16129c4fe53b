"""Incremental network quantization (INQ, Zhou et al. 2017): an affine or convolution whose
weights are fixed to powers of two a share at a time, as nnabla's INQAffine and
INQConvolution.

Forward works on the weight and the indicator (1: fixed, 0: learnable) in place, as
nnabla's does: it puts back the fixed weights as the previous forward left them (undoing
the solver's update of them), fixes half of the learnable ones at each forward counted in
``inq_iterations`` (all of them at the last), writes each fixed weight rounded to a power
of two, and computes the inner function with the weight so written.  The gradients are
the inner function's, the weight's included (straight through the rounding)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import random
from ..graph import Function, Variable
from .base import argument_error, default_outputs, number_of
from .graph_module import bilinear_backward_graph
from .nn import Affine, Convolution
from .specs import FunctionSpec, Params, call, ints

__all__ = ["inq_affine", "inq_convolution"]

_ALGORITHMS = ("largest_abs", "random")
_LOG2_ONE_AND_HALF = 0.58496250072115619  # an exponent rounds up from 1.5 * 2^e on


def bernoulli_halves(seed: int, count: int) -> np.ndarray:
    """``count`` draws of C++'s ``std::bernoulli_distribution(0.5)`` from a fresh
    ``std::mt19937(seed)`` (libstdc++: two 32-bit words per draw, low word first), as 0/1,
    so that a seed fixes the same weights as in nnabla."""
    words = np.random.MT19937()
    words._legacy_seeding(seed)  # the C++ engine's seeding of a single 32-bit value
    raw = words.random_raw(2 * count).astype(np.float64)
    canonical = (raw[0::2] + raw[1::2] * 2.0**32) / 2.0**64
    return (canonical < 0.5).astype(np.int64)


class _INQ(Function):
    """``self.inner`` (an affine or a convolution) on inputs x, weight, indicator[, bias]
    with the weight quantized incrementally (see the module's docstring); forward counts
    its calls, and keeps the weight and the fixed mask it left, from setup on."""

    updated_inputs = (1, 2)  # the weight and the indicator
    grad_skips_inputs = (2, 3)  # the indicator and the bias
    inner: Function

    def _init_inq(self, num_bits: int, inq_iterations: tuple, selection_algorithm: str,
                  seed: int) -> None:
        self.num_bits, self.inq_iterations = num_bits, inq_iterations
        self.selection_algorithm, self.seed = selection_algorithm, seed

    def _inner_inputs(self, xs) -> list:
        return [xs[0], xs[1]] + list(xs[3:])

    def output_specs(self, inputs):
        w, indicator = inputs[1], inputs[2]
        if indicator.shape != w.shape:
            raise self.error(f"the indicator must have the weight's shape {w.shape}, got "
                             f"{indicator.shape}")
        self.inner.error = self.error  # its complaints about the inputs name this function
        specs = self.inner.output_specs(self._inner_inputs(inputs))
        self.counter, self.old_weight, self.old_fixed = 0, None, None  # as nnabla's setup
        return specs

    def _select(self, xp, w, indicator):
        """The indicator after this forward's selection (forward number ``counter``)."""
        if self.counter not in self.inq_iterations:
            return indicator
        if self.counter == self.inq_iterations[-1]:
            return xp.ones_like(indicator)
        learnable = indicator == 0
        indicator = indicator.copy()
        if self.selection_algorithm == "random":
            seed = random.pseed if self.seed == -1 else self.seed
            draws = bernoulli_halves(seed, int(learnable.sum()))
            indicator[learnable] = xp.asarray(draws)
            return indicator
        # the largest |w| first (ties by position), until half the learnable are fixed
        order = xp.argsort(-xp.abs(w.reshape(-1)), kind="stable")
        half = int(learnable.sum()) // 2
        candidates = order[learnable.reshape(-1)[order]]
        chosen = candidates[:half] if half else order[:1][learnable.reshape(-1)[order[:1]]]
        indicator.reshape(-1)[chosen] = 1
        return indicator

    def _quantized(self, xp, w, fixed):
        """The fixed weights rounded to a power of two (exponent rounded up from 1.5 on),
        from 2^(n1 + 1 - 2^(num_bits - 2)) to 2^n1 (n1: the largest |w|'s rounded
        exponent), or to 0 below half the least; the others as they are."""
        dtype = w.dtype.type
        largest = dtype(xp.abs(w).max().item()) if w.size else dtype(0)
        largest = dtype(1) if largest == 0 else largest
        exponent = np.log2(largest)
        n1 = int(np.floor(exponent) + (exponent - np.floor(exponent) >= _LOG2_ONE_AND_HALF))
        n2 = n1 + 1 - int(2.0 ** (self.num_bits - 2))
        magnitude = xp.abs(w)
        with np.errstate(divide="ignore", invalid="ignore"):  # |w| = 0: pruned below
            b = xp.log2(magnitude)
            e = xp.clip(xp.floor(b) + (b - xp.floor(b) >= dtype(_LOG2_ONE_AND_HALF)), n2, n1)
        power = xp.where(w < 0, -1, 1) * xp.exp2(e)
        power = xp.where(magnitude < dtype(2.0 ** (n2 - 1)), 0, power)
        return xp.where(fixed, power, w).astype(w.dtype)

    def forward_arrays(self, xp, xs):
        w, given = xs[1], xs[2]
        if self.old_fixed is not None:  # the fixed weights as the last forward left them
            w = xp.where(self.old_fixed, self.old_weight, w)
        indicator = self._select(xp, w, given.astype(np.int64))
        fixed = indicator == 1
        w = self._quantized(xp, w, fixed)
        self.update_input(1, w)
        self.update_input(2, indicator.astype(given.dtype))
        ys = self.inner.forward_arrays(xp, [xs[0], w] + list(xs[3:]))
        self.counter += 1
        self.old_weight, self.old_fixed = w, fixed
        return ys

    def need_setup_recompute(self, output: int) -> bool:
        return False  # as nnabla's: recomputing repeats the inner function alone

    def recompute(self, inputs: Sequence[Variable], outputs: Sequence[Variable]) -> None:
        """The inner function again on the inputs as they are (nnabla's recomputation):
        no selection, no rounding, no count."""
        xp = self.xp
        xs = [x.data.data for x in self._inner_inputs(inputs)]
        for y, array in zip(outputs, self.inner.forward_arrays(xp, xs)):
            y.data.take(array, self)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        grads = self.inner.backward_arrays(xp, self._inner_inputs(xs), None, gys,
                                           self._inner_inputs(need_grads))
        return (grads[0], grads[1], None) + tuple(grads[2:])

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """The inner function's gradient graph, on the weight as forward wrote it."""
        inner = self.inner_call(F, *self._inner_inputs(xs)).parent
        grads = bilinear_backward_graph(inner, F, inner.inputs, inner.outputs, gys,
                                        self._inner_inputs(need_grads))
        return [grads[0], grads[1], None] + list(grads[2:])

    def inner_call(self, F, x, w, b=None) -> Variable:
        """The inner function on variables."""
        raise NotImplementedError


def _inq_params(fn) -> Params:
    return {"num_bits": int(fn.num_bits), "inq_iterations": ints(fn.inq_iterations),
            "selection_algorithm": fn.selection_algorithm, "seed": int(fn.seed)}


_INQ_FIELDS = ("num_bits", "inq_iterations", "selection_algorithm", "seed")


class INQAffine(_INQ):
    """An affine with the weight quantized incrementally to powers of two."""

    nnabla_spec = FunctionSpec("INQAffine", "inq_affine_param", ("base_axis",) + _INQ_FIELDS,
                               lambda fn: {"base_axis": int(fn.inner.base_axis),
                                           **_inq_params(fn)},
                               call("inq_affine", "base_axis", *_INQ_FIELDS))

    def __init__(self, base_axis: int, *inq):
        self.inner = Affine(base_axis)
        self._init_inq(*inq)

    def inner_call(self, F, x, w, b=None):
        return F.affine(x, w, b, self.inner.base_axis)


_CONVOLUTION_FIELDS = ("base_axis", "pad", "stride", "dilation", "group") + _INQ_FIELDS


class INQConvolution(_INQ):
    """A convolution (channels first) with the weight quantized incrementally to powers
    of two."""

    nnabla_spec = FunctionSpec(
        "INQConvolution", "inq_convolution_param", _CONVOLUTION_FIELDS,
        lambda fn: {"base_axis": int(fn.inner.axis), "pad": ints(fn.inner.pad),
                    "stride": ints(fn.inner.stride), "dilation": ints(fn.inner.dilation),
                    "group": int(fn.inner.group), **_inq_params(fn)},
        call("inq_convolution", *_CONVOLUTION_FIELDS))

    def __init__(self, base_axis: int, pad, stride, dilation, group: int, *inq):
        self.inner = Convolution(base_axis, pad, stride, dilation, group, False)
        self._init_inq(*inq)

    def inner_call(self, F, x, w, b=None):
        c = self.inner
        return F.convolution(x, w, b, c.axis, c.pad, c.stride, c.dilation, c.group)


def _inq_arguments(owner: str, num_bits, inq_iterations, selection_algorithm, seed) -> tuple:
    """The INQ arguments, checked: num_bits >= 2 (one bit codes the zero), iterations a
    sequence of ints, one of the two selection algorithms, an int seed (-1: the global)."""
    num_bits = number_of(owner, "num_bits", num_bits, integer=True)
    if num_bits < 2:
        raise argument_error(owner, f"num_bits must be >= 2 (one bit codes the zero), got "
                                    f"{num_bits}")
    if not isinstance(inq_iterations, (tuple, list)):
        raise argument_error(owner, f"inq_iterations must be a tuple of ints (the forward counts "
                                    f"that fix half of the learnable weights), got "
                                    f"{inq_iterations!r}")
    iterations = tuple(number_of(owner, "inq_iterations", i, integer=True)
                       for i in inq_iterations)
    if selection_algorithm not in _ALGORITHMS:
        raise argument_error(owner, f"selection_algorithm must be one of {_ALGORITHMS}, got "
                                    f"{selection_algorithm!r}")
    seed = number_of(owner, "seed", seed, integer=True)
    if not -1 <= seed < 2**32:
        raise argument_error(owner, f"seed must be -1 (the global seed) or in [0, 2^32), got "
                                    f"{seed}")
    return num_bits, iterations, selection_algorithm, seed


def inq_affine(x: Variable, weight: Variable, indicator_fixedweights: Variable,
               bias: Variable | None = None, base_axis: int = 1, num_bits: int = 4,
               inq_iterations: Sequence[int] = (), selection_algorithm: str = "largest_abs",
               seed: int = -1, n_outputs: int = -1, outputs=None) -> Variable:
    """Affine whose weights are fixed to powers of two of ``num_bits`` bits half at a time
    (at the forward counts in ``inq_iterations``), as nnabla's INQAffine; forward writes
    the weight and the indicator (1: fixed) in place."""
    owner = "F.inq_affine"
    default_outputs(owner, n_outputs, outputs)
    inq = _inq_arguments(owner, num_bits, inq_iterations, selection_algorithm, seed)
    inputs = (x, weight, indicator_fixedweights) + (() if bias is None else (bias,))
    return INQAffine(base_axis, *inq)(*inputs)


def inq_convolution(x: Variable, weight: Variable, indicator_fixedweights: Variable,
                    bias: Variable | None = None, base_axis: int = 1,
                    pad: Sequence[int] | None = None, stride: Sequence[int] | None = None,
                    dilation: Sequence[int] | None = None, group: int = 1, num_bits: int = 4,
                    inq_iterations: Sequence[int] = (), selection_algorithm: str = "largest_abs",
                    seed: int = -1, n_outputs: int = -1, outputs=None) -> Variable:
    """Convolution whose weights are fixed to powers of two of ``num_bits`` bits half at a
    time (at the forward counts in ``inq_iterations``), as nnabla's INQConvolution; forward
    writes the weight and the indicator (1: fixed) in place."""
    owner = "F.inq_convolution"
    default_outputs(owner, n_outputs, outputs)
    inq = _inq_arguments(owner, num_bits, inq_iterations, selection_algorithm, seed)
    inputs = (x, weight, indicator_fixedweights) + (() if bias is None else (bias,))
    return INQConvolution(base_axis, pad, stride, dilation, group, *inq)(*inputs)
