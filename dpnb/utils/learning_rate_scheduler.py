"""nnabla's ``nnabla.utils.learning_rate_scheduler``: the learning rate of an iteration
(counted from 0) under polynomial, cosine, exponential and step decay, and a linear
warm-up in front of any of them."""
from __future__ import annotations

import math
from collections.abc import Sequence


class BaseLearningRateScheduler:
    """A schedule: ``get_learning_rate(iter)`` for iterations counted from 0."""

    def get_learning_rate(self, iter: int) -> float:
        raise NotImplementedError(f"{type(self).__name__} must define get_learning_rate(iter)")


class PolynomialScheduler(BaseLearningRateScheduler):
    """``init_lr * (1 - iter / max_iter) ** power``."""

    def __init__(self, init_lr: float, max_iter: int, power: float):
        self.init_lr, self.max_iter, self.power = init_lr, max_iter, power

    def get_learning_rate(self, iter: int) -> float:
        return self.init_lr * (1.0 - iter / self.max_iter) ** self.power


class CosineScheduler(BaseLearningRateScheduler):
    """Half a cosine from ``init_lr`` at iteration 0 to 0 at ``max_iter``."""

    def __init__(self, init_lr: float, max_iter: int):
        self.init_lr, self.max_iter = init_lr, max_iter

    def get_learning_rate(self, iter: int) -> float:
        return self.init_lr * (math.cos(iter / self.max_iter * math.pi) + 1.0) * 0.5


class ExponentialScheduler(BaseLearningRateScheduler):
    """``init_lr`` multiplied by ``gamma`` once every ``iter_interval`` iterations."""

    def __init__(self, init_lr: float, gamma: float, iter_interval: int = 1):
        self.init_lr, self.gamma, self.iter_interval = init_lr, gamma, iter_interval

    def get_learning_rate(self, iter: int) -> float:
        return self.init_lr * self.gamma ** (iter // self.iter_interval)


class StepScheduler(BaseLearningRateScheduler):
    """``init_lr`` multiplied by ``gamma`` at each iteration of ``iter_steps`` reached."""

    def __init__(self, init_lr: float, gamma: float, iter_steps: Sequence[int]):
        self.init_lr, self.gamma, self.iter_steps = init_lr, gamma, iter_steps

    def get_learning_rate(self, iter: int) -> float:
        return self.init_lr * self.gamma ** sum(iter >= step for step in self.iter_steps)


class LinearWarmupScheduler(BaseLearningRateScheduler):
    """``scheduler``'s rate, scaled by ``(iter + 1) / warmup_iter`` before ``warmup_iter``."""

    def __init__(self, scheduler: BaseLearningRateScheduler, warmup_iter: int):
        self.scheduler, self.warmup_iter = scheduler, warmup_iter

    def get_learning_rate(self, iter: int) -> float:
        rate = self.scheduler.get_learning_rate(iter)
        return rate * (iter + 1) / self.warmup_iter if iter < self.warmup_iter else rate
