"""The initializers of nnabla's network files (a ``Variable``'s ``initializer``: a type
such as ``NormalConvolutionHeForward`` and a multiplier) as callables taking a shape,
and back: what graph_def gives a parameter it restores from a file and writes again."""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from ..initializer import (ConstantInitializer, NormalInitializer, RangeInitializer,
                           UniformInitializer, calc_normal_std_glorot, calc_normal_std_he_backward,
                           calc_normal_std_he_forward, calc_uniform_lim_glorot)

# How a weight's shape gives (inmaps, outmaps, kernel) to the scale rules, per layout.
_LAYOUTS: dict[str, Callable[[Sequence[int]], tuple]] = {
    "Affine": lambda s: (s[0], int(np.prod(s[1:])), (1, 1)),
    "Convolution": lambda s: (s[-3], s[0], tuple(s[-2:])),
    "CLConv": lambda s: (s[-1], s[0], tuple(s[1:3])),
}
_NORMAL_RULES = {"He": calc_normal_std_he_forward, "HeForward": calc_normal_std_he_forward,
                 "HeBackward": calc_normal_std_he_backward, "Glorot": calc_normal_std_glorot}
_SCALED = re.compile(r"^(Normal|Uniform)(Affine|Convolution|CLConv)"
                     r"(He|HeForward|HeBackward|Glorot)$")


class ProtoInitializer:
    """nnabla's file initializer ``type`` with its ``multiplier``: called with a shape,
    draws from ``rng`` as nnabla does when it restores a network."""

    def __init__(self, type_name: str, multiplier: float, rng: np.random.RandomState):
        self.type, self.multiplier, self.rng = type_name, float(multiplier), rng

    def __repr__(self) -> str:
        return f"ProtoInitializer({self.type!r}, {self.multiplier!r})"

    def __call__(self, shape: Sequence[int]) -> np.ndarray:
        shape, m = tuple(int(s) for s in shape), self.multiplier
        if self.type == "Normal":
            return NormalInitializer(m, rng=self.rng)(shape)
        if self.type == "Uniform":
            return UniformInitializer((-m, m), rng=self.rng)(shape)
        if self.type == "Constant":
            return ConstantInitializer(m)(shape)
        if self.type == "Range":
            return RangeInitializer(0, 1)(shape) * m
        family, layout, rule = _SCALED.match(self.type).groups()
        inmaps, outmaps, kernel = _LAYOUTS[layout](shape)
        if family == "Uniform":
            lim = calc_uniform_lim_glorot(inmaps, outmaps, kernel=kernel)
            return UniformInitializer(lim, rng=self.rng)(shape) * m
        sigma = _NORMAL_RULES[rule](inmaps, outmaps, kernel=kernel)
        return NormalInitializer(sigma, rng=self.rng)(shape) * m


def initializer_from_proto(message, rng: np.random.RandomState) -> ProtoInitializer | None:
    """The initializer of a ``Variable`` message, or None where it names none that nnabla
    restores (nnabla then leaves the parameter to its default)."""
    type_name = message.initializer.type
    match = _SCALED.match(type_name)
    if type_name in ("Normal", "Uniform", "Constant", "Range") or (
            match and (match.group(1) == "Normal" or match.group(3) == "Glorot")):
        return ProtoInitializer(type_name, message.initializer.multiplier, rng)
    return None


def initializer_to_proto(initializer, message) -> None:
    """Write ``initializer`` into a ``Variable`` message's ``initializer`` field where it
    is one nnabla's files hold: a restored one, or a Constant, Uniform (symmetric limits:
    the multiplier is the upper one) or Normal initializer."""
    if isinstance(initializer, ProtoInitializer):
        kind, multiplier = initializer.type, initializer.multiplier
    elif isinstance(initializer, ConstantInitializer):
        kind, multiplier = "Constant", initializer.value
    elif isinstance(initializer, UniformInitializer):
        kind, multiplier = "Uniform", -initializer.lim[0]
    elif isinstance(initializer, NormalInitializer):
        kind, multiplier = "Normal", initializer.sigma
    else:
        return
    message.initializer.type = kind
    message.initializer.multiplier = float(multiplier)
