"""Run under mpiexec with 2 ranks: what dpnb adds for nnabla's own communicator tests,
against NumPy references in float64.

``layouts``: F.sync_batch_normalization with channels first and channels last gives
the same gamma and beta gradients to float64 round-off (nnabla's layout-consistency
test, smaller), and the gamma gradient of a weighted loss matches the float64 value.

``scale_grad``: all_reduce_callback(scale_grad=s) during backward sums s times each
rank's gradients (and averages them with division), in packs of any size.

``dtypes``: as nnabla's, collectives cast float NdArrays of a narrower type to the
communicator's (float32) and leave wider ones; all_reduce_callback(keep_dtype=True)
keeps float16 gradients float16 (summed in float32), which is how a narrowed float16
array, which cannot be cast, is reduced; without it that array is refused on every rank."""
from __future__ import annotations

import sys

import numpy as np

import dpnb as nn
import dpnb.communicators as C
import dpnb.functions as F
from dpnb.errors import RankArgumentError
from dpnb.ext_utils import get_extension_context
from dpnb.testing import Checks, guarded, rank_data

SHAPE = (16, 8, 32, 32)  # a rank's batch, channels first: 16384 values a channel a rank
LAST = (0, 2, 3, 1)      # its channels-last transposition


def sync_bn_grads(comm, x: np.ndarray, w: np.ndarray, axis: int) -> tuple:
    """Beta's and gamma's gradients (this rank's share) of ``sum(y * w)``."""
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    vx = nn.Variable.from_numpy_array(x)
    beta = nn.Variable.from_numpy_array(np.zeros(shape, np.float32), need_grad=True)
    gamma = nn.Variable.from_numpy_array(np.ones(shape, np.float32), need_grad=True)
    y = F.sync_batch_normalization(vx, beta, gamma, None, None, comm, axes=[axis])
    loss = F.sum(y * nn.Variable.from_numpy_array(w))
    loss.forward()
    beta.grad.zero()
    gamma.grad.zero()
    loss.backward()
    return beta.g.ravel().copy(), gamma.g.ravel().copy()


def check_layouts(comm, ok: Checks) -> None:
    xs = [rank_data(r, 1, SHAPE) for r in range(comm.size)]
    x, ones = xs[comm.rank], np.ones(SHAPE, np.float32)
    first = sync_bn_grads(comm, x, ones, 1)
    last = sync_bn_grads(comm, np.ascontiguousarray(x.transpose(LAST)), ones.transpose(LAST), 3)
    for name, f, la in zip(("beta", "gamma"), first, last):
        ok.close(la, f, f"{name} grad, channels last against first", tol=1e-6)
    w = rank_data(comm.rank, 2, SHAPE)
    _, gamma = sync_bn_grads(comm, x, w, 1)
    whole = np.concatenate(xs).astype(np.float64)
    mean = whole.mean(axis=(0, 2, 3), keepdims=True)
    inv_std = 1 / np.sqrt(whole.var(axis=(0, 2, 3), keepdims=True) + 1e-5)
    expected = (w * (x - mean) * inv_std).sum(axis=(0, 2, 3))
    ok.close(gamma, expected.astype(np.float32), "gamma grad of a weighted loss against float64",
             tol=1e-6, relative=True)


def check_scale_grad(comm, ok: Checks) -> None:
    rng = np.random.RandomState(7)
    weights = [rng.rand(3, 4).astype(np.float32) for _ in range(5)]
    for pack_size, division, scale in ((2, False, 0.25), (64, True, 8.0), (1000, False, 1)):
        xs = [nn.Variable.from_numpy_array(w * (comm.rank + 1), need_grad=True)
              for w in weights]
        y = xs[0]
        for x in xs[1:]:
            y = F.add2(y, F.mul_scalar(x, 2.0))
        loss = F.sum(y * y)
        loss.forward()
        for x in xs:
            x.grad.zero()
        grads = [x.grad for x in xs]
        loss.backward(communicator_callbacks=comm.all_reduce_callback(
            grads, pack_size, division=division, scale_grad=scale))
        ys = [sum(c * w * (r + 1) for c, w in zip([1] + [2] * 4, weights))
              for r in range(comm.size)]
        for i in range(len(xs)):
            c = 1 if i == 0 else 2
            expected = scale * sum(2 * c * y_r for y_r in ys) / (comm.size if division else 1)
            ok.close(xs[i].g, expected.astype(np.float32),
                     f"gradient {i}, pack_size={pack_size}, scale_grad={scale}", tol=1e-5,
                     relative=True)


def half_grads(comm, keep_dtype: bool) -> tuple[list, list]:
    """Leaf gradients of ``sum(x0 * c0 + x1 * c1)`` made float16 before backward, reduced
    during it; the gradients and what each should sum to (float32 sums of float16 values)."""
    coefficients = [np.float32(0.1 * (comm.rank + 1)), np.float32(3.3 + comm.rank)]
    xs = [nn.Variable.from_numpy_array(np.ones((2, 3), np.float32), need_grad=True)
          for _ in coefficients]
    loss = F.sum(F.add2(F.mul_scalar(xs[0], float(coefficients[0])),
                        F.mul_scalar(xs[1], float(coefficients[1]))))
    loss.forward()
    for x in xs:
        x.grad.cast(np.float16)
        x.grad.zero()
    loss.backward(communicator_callbacks=comm.all_reduce_callback(
        [x.grad for x in xs], 4, keep_dtype=keep_dtype))
    expected = [sum(np.float32(np.float16(0.1 * (r + 1))) for r in range(comm.size)),
                sum(np.float32(np.float16(3.3 + r)) for r in range(comm.size))]
    return [x.grad for x in xs], expected


def check_dtypes(comm, ok: Checks) -> None:
    half = nn.NdArray.from_numpy_array(np.full(5, 0.1 * (comm.rank + 1), np.float16))
    single = nn.NdArray.from_numpy_array(np.full(3, 1.5 + comm.rank, np.float32))
    double = nn.NdArray.from_numpy_array(np.full(2, 0.1 * (comm.rank + 1), np.float64))
    comm.all_reduce([half, single, double])
    ok.true([a.dtype for a in (half, single, double)] == [np.float32, np.float32, np.float64],
            "all_reduce casts float16 to the communicator's float32 and keeps float64",
            str([a.dtype for a in (half, single, double)]))
    ok.close(half.data, np.full(5, np.float32(np.float16(0.1)) + np.float32(np.float16(0.2)),
                                np.float32), "the float16 values summed in float32", tol=0)
    ok.close(double.data, np.full(2, 0.1 + 0.2), "float64 summed in float64", tol=0)

    grads, expected = half_grads(comm, keep_dtype=False)
    for g, e in zip(grads, expected):
        ok.true(g.dtype == np.float32, "all_reduce_callback casts float16 gradients to "
                "float32", str(g.dtype))
        # cast when backward reaches the first function, before these gradients are
        # computed (nnabla casts after each function): float16 rounding at most
        ok.close(g.data, np.full((2, 3), e, np.float32), "their float32 sum", tol=1e-3,
                 relative=True)
    grads, expected = half_grads(comm, keep_dtype=True)
    for g, e in zip(grads, expected):
        ok.true(g.dtype == np.float16, "keep_dtype=True keeps them float16", str(g.dtype))
        ok.close(g.data, np.full((2, 3), np.float16(e), np.float16),
                 "the float32 sum, rounded to float16", tol=0)

    whole = nn.NdArray.from_numpy_array(np.full(6, comm.rank + 1.0, np.float16))
    part = whole.narrow(0, 2, 3)
    comm.all_reduce_callback([part], 2, keep_dtype=True).all_reduce()
    ok.close(whole.data, np.array([comm.rank + 1] * 2 + [3.0] * 3 + [comm.rank + 1], np.float16),
             "a narrowed float16 array reduced where it lies, with keep_dtype", tol=0)
    try:
        comm.all_reduce(part)
        ok.true(False, "all_reduce of a narrowed float16 array is refused")
    except RankArgumentError as e:
        ok.true("narrowed" in str(e), "the refusal says the array is narrowed", str(e))


def main(mode: str) -> None:
    comm = C.MultiProcessCommunicator(get_extension_context("cpu"))
    comm.init()
    ok = Checks(comm.rank)
    {"layouts": check_layouts, "scale_grad": check_scale_grad, "dtypes": check_dtypes}[mode](comm, ok)
    comm.barrier()
    ok.finish()


if __name__ == "__main__":
    guarded(lambda: main(sys.argv[1]))
