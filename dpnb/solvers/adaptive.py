"""Rules that scale each element's step by running averages of its gradient: Adagrad,
RMSprop and RMSpropGraves, Adadelta, and Adam with its variants (AdamW, Adamax,
AMSGRAD, AdaBound, AMSBound, AdaBelief, Lamb)."""
from __future__ import annotations

import math

import numpy as np

from .. import kernels
from .base import Solver


def _bias_corrected(alpha: float, beta1: float, beta2: float, t: int) -> float:
    """Adam's step size ``alpha * sqrt(1 - beta2**t) / (1 - beta1**t)``."""
    return alpha * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)


def _adam_step(xp, w, g, m, v, t, tmp, alpha, beta1, beta2, eps) -> None:
    """``m``, ``v`` <- moving averages of ``g`` and ``g**2``;
    ``w <- w - alpha * sqrt(1 - beta2**t) / (1 - beta1**t) * m / (sqrt(v) + eps)``: one
    compiled loop where dpnb.kernels serves the arrays, else these passes (the same
    roundings)."""
    if kernels.for_arrays(xp, w, g, m, v):
        kernels.adam(w, g, m, v, beta1, beta2, eps, _bias_corrected(alpha, beta1, beta2, t))
        return
    m *= beta1
    m += xp.multiply(g, 1 - beta1, out=tmp)
    v *= beta2
    xp.multiply(g, g, out=tmp)
    tmp *= 1 - beta2
    v += tmp
    xp.sqrt(v, out=tmp)
    tmp += eps
    xp.divide(m, tmp, out=tmp)
    tmp *= _bias_corrected(alpha, beta1, beta2, t)
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
