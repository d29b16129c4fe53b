"""Elementwise passes compiled by Numba where it is installed (the ``jit`` extra): batch
normalization's per-channel passes, over NumPy arrays of float32 or float64 seen as rows
(before, C, after), ReLU and its gradient, Adam's update and an LSTM step's way back.
NumPy takes four or five whole-array operations for batch normalization's input gradient
and eleven for an Adam step where these take one loop; memory (or, on a small network,
the calls themselves) bounds them, not arithmetic: on ResNet-23 they take the CPU step
from 1.03x to 0.87x PyTorch's.

``for_arrays`` says whether they serve some arrays; the callers keep their NumPy path for
CuPy, float16, a Python without Numba, and ``DPNB_JIT=0`` (or ``use``), which selects it
everywhere.  The sums accumulate in float64; Adam's update rounds as NumPy's passes do."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os

import numpy as np

_HAVE_NUMBA = importlib.util.find_spec("numba") is not None
_enabled = _HAVE_NUMBA and os.environ.get("DPNB_JIT", "1") != "0"


def use(on: bool) -> bool:
    """Turn the compiled kernels on or off for this process (on needs Numba); what was
    in force before."""
    global _enabled
    if on and not _HAVE_NUMBA:
        raise ImportError("dpnb's compiled kernels need Numba: pip install 'dpnb[jit]'")
    before, _enabled = _enabled, bool(on)
    return before


def backend() -> str:
    """What runs these passes here: "numba X.Y.Z" or "numpy"."""
    return f"numba {importlib.metadata.version('numba')}" if _enabled else "numpy"


def for_arrays(xp, *arrays) -> bool:
    """Whether the kernels serve these arrays: NumPy, float32 or float64, one dtype, and
    the kernels on."""
    if not _enabled or xp is not np:
        return False
    dtype = arrays[0].dtype
    return dtype in (np.float32, np.float64) and all(a.dtype == dtype for a in arrays)


def _loops():
    """The compiled loops, imported at their first use (which a process that never
    calls one does not pay)."""
    from . import numba_loops
    return numba_loops


def _channels(a, rows):
    """A per-channel array (any shape of C elements) as a contiguous (C,) of ``rows``'
    dtype."""
    return np.ascontiguousarray(a, dtype=rows.dtype).reshape(-1)


def channel_sums(rows):
    """sum(x) per channel of rows (before, C, after): (C,) float64."""
    out = np.empty(rows.shape[1], np.float64)
    _loops().channel_sums(rows, out)
    return out


def square_deviation_sums(rows, mean):
    """sum((x - mean)^2) per channel of rows (before, C, after): (C,) float64."""
    out = np.empty(rows.shape[1], np.float64)
    _loops().square_deviation_sums(rows, _channels(mean, rows), out)
    return out


def normalize(rows, mean, scale, shift=None):
    """(x - mean) * scale + shift (None: 0) per channel: a new array of rows' shape."""
    out = np.empty_like(rows)
    shift = np.zeros(rows.shape[1], rows.dtype) if shift is None else _channels(shift, rows)
    _loops().normalize(rows, _channels(mean, rows), _channels(scale, rows), shift, out)
    return out


def grad_sums(gy_rows, rows, mean):
    """sum(gy) and sum(gy * (x - mean)) per channel: two (C,) float64."""
    sums, dots = np.empty(rows.shape[1], np.float64), np.empty(rows.shape[1], np.float64)
    _loops().grad_sums(gy_rows, rows, _channels(mean, rows), sums, dots)
    return sums, dots


def input_grad(gy_rows, scale, rows, mean, coef, shift):
    """gy * scale + (x - mean) * coef + shift per channel: a new array of rows' shape."""
    out = np.empty_like(rows)
    _loops().input_grad(gy_rows, _channels(scale, rows), rows, _channels(mean, rows),
                        _channels(coef, rows), _channels(shift, rows), out)
    return out


def where_positive(g, y):
    """``g`` where ``y > 0``, else 0, of two C-contiguous arrays of one shape (ReLU, with
    ``g`` = ``y`` = x, and its gradient): a new array."""
    out = np.empty_like(g)
    _loops().where_positive(g.reshape(-1), y.reshape(-1), out.reshape(-1))
    return out


def adam(w, g, m, v, beta1: float, beta2: float, eps: float, step: float) -> None:
    """Adam's update of the 1-D ``w``, ``m`` and ``v`` in place from ``g`` (dpnb.solvers'
    ``_adam_step``, whose results it gives bit for bit), ``step`` the bias-corrected
    learning rate."""
    hyper = np.array([beta1, 1 - beta1, beta2, 1 - beta2, eps, step], w.dtype)
    _loops().adam(w, g, m, v, hyper)


def lstm_step_grads(dh, dc, g, gates, tc, c_prev, da) -> None:
    """One step back through LSTM cells in place (dpnb.functions.recurrent's gate order
    o, i, f, g), all (D, B, ...): ``dh += g``; ``da`` (D, B, 4H), the gradients of the
    gates' pre-activations, from ``dh`` and ``dc`` through the gates, the cell's tanh
    ``tc`` and the cell before ``c_prev``; then ``dc`` times f, for the step before."""
    _loops().lstm_step_grads(dh, dc, g, gates, tc, c_prev, da, dh.dtype.type(1))


def load() -> None:
    """Import Numba and compile (or load from its cache) the float32 loops now instead of
    at their first calls: a long-lived process pays the same once either way, and a
    memory baseline taken after this leaves the libraries out, as one taken after
    ``import torch`` leaves PyTorch's out.  Nothing where the kernels are off."""
    if not _enabled:
        return
    one, channel = np.ones((1, 1, 1), np.float32), np.ones(1, np.float32)
    channel_sums(one)
    square_deviation_sums(one, channel)
    normalize(one, channel, channel)
    grad_sums(one, one, channel)
    input_grad(one, channel, one, channel, channel, channel)
    where_positive(one, one)
    adam(channel.copy(), channel, channel.copy(), channel.copy(), 0.9, 0.999, 1e-8, 1e-3)
    lstm_step_grads(one.copy(), one.copy(), one, np.ones((1, 1, 4), np.float32), one, one,
                    np.empty((1, 1, 4), np.float32))
