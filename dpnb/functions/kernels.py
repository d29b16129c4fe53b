"""Batch normalization's per-channel passes, each one loop over memory compiled by Numba
where it is installed (the ``jit`` extra), for NumPy arrays of float32 or float64 seen as
rows (before, C, after).  NumPy takes four or five whole-array operations for the input
gradient where these take one, and memory, not arithmetic, bounds them: on ResNet-23 the
normalization's backward falls from a sixth of the CPU step to a twentieth.

``for_arrays`` says whether they serve an array; the callers keep their NumPy path for
CuPy, float16, other layouts, a Python without Numba, and ``DPNB_JIT=0`` (or ``use``),
which selects it everywhere.  The sums accumulate in float64."""
from __future__ import annotations

import os

import numpy as np

try:
    import numba
except ImportError:
    numba = None

_enabled = numba is not None and os.environ.get("DPNB_JIT", "1") != "0"


def use(on: bool) -> bool:
    """Turn the compiled kernels on or off for this process (on needs Numba); what was
    in force before."""
    global _enabled
    if on and numba is None:
        raise ImportError("dpnb's compiled kernels need Numba: pip install 'dpnb[jit]'")
    before, _enabled = _enabled, bool(on)
    return before


def backend() -> str:
    """What runs the per-channel passes here: "numba X.Y.Z" or "numpy"."""
    return f"numba {numba.__version__}" if _enabled else "numpy"


def for_arrays(xp, *arrays) -> bool:
    """Whether the kernels serve these arrays: NumPy, float32 or float64, one dtype, and
    the kernels on."""
    if not _enabled or xp is not np:
        return False
    dtype = arrays[0].dtype
    return dtype in (np.float32, np.float64) and all(a.dtype == dtype for a in arrays)


if numba is not None:
    # Reassociation lets the sums run in SIMD lanes; NaN and infinity keep their meaning.
    _jit = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})

    @_jit
    def _square_deviation_sums(x, mean, out):
        for c in range(x.shape[1]):
            total = 0.0
            for b in range(x.shape[0]):
                for i in range(x.shape[2]):
                    d = x[b, c, i] - mean[c]
                    total += d * d
            out[c] = total

    @_jit
    def _normalize(x, mean, scale, shift, out):
        for b in range(x.shape[0]):
            for c in range(x.shape[1]):
                m, s, h = mean[c], scale[c], shift[c]
                for i in range(x.shape[2]):
                    out[b, c, i] = (x[b, c, i] - m) * s + h

    @_jit
    def _grad_sums(gy, x, mean, sums, dots):
        for c in range(x.shape[1]):
            total, dot = 0.0, 0.0
            for b in range(x.shape[0]):
                for i in range(x.shape[2]):
                    g = gy[b, c, i]
                    total += g
                    dot += g * (x[b, c, i] - mean[c])
            sums[c], dots[c] = total, dot

    @_jit
    def _input_grad(gy, scale, x, mean, coef, shift, out):
        for b in range(x.shape[0]):
            for c in range(x.shape[1]):
                s, m, k, h = scale[c], mean[c], coef[c], shift[c]
                for i in range(x.shape[2]):
                    out[b, c, i] = gy[b, c, i] * s + (x[b, c, i] - m) * k + h


def _channels(a, rows):
    """A per-channel array (any shape of C elements) as a contiguous (C,) of ``rows``'
    dtype."""
    return np.ascontiguousarray(a, dtype=rows.dtype).reshape(-1)


def square_deviation_sums(rows, mean):
    """sum((x - mean)^2) per channel of rows (before, C, after): (C,) float64."""
    out = np.empty(rows.shape[1], np.float64)
    _square_deviation_sums(rows, _channels(mean, rows), out)
    return out


def normalize(rows, mean, scale, shift=None):
    """(x - mean) * scale + shift (None: 0) per channel: a new array of rows' shape."""
    out = np.empty_like(rows)
    shift = np.zeros(rows.shape[1], rows.dtype) if shift is None else _channels(shift, rows)
    _normalize(rows, _channels(mean, rows), _channels(scale, rows), shift, out)
    return out


def grad_sums(gy_rows, rows, mean):
    """sum(gy) and sum(gy * (x - mean)) per channel: two (C,) float64."""
    sums, dots = np.empty(rows.shape[1], np.float64), np.empty(rows.shape[1], np.float64)
    _grad_sums(gy_rows, rows, _channels(mean, rows), sums, dots)
    return sums, dots


def input_grad(gy_rows, scale, rows, mean, coef, shift):
    """gy * scale + (x - mean) * coef + shift per channel: a new array of rows' shape."""
    out = np.empty_like(rows)
    _input_grad(gy_rows, _channels(scale, rows), rows, _channels(mean, rows),
                _channels(coef, rows), _channels(shift, rows), out)
    return out
