"""Run under mpiexec with 2 or 3 ranks: a WGAN-GP critic step whose loss holds
``nn.grad`` (the gradient penalty), data-parallel: each rank takes its share of one
batch, and the parameters' gradients exchanged by every form (comm.all_reduce after
backward, the gradient reducer after backward and as backward's callback) equal the
float64 central differences of the whole batch's loss computed in NumPy."""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

import dpnb as nn
import dpnb.communicators as C
import dpnb.functions as F
import dpnb.parametric_functions as PF
import dpnb.solvers as S
from dpnb.ext_utils import get_extension_context
from dpnb.testing import Checks, guarded

PER_RANK, FEATURES, HIDDEN, LAMBDA = 3, 3, 4, 10.0


def batch(size: int):
    """The whole batch, the same on every rank: real and fake samples, mixing weights."""
    r = np.random.RandomState(5)
    return (r.randn(size * PER_RANK, FEATURES), r.randn(size * PER_RANK, FEATURES),
            r.rand(size * PER_RANK, 1))


def critic_numpy(x, w1, b1, w2, b2):
    h = np.tanh(x @ w1 + b1)
    return h @ w2 + b2, h


def loss_numpy(real, fake, alpha, params):
    """The WGAN-GP critic loss of the whole batch: means over every rank's samples."""
    w1, b1, w2, b2 = params
    x_hat = alpha * real + (1 - alpha) * fake
    _, h = critic_numpy(x_hat, *params)
    grad_x = ((1 - h ** 2) * w2[:, 0]) @ w1.T   # d critic / d x_hat, per sample
    norm = np.sqrt((grad_x ** 2).sum(axis=1))
    return (critic_numpy(fake, *params)[0].mean() - critic_numpy(real, *params)[0].mean()
            + LAMBDA * ((norm - 1) ** 2).mean())


def central_differences(real, fake, alpha, params, eps=1e-6) -> list[np.ndarray]:
    grads = []
    for p in params:
        numeric = np.zeros_like(p)
        for i in np.ndindex(*p.shape):
            kept = p[i]
            p[i] = kept + eps
            above = loss_numpy(real, fake, alpha, params)
            p[i] = kept - eps
            below = loss_numpy(real, fake, alpha, params)
            p[i] = kept
            numeric[i] = (above - below) / (2 * eps)
        grads.append(numeric)
    return grads


def main() -> None:
    ctx = get_extension_context("cpu", type_config="double")   # float64 parameters
    comm = C.MultiProcessCommunicator(ctx)
    comm.init()
    nn.set_default_context(ctx)
    ok = Checks(comm.rank)
    real, fake, alpha = batch(comm.size)
    mine = slice(comm.rank * PER_RANK, (comm.rank + 1) * PER_RANK)

    def critic(x):
        return PF.affine(F.tanh(PF.affine(x, HIDDEN, name="fc1")), 1, name="fc2")

    x_hat = nn.Variable.from_numpy_array(alpha[mine] * real[mine]
                                         + (1 - alpha[mine]) * fake[mine]).apply(need_grad=True)
    (grad_x,) = nn.grad([critic(x_hat)], [x_hat])
    norm = F.sum(grad_x ** 2, axis=1) ** 0.5
    loss = (F.mean(critic(nn.Variable.from_numpy_array(fake[mine])))
            - F.mean(critic(nn.Variable.from_numpy_array(real[mine])))
            + LAMBDA * F.mean((norm - 1) ** 2))
    params = nn.get_parameters()
    comm.bcast([p.data for p in params.values()], 0)   # the same parameters on every rank
    expected = central_differences(real, fake, alpha, [p.d.copy() for p in params.values()])
    solver = S.Sgd(0.1)
    solver.set_parameters(params)
    reducer = comm.gradient_reducer(solver, division=True)
    forms = {
        "comm.all_reduce after backward": (None, lambda: comm.all_reduce(
            [p.grad for p in params.values()], division=True)),
        "gradient reducer after backward": (None, reducer.all_reduce),
        "gradient reducer as backward's callback": (reducer, lambda: None),
    }
    for name, (callback, after) in forms.items():
        loss.forward()
        solver.zero_grad()
        loss.backward(communicator_callbacks=callback)
        after()
        for (key, p), want in zip(params.items(), expected):
            ok.close(p.g, want, f"{name}: gradient of {key}", tol=1e-6)
        ok.true(len(set(MPI.COMM_WORLD.allgather(
            b"".join(p.g.tobytes() for p in params.values())))) == 1,
            f"{name}: gradients differ between ranks")
    comm.barrier()
    ok.finish()


if __name__ == "__main__":
    guarded(main)
