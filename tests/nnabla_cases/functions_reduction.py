"""Reduction, scan, sort and top-k cases (see functions.py)."""
import numpy as np

from .functions import Case

R = np.random.RandomState(1)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


def away(*shape, low=0.3, high=1.3):
    """Float32 inputs of either sign with magnitudes in [low, high): away from zero,
    for products, norms' kinks and divisions."""
    return (u(*shape, low=low, high=high) * R.choice([-1.0, 1.0], shape)).astype(np.float32)


WITH_ZEROS = np.array([[0.5, 0.0, 2.0, -1.5], [0.0, 1.5, 0.0, 0.5], [1.2, -0.7, 0.9, 1.1]],
                      np.float32)

CASES = [
    Case("sum axes 0 2 keepdims", lambda lib, x: lib.F.sum(x, axis=(0, 2), keepdims=True), (u(2, 3, 4),)),
    Case("sum all", lambda lib, x: lib.F.sum(x), (u(2, 3, 4),)),
    Case("sum axis -1", lambda lib, x: lib.F.sum(x, axis=-1), (u(2, 3, 4),)),
    Case("sum axes list", lambda lib, x: lib.F.sum(x, axis=[2, 0]), (u(2, 3, 4),)),
    Case("mean all keepdims", lambda lib, x: lib.F.mean(x, keepdims=True), (u(2, 3, 4),)),
    Case("mean axis 1", lambda lib, x: lib.F.mean(x, axis=1), (u(2, 3, 4),)),
    Case("mean axes 0 2", lambda lib, x: lib.F.mean(x, axis=(0, 2)), (u(2, 3, 4),)),
    Case("max with_index", lambda lib, x: lib.F.max(x, axis=1, with_index=True), (u(3, 4),)),
    Case("max all", lambda lib, x: lib.F.max(x), (u(2, 3, 4),)),
    Case("max axes keepdims with_index",
         lambda lib, x: lib.F.max(x, axis=(0, 2), keepdims=True, with_index=True), (u(2, 3, 4),)),
    Case("max only_index", lambda lib, x: lib.F.max(x, axis=-1, only_index=True), (u(2, 3, 4),)),
    Case("min axis 0", lambda lib, x: lib.F.min(x, axis=0), (u(3, 4),)),
    Case("min keepdims with_index",
         lambda lib, x: lib.F.min(x, axis=(1, 2), keepdims=True, with_index=True), (u(2, 3, 4),)),
    Case("min only_index", lambda lib, x: lib.F.min(x, axis=1, only_index=True), (u(3, 4),)),
    Case("prod all", lambda lib, x: lib.F.prod(x), (away(2, 3, 2),)),
    Case("prod axis 1 keepdims", lambda lib, x: lib.F.prod(x, axis=1, keepdims=True), (away(2, 3, 4),)),
    Case("prod axes 0 2", lambda lib, x: lib.F.prod(x, axis=(0, 2)), (away(2, 3, 4),)),
    Case("norm default", lambda lib, x: lib.F.norm(x), (u(2, 3, 4),)),
    Case("norm p1 axis 1 keepdims", lambda lib, x: lib.F.norm(x, p=1, axis=1, keepdims=True),
         (away(2, 3, 4),)),
    Case("norm p3 axes", lambda lib, x: lib.F.norm(x, p=3, axis=(0, 2)), (away(2, 3, 4),)),
    Case("norm p2.5 axis -1", lambda lib, x: lib.F.norm(x, p=2.5, axis=-1), (away(3, 4),)),
    Case("cumsum default", lambda lib, x: lib.F.cumsum(x), (u(3, 4),)),
    Case("cumsum axis 1 exclusive", lambda lib, x: lib.F.cumsum(x, axis=1, exclusive=True), (u(2, 4, 3),)),
    Case("cumsum axis -1 reverse", lambda lib, x: lib.F.cumsum(x, axis=-1, reverse=True), (u(2, 3, 4),)),
    Case("cumsum exclusive reverse",
         lambda lib, x: lib.F.cumsum(x, axis=0, exclusive=True, reverse=True), (u(4, 3),)),
    Case("cumprod default", lambda lib, x: lib.F.cumprod(x), (away(3, 4),)),
    Case("cumprod axis 1 exclusive", lambda lib, x: lib.F.cumprod(x, axis=1, exclusive=True),
         (away(2, 4, 3),)),
    Case("cumprod axis -1 reverse", lambda lib, x: lib.F.cumprod(x, axis=-1, reverse=True),
         (away(2, 3, 4),)),
    Case("cumprod exclusive reverse",
         lambda lib, x: lib.F.cumprod(x, axis=1, exclusive=True, reverse=True), (away(3, 4),)),
    Case("cumprod with zeros", lambda lib, x: lib.F.cumprod(x, axis=1), (WITH_ZEROS,)),
    Case("cumprod with zeros reverse exclusive",
         lambda lib, x: lib.F.cumprod(x, axis=1, exclusive=True, reverse=True), (WITH_ZEROS,)),
    # nnabla's sort sends each output gradient through the sorting permutation instead
    # of its inverse (a wrong gradient); dpnb's is checked by finite differences in
    # tests/test_functions_reduction.py
    Case("sort default", lambda lib, x: lib.F.sort(x), (u(3, 4),), grad=False),
    Case("sort axis 0 reverse", lambda lib, x: lib.F.sort(x, axis=0, reverse=True), (u(3, 4, 2),),
         grad=False),
    Case("sort with_index", lambda lib, x: lib.F.sort(x, axis=1, with_index=True), (u(2, 4, 3),),
         grad=False),
    Case("sort reverse only_index", lambda lib, x: lib.F.sort(x, reverse=True, only_index=True),
         (u(3, 5),)),
    Case("top_k_data", lambda lib, x: lib.F.top_k_data(x, 3), (u(2, 5),)),
    Case("top_k_data abs with_index", lambda lib, x: lib.F.top_k_data(x, 2, abs=True, with_index=True),
         (u(3, 2, 3),)),
    Case("top_k_data smallest base_axis 2",
         lambda lib, x: lib.F.top_k_data(x, 2, largest=False, base_axis=2), (u(2, 3, 4),)),
    # nnabla passes the whole output gradient back when reduce=False; dpnb passes only
    # that of the selected values (tests/test_functions_reduction.py checks it)
    Case("top_k_data no reduce", lambda lib, x: lib.F.top_k_data(x, 2, reduce=False), (u(3, 4),),
         grad=False),
    Case("top_k_data no reduce abs smallest",
         lambda lib, x: lib.F.top_k_data(x, 3, abs=True, reduce=False, largest=False), (u(2, 5),),
         grad=False),
    # top_k_grad filters the gradient on purpose, so it is not the derivative of its
    # (identity) forward: no finite differences
    Case("top_k_grad", lambda lib, x: lib.F.top_k_grad(x, 2), (u(3, 4),), fd=False),
    Case("top_k_grad abs base_axis 2", lambda lib, x: lib.F.top_k_grad(x, 2, abs=True, base_axis=2),
         (u(2, 2, 3),), fd=False),
]
