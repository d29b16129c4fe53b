"""Gradient descent and its momentum rules: Sgd, Momentum, Nesterov, SgdW, Lars, Lion."""
from __future__ import annotations



from .base import Solver


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
