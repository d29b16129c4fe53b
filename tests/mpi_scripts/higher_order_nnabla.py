"""Run under mpiexec with 2 ranks: the WGAN-GP critic step and the MAML outer step of
tests/nnabla_higher_order.py, in nnabla's idiom on dpnb standing in for nnabla, data-
parallel: each rank takes its half of the recorded batch (WGAN-GP samples, MAML tasks),
the parameters' gradients are averaged by comm.all_reduce(division=True), and the
gradients, the mean loss and the updated parameters must be those the real nnabla 1.39
computed on the whole batch in one process (tests/fixtures/nnabla/higher_order.npz)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import dpnb
from dpnb.testing import Checks, guarded

dpnb.use_as_nnabla()
import nnabla as nn  # noqa: E402 - dpnb, through the alias
import nnabla.communicators as C  # noqa: E402
from nnabla.ext_utils import get_extension_context  # noqa: E402

TESTS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TESTS))
import nnabla_higher_order as H  # noqa: E402 - the code the fixture was recorded with

RECORD = dict(np.load(TESTS / "fixtures" / "nnabla" / "higher_order.npz"))
TOL = 1e-4   # float32, two levels of differentiation, sums split across ranks


def recorded(prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in RECORD.items() if k.startswith(prefix)}


def share(array: np.ndarray, comm) -> np.ndarray:
    """This rank's equal share of ``array`` along its first axis."""
    n = len(array) // comm.size
    assert n * comm.size == len(array), (len(array), comm.size)
    return array[comm.rank * n:(comm.rank + 1) * n]


def run(name: str, loss, params: dict, solver, comm, ok: Checks) -> None:
    def exchange():
        comm.all_reduce([p.grad for p in params.values()], division=True)

    grads = H.step(loss, solver, params, exchange)
    mean_loss = MPI.COMM_WORLD.allreduce(float(loss.d)) / comm.size
    ok.close(np.float32(mean_loss), RECORD[f"{name}/loss"], f"{name}: mean of the ranks' losses",
             tol=TOL)
    want_grads, want_updated = recorded(f"{name}/grad/"), recorded(f"{name}/updated/")
    ok.true(sorted(grads) == sorted(want_grads), f"{name}: parameter names",
            f"{sorted(grads)} != {sorted(want_grads)}")
    for k, p in params.items():
        ok.close(grads[k], want_grads[k], f"{name}: all-reduced gradient of {k}", tol=TOL)
        ok.close(p.d, want_updated[k], f"{name}: {k} after the update", tol=TOL)
    ok.true(len(set(MPI.COMM_WORLD.allgather(
        b"".join(p.d.tobytes() for p in params.values())))) == 1,
        f"{name}: parameters differ between ranks after the update")


def main() -> None:
    ctx = get_extension_context("cpu")   # float32, as nnabla recorded
    comm = C.MultiProcessCommunicator(ctx)
    comm.init()
    nn.set_default_context(ctx)
    ok = Checks(comm.rank)

    nn.clear_parameters()
    inputs = {k: share(v, comm) for k, v in recorded("wgan_gp/input/").items()}
    loss, _ = H.wgan_gp_loss(inputs["real"], inputs["fake"], inputs["alpha"])
    params = H.set_parameters(recorded("wgan_gp/init/"), "critic")
    with ok.guard("wgan_gp step"):
        run("wgan_gp", loss, params, H.wgan_gp_solver(params), comm, ok)

    nn.clear_parameters()
    loss, _ = H.maml_loss(**{k: share(v, comm) for k, v in recorded("maml/input/").items()})
    params = H.set_parameters(recorded("maml/init/"), "maml")
    with ok.guard("maml step"):
        run("maml", loss, params, H.maml_solver(params), comm, ok)

    comm.barrier()
    ok.finish()


if __name__ == "__main__":
    guarded(main)
