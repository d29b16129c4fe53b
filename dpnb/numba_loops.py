"""The loops of dpnb.kernels, compiled by Numba at their first call (and kept in its cache
beside this file, or in the user's where this directory is read-only); dpnb.kernels checks
and shapes what it hands them.  Imported only where they run: importing Numba takes a
tenth of a second."""
import numba
import numpy as np

# Reassociation lets the sums run in SIMD lanes; NaN and infinity keep their meaning.
jit = numba.njit(cache=True, nogil=True, error_model="numpy",
                 fastmath={"reassoc", "contract"})


@jit
def channel_sums(x, out):
    """out = sum(x) per channel, accumulated in float64."""
    for c in range(x.shape[1]):
        total = 0.0
        for b in range(x.shape[0]):
            for i in range(x.shape[2]):
                total += x[b, c, i]
        out[c] = total


@jit
def square_deviation_sums(x, mean, out):
    """out = sum((x - mean)^2) per channel, accumulated in float64."""
    for c in range(x.shape[1]):
        total = 0.0
        for b in range(x.shape[0]):
            for i in range(x.shape[2]):
                d = x[b, c, i] - mean[c]
                total += d * d
        out[c] = total


@jit
def normalize(x, mean, scale, shift, out):
    """out = (x - mean) * scale + shift."""
    for b in range(x.shape[0]):
        for c in range(x.shape[1]):
            m, s, h = mean[c], scale[c], shift[c]
            for i in range(x.shape[2]):
                out[b, c, i] = (x[b, c, i] - m) * s + h


@jit
def grad_sums(gy, x, mean, sums, dots):
    """sums = sum(gy), dots = sum(gy * (x - mean)) per channel, accumulated in float64."""
    for c in range(x.shape[1]):
        total, dot = 0.0, 0.0
        for b in range(x.shape[0]):
            for i in range(x.shape[2]):
                g = gy[b, c, i]
                total += g
                dot += g * (x[b, c, i] - mean[c])
        sums[c], dots[c] = total, dot


@jit
def input_grad(gy, scale, x, mean, coef, shift, out):
    """out = gy * scale + (x - mean) * coef + shift."""
    for b in range(x.shape[0]):
        for c in range(x.shape[1]):
            s, m, k, h = scale[c], mean[c], coef[c], shift[c]
            for i in range(x.shape[2]):
                out[b, c, i] = gy[b, c, i] * s + (x[b, c, i] - m) * k + h


@jit
def where_positive(g, y, out):
    """out = g where y > 0, else 0 (flat arrays)."""
    for i in range(g.shape[0]):
        out[i] = g[i] if y[i] > 0 else 0


# No fast math: the same float roundings in the same order as NumPy's whole-array passes.
exact = numba.njit(cache=True, nogil=True, error_model="numpy")


@exact
def adam(w, g, m, v, hyper):
    """Adam's update of w, m and v in place, element by element, in the order of
    dpnb.solvers.adaptive's passes; ``hyper`` holds beta1, 1 - beta1, beta2, 1 - beta2,
    eps and the step size in w's dtype, as NumPy casts them."""
    beta1, rest1, beta2, rest2, eps, step = hyper[0], hyper[1], hyper[2], hyper[3], \
        hyper[4], hyper[5]
    for i in range(w.shape[0]):
        gi = g[i]
        mi = m[i] * beta1 + gi * rest1
        vi = v[i] * beta2 + gi * gi * rest2
        m[i], v[i] = mi, vi
        w[i] -= mi / (np.sqrt(vi) + eps) * step


@jit
def lstm_step_grads(dh, dc, g, gates, tc, c_prev, da, one):
    """One step back through LSTM cells, gates in dpnb's order o, i, f, g (after their
    nonlinearities), all (D, B, ...): dh += g; da, the gates' pre-activation gradients,
    from dh and dc; then dc carried to the step before (times f)."""
    n = dh.shape[2]
    for d in range(dh.shape[0]):
        for b in range(dh.shape[1]):
            for j in range(n):
                h = dh[d, b, j] + g[d, b, j]
                dh[d, b, j] = h
                o, i, f, z = gates[d, b, j], gates[d, b, n + j], gates[d, b, 2 * n + j], \
                    gates[d, b, 3 * n + j]
                t = tc[d, b, j]
                c = dc[d, b, j] + h * o * (one - t * t)
                da[d, b, j] = h * t * o * (one - o)
                da[d, b, n + j] = c * z * i * (one - i)
                da[d, b, 2 * n + j] = c * c_prev[d, b, j] * f * (one - f)
                da[d, b, 3 * n + j] = c * i * (one - z * z)
                dc[d, b, j] = c * f
