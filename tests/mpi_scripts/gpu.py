"""Run under mpiexec with one rank per GPU, the argument naming the transport of CuPy
arrays: "nccl" (a real GPU with NCCL) or "mpi" (``DPNB_COMM_NCCL=0``, or the CuPy
stand-in, which has no NCCL).  The collectives of CuPy arrays (GPU flat storage,
all_reduce_callback, the gradient reducer, all_gather, reduce_scatter) through that
transport, and a list mixing host and GPU arrays (host-staged over MPI), against NumPy
references."""
from __future__ import annotations

import sys

import cupy
import numpy as np

import dpnb as nn
import dpnb.communicators as C
import dpnb.functions as F
import dpnb.solvers as S
from dpnb.ext_utils import get_extension_context
from dpnb.testing import Checks, guarded, rank_data

SHAPES = [(3, 4), (70000,), (5,)]


def check_gather_scatter(comm, ok: Checks, n: int, r: int, transport: str) -> None:
    """all_gather and reduce_scatter of CuPy arrays: one call each."""
    for dtype in (np.float32, np.float64):
        x = cupy.asarray(rank_data(r, 40, (2, 3), dtype))
        ys = [cupy.zeros((2, 3), dtype) for _ in range(n)]
        before = comm.collectives_issued
        comm.all_gather(x, ys)
        ok.true(comm.collectives_issued - before == 1, "all_gather took more than one call")
        for k, y in enumerate(ys):
            ok.close(cupy.asnumpy(y), rank_data(k, 40, (2, 3), dtype),
                     f"{transport} all_gather {np.dtype(dtype)} from rank {k}")
        for division in (False, True):
            xs = [cupy.asarray(rank_data(r, 50 + k, (5,), dtype)) for k in range(n)]
            y = cupy.zeros(5, dtype)
            comm.reduce_scatter(xs, y, division=division)
            exp = sum(rank_data(k, 50 + r, (5,), dtype) for k in range(n))
            ok.close(cupy.asnumpy(y), (exp / n).astype(dtype) if division else exp,
                     f"{transport} reduce_scatter {np.dtype(dtype)} division={division}")


def main(transport: str) -> None:
    ctx = get_extension_context("cudnn")
    comm = C.MultiProcessCommunicator(ctx)
    comm.init()
    n, r = comm.size, comm.rank
    ok = Checks(r)
    ok.true(comm.uses_nccl == (transport == "nccl"),
            f"expected CuPy arrays to go through {transport}; uses_nccl is {comm.uses_nccl}")
    ctx = get_extension_context("cudnn", device_id=comm.ctx.device_id)
    for dtype in (np.float32, np.float64):
        for division in (False, True):
            data = [[rank_data(k, i, s, dtype) for i, s in enumerate(SHAPES)] for k in range(n)]
            mine = [cupy.asarray(a) for a in data[r]]
            comm.all_reduce(mine, division=division)
            for i, got in enumerate(mine):
                exp = sum(data[k][i] for k in range(n))
                exp = (exp / n).astype(dtype) if division else exp
                ok.close(cupy.asnumpy(got), exp, f"{transport} all_reduce {np.dtype(dtype)} "
                                                  f"division={division} array {i}")
            mine = [cupy.asarray(a) for a in data[r]]
            comm.bcast(mine, src=n - 1)
            for i, got in enumerate(mine):
                ok.close(cupy.asnumpy(got), data[n - 1][i], f"{transport} bcast array {i}")
            mine = [cupy.asarray(a) for a in data[r]]
            comm.reduce(mine, dst=0, division=division)
            if r == 0:
                exp = sum(data[k][0] for k in range(n))
                exp = (exp / n).astype(dtype) if division else exp
                ok.close(cupy.asnumpy(mine[0]), exp, f"{transport} reduce at the root")
    mixed = [rank_data(r, 20, (6,), np.float32), cupy.asarray(rank_data(r, 21, (7,), np.float32))]
    comm.all_reduce(mixed, division=True)
    ok.close(mixed[0], sum(rank_data(k, 20, (6,), np.float32) for k in range(n)) / np.float32(n),
             "host-staged host array")
    ok.close(cupy.asnumpy(mixed[1]),
             sum(rank_data(k, 21, (7,), np.float32) for k in range(n)) / np.float32(n),
             "host-staged GPU array")
    with nn.context_scope(ctx):
        params = [nn.get_parameter_or_create(f"w{i}", (8, 16),
                                             initializer=np.full((8, 16), 0.1 * (i + 1)))
                  for i in range(4)]
        x = nn.Variable.from_numpy_array(rank_data(r, 30, (8, 16), np.float32))
        h = x
        for w in params:
            h = F.tanh(h * w)
        loss = F.mean(h * h)
        loss.forward()
        for p in params:
            p.grad.zero()
        loss.backward()
        before = comm.collectives_issued
        comm.all_reduce([p.grad for p in params], division=True)
        ok.true(comm.collectives_issued - before == 1, "GPU flat storage took more than one call")
        expected = [cupy.asnumpy(p.g) for p in params]
        for p in params:
            p.grad.zero()
        loss.backward(communicator_callbacks=comm.all_reduce_callback(
            [p.grad for p in params], 8 * 16, division=True))
        for i, p in enumerate(params):
            ok.close(cupy.asnumpy(p.g), expected[i], f"{transport} all_reduce_callback gradient {i}")
        solver = S.Sgd(0.1)
        solver.set_parameters(nn.get_parameters())
        reducer = comm.gradient_reducer(solver, division=True, pack_size=8 * 16)
        for callback in (None, reducer):
            for p in params:
                p.grad.zero()
            loss.backward(communicator_callbacks=callback)
            if callback is None:
                reducer.all_reduce()
            for i, p in enumerate(params):
                ok.close(cupy.asnumpy(p.g), expected[i],
                         f"GPU gradient reducer (callback={callback is not None}) gradient {i}")
    check_gather_scatter(comm, ok, n, r, transport)
    comm.barrier()
    ok.finish()


if __name__ == "__main__":
    guarded(lambda: main(sys.argv[1]))
