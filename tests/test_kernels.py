"""dpnb.kernels: batch normalization's compiled passes against NumPy in float32 and
float64 on rows (before, C, after), ReLU's select, Adam's update bit for bit against the
solver's NumPy passes, which arrays they serve, ``load``, and the switch that turns them off (``use``,
``DPNB_JIT=0``).  The LSTM step is held to NumPy's in test_functions_recurrent.py."""
import os
import subprocess
import sys

import numpy as np
import pytest

from dpnb import kernels

SHAPES = [(4, 3, 5), (1, 2, 1), (3, 1, 17)]


@pytest.fixture(autouse=True)
def numba_kernels():
    before = kernels.use(True)
    yield
    kernels.use(before)


def arrays(rng, shape, dtype):
    x = (rng.randn(*shape) * 3 + 2).astype(dtype)
    gy = rng.randn(*shape).astype(dtype)
    per_channel = [rng.randn(shape[1]).astype(dtype) for _ in range(4)]
    return x, gy, per_channel


def tolerance(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_passes_match_numpy(rng, shape, dtype):
    x, gy, (mean, scale, coef, shift) = arrays(rng, shape, dtype)
    c = lambda a: a.reshape(1, -1, 1)  # noqa: E731  (per channel, broadcast over rows)
    x64, gy64 = x.astype(np.float64), gy.astype(np.float64)
    centred = x64 - c(mean.astype(np.float64))
    sums = kernels.channel_sums(x)
    assert sums.dtype == np.float64
    np.testing.assert_allclose(sums, x64.sum(axis=(0, 2)), **tolerance(dtype))
    np.testing.assert_allclose(kernels.square_deviation_sums(x, mean),
                               (centred ** 2).sum(axis=(0, 2)), **tolerance(dtype))
    sums, dots = kernels.grad_sums(gy, x, mean)
    assert sums.dtype == dots.dtype == np.float64
    np.testing.assert_allclose(sums, gy64.sum(axis=(0, 2)), **tolerance(dtype))
    np.testing.assert_allclose(dots, (gy64 * centred).sum(axis=(0, 2)), **tolerance(dtype))
    y = kernels.normalize(x, mean, scale, shift)
    assert y.dtype == dtype and y.shape == shape
    np.testing.assert_allclose(y, centred * c(scale) + c(shift), **tolerance(dtype))
    np.testing.assert_allclose(kernels.normalize(x, mean, scale), centred * c(scale),
                               **tolerance(dtype))
    gx = kernels.input_grad(gy, scale, x, mean, coef, shift)
    assert gx.dtype == dtype
    np.testing.assert_allclose(gx, gy64 * c(scale) + centred * c(coef) + c(shift),
                               **tolerance(dtype))


def test_strided_rows_and_per_channel_arrays_of_any_shape(rng):
    """Rows that are a view with gaps, and per-channel arrays shaped (1, C, 1) in another
    dtype, as batch normalization hands them over."""
    base = rng.randn(4, 6, 10)
    x = base[:, ::2, 1:8]
    mean, scale = rng.randn(1, 3, 1).astype(np.float32), rng.randn(1, 3, 1)
    np.testing.assert_allclose(kernels.normalize(x, mean, scale), (x - mean) * scale,
                               rtol=1e-12)


def test_nan_and_infinity_keep_their_meaning():
    """Fast math may reorder the sums but not assume away NaN and infinity."""
    x = np.array([[[1.0, np.nan, 2.0]], [[np.inf, 0.0, 1.0]]], np.float32)
    ones = np.ones(1, np.float32)
    assert np.isnan(kernels.channel_sums(x)[0])
    assert np.isnan(kernels.square_deviation_sums(x, ones)[0])
    y = kernels.normalize(x, ones, ones)
    assert np.isnan(y[0, 0, 1]) and np.isposinf(y[1, 0, 0])
    assert np.isnan(kernels.grad_sums(x, x, ones)[1][0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_where_positive_selects_as_nnabla_relus_gradient(rng, dtype):
    """g where y > 0, else +0, with NaN and infinity in both (ReLU's gradient)."""
    y, g = rng.randn(2, 3, 7).astype(dtype), rng.randn(2, 3, 7).astype(dtype)
    y[0, 0, :4] = [np.nan, np.inf, -np.inf, 0]
    g[0, 1, :3] = [np.nan, np.inf, -np.inf]
    g[1, 0, :3] = [np.nan, np.inf, -np.inf]
    y[1, 0, :3] = -1
    got = kernels.where_positive(g, y)
    assert got.dtype == dtype and got.shape == g.shape
    want = np.where(y > 0, g, dtype(0))
    np.testing.assert_array_equal(got, want)
    assert not np.signbit(got[y <= 0]).any()


def test_which_arrays_they_serve(gpu):
    a = np.zeros((2, 3, 4), np.float32)
    assert kernels.for_arrays(np, a, a)
    assert kernels.for_arrays(np, a.astype(np.float64))
    assert not kernels.for_arrays(np, a.astype(np.float16))      # Numba has no half arithmetic
    assert not kernels.for_arrays(np, a, a.astype(np.float64))   # one dtype
    assert not kernels.for_arrays(gpu, gpu.asarray(a))           # device arrays: CuPy's path
    kernels.use(False)
    assert not kernels.for_arrays(np, a) and kernels.backend() == "numpy"
    kernels.use(True)
    assert kernels.backend().startswith("numba ")


def test_dpnb_jit_0_turns_them_off_in_a_process():
    probe = "from dpnb import kernels; print(kernels.backend())"
    env = {**os.environ, "DPNB_JIT": "0"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "numpy"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_rounds_as_numpys_passes(rng, dtype):
    """Three Adam steps through the compiled loop and through the solver's NumPy passes:
    the same bits (the same roundings in the same order), a slice of the flat storage
    included."""
    from dpnb.solvers.adaptive import _adam_step

    # Weights far below the step, so that the step's last bits show in them.
    start = [(rng.randn(40) * s).astype(dtype) for s in (1e-6, 1, 0.1, 0.01)]
    runs = {}
    for compiled in (True, False):
        kernels.use(compiled)
        w, g, m, v = (a.copy() for a in start)
        v = np.abs(v)
        for t in (1, 2, 3):
            _adam_step(np, w[5:35], g[5:35], m[5:35], v[5:35], t, np.empty(30, dtype),
                       1e-3, 0.9, 0.999, 1e-8)
        runs[compiled] = (w, m, v)
    for compiled, numpy_only in zip(runs[True], runs[False]):
        np.testing.assert_array_equal(compiled, numpy_only)
    assert not np.array_equal(runs[True][0], start[0])   # it did move the slice
    np.testing.assert_array_equal(runs[True][0][:5], start[0][:5])   # and nothing else


def test_load_compiles_the_float32_loops_ahead_of_their_first_calls():
    """In a fresh process (here earlier tests have compiled them already): no loop has a
    float32 signature before ``load``, every one has after."""
    probe = """
from dpnb import kernels, numba_loops
loops = [numba_loops.channel_sums, numba_loops.square_deviation_sums, numba_loops.normalize,
         numba_loops.grad_sums, numba_loops.input_grad, numba_loops.where_positive,
         numba_loops.adam, numba_loops.lstm_step_grads]
compiled = lambda: [any("float32" in str(s) for s in loop.signatures) for loop in loops]
before = compiled()
kernels.load()
print(before, compiled())
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("] [") == ["[" + ", ".join(["False"] * 8), ", ".join(["True"] * 8)
                                        + "]\n"]


def test_turning_them_on_without_numba_says_what_to_install(monkeypatch):
    monkeypatch.setattr(kernels, "_HAVE_NUMBA", False)
    with pytest.raises(ImportError, match=r"pip install 'dpnb\[jit\]'"):
        kernels.use(True)
    assert kernels.backend().startswith("numba ")   # what was on stays on
