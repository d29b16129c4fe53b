"""Run under mpiexec with 2 or 3 ranks (argument: the extension, "cpu" or
"cudnn"): synchronized batch normalization of one global batch spread unevenly
over the ranks, against single-process F.batch_normalization of the whole
batch in float64, computed here on every rank."""
from __future__ import annotations

import functools
import sys

import numpy as np

import dpnb as nn
import dpnb.communicators as C
import dpnb.functions as F
import dpnb.parametric_functions as PF
from dpnb.context import to_module
from dpnb.errors import DpnbError
from dpnb.ext_utils import get_extension_context
from dpnb.testing import Checks, guarded

BATCH = (2, 3, 1)  # rank r holds BATCH[r] samples of the global batch
# (sample shape, axes): channels first, 2-D input, two kept axes apart, the last axis
CASES = [((3, 2, 2), [1]), ((4,), [1]), ((3, 2, 2), [1, 3]), ((2, 3), [-1])]
OPTIONS = dict(decay_rate=0.7, eps=1e-3)


def global_problem(sample_shape, axes, members: list[int], seed: int) -> dict:
    """The global batch of ``members`` (their slices in order), parameters and loss weights."""
    rng = np.random.RandomState(seed)
    x_shape = (sum(BATCH[k] for k in members),) + tuple(sample_shape)
    kept = [a % len(x_shape) for a in axes]
    stat = tuple(s if a in kept else 1 for a, s in enumerate(x_shape))
    starts = np.cumsum([0] + [BATCH[k] for k in members])
    return {
        "x": rng.randn(*x_shape) * 2 + 1,
        "params": [rng.randn(*stat), rng.rand(*stat) + 0.5,  # beta, gamma
                   rng.randn(*stat), rng.rand(*stat) + 0.5],  # running mean, variance
        "w": rng.randn(*x_shape),
        "w_stats": (rng.randn(*stat), rng.randn(*stat)),  # the group's: the same on every rank
        "slices": {k: slice(starts[i], starts[i + 1]) for i, k in enumerate(members)},
    }


def run(bn, x, params, w, w_stats, axes, batch_stat, output_stat, dtype, reduce_grads=None):
    """Two forwards (two running updates) and one backward of
    ``sum(y * w) [+ sum(batch_mean * wm) + sum(batch_var * wv)]``; the results on the host."""
    vx = nn.Variable.from_numpy_array(x.astype(dtype), need_grad=True)
    vp = [nn.Variable.from_numpy_array(p.astype(dtype), need_grad=i < 2)
          for i, p in enumerate(params)]
    out = bn(vx, *vp, axes=axes, batch_stat=batch_stat, output_stat=output_stat, **OPTIONS)
    y, *stats = out if output_stat else (out,)
    loss = F.sum(y * nn.Variable.from_numpy_array(w.astype(dtype)))
    for s, ws in zip(stats, w_stats):
        loss = loss + F.sum(s * nn.Variable.from_numpy_array(ws.astype(dtype)))
    loss.forward()
    loss.forward()
    for v in [vx] + vp[:2]:
        v.grad.zero()
    loss.backward()
    if reduce_grads is not None:
        reduce_grads([vp[0].grad, vp[1].grad])
    arrays = {"y": y.d, "gx": vx.g, "running mean": vp[2].d, "running var": vp[3].d,
              "beta grad": vp[0].g, "gamma grad": vp[1].g}
    arrays.update(zip(("batch mean", "batch var"), (s.d for s in stats)))
    return {name: to_module(a, np).copy() for name, a in arrays.items()}


def compare(ok: Checks, got: dict, expected: dict, rows: slice, dtype, what: str) -> None:
    """Per-sample results against this rank's rows of the reference, the rest whole."""
    for name, value in expected.items():
        value = value[rows] if name in ("y", "gx") else value
        ok.close(got[name], value.astype(dtype), f"{what}: {name}")


def check_against_global(comm, ok: Checks, group: str, members: list[int], seed: int) -> None:
    """Every case and option, float64 (tight) and float32, against the reference."""
    r = comm.rank
    sync = functools.partial(F.sync_batch_normalization, comm=comm, group=group)
    reduce_grads = functools.partial(comm.all_reduce, group=group)
    for case, (sample_shape, axes) in enumerate(CASES):
        p = global_problem(sample_shape, axes, members, seed + case)
        rows = p["slices"][r]
        for batch_stat, output_stat in ((True, False), (True, True), (False, False)):
            expected = run(F.batch_normalization, p["x"], p["params"], p["w"], p["w_stats"], axes,
                           batch_stat, output_stat, np.float64)
            for dtype in (np.float64, np.float32):
                got = run(sync, p["x"][rows], p["params"], p["w"][rows], p["w_stats"], axes,
                          batch_stat, output_stat, dtype, reduce_grads)
                compare(ok, got, expected, rows, dtype,
                        f"group {group} {sample_shape} axes={axes} batch_stat={batch_stat} "
                        f"output_stat={output_stat} {np.dtype(dtype)}")


def check_collectives(comm, ok: Checks) -> None:
    """Two collectives per forward with batch statistics, one per backward, none without."""
    p = global_problem((3, 2, 2), [1], list(range(comm.size)), 50)
    for batch_stat, per_forward, per_backward in ((True, 2, 1), (False, 0, 0)):
        vx = nn.Variable.from_numpy_array(p["x"][p["slices"][comm.rank]], need_grad=True)
        vp = [nn.Variable.from_numpy_array(a, need_grad=i < 2) for i, a in enumerate(p["params"])]
        y = F.sync_batch_normalization(vx, *vp, comm, batch_stat=batch_stat)
        before = comm.collectives_issued
        y.forward()
        forward = comm.collectives_issued - before
        y.backward(np.ones(y.shape))
        backward = comm.collectives_issued - before - forward
        ok.true((forward, backward) == (per_forward, per_backward),
                f"batch_stat={batch_stat}: {forward} collectives in forward and {backward} in "
                f"backward, expected {per_forward} and {per_backward}")


def check_parametric(comm, ok: Checks) -> None:
    """PF.sync_batch_normalization: PF.batch_normalization's parameters, global statistics."""
    r, members = comm.rank, list(range(comm.size))
    p = global_problem((3, 2, 2), [1], members, 60)
    rows = p["slices"][r]
    initial = [np.zeros_like(p["params"][0]), np.ones_like(p["params"][0])] * 2
    expected = run(F.batch_normalization, p["x"], initial, p["w"], [], [1], True, False,
                   np.float64)
    vx = nn.Variable.from_numpy_array(p["x"][rows], need_grad=True)
    y = PF.sync_batch_normalization(vx, comm, **OPTIONS)
    params = nn.get_parameters(grad_only=False)
    ok.true(list(params) == ["bn/beta", "bn/gamma", "bn/mean", "bn/var"],
            f"PF parameter names {list(params)}")
    loss = F.sum(y * nn.Variable.from_numpy_array(p["w"][rows]))
    loss.forward()
    loss.forward()
    loss.backward()
    comm.all_reduce([params["bn/beta"].grad, params["bn/gamma"].grad])
    got = {"y": y.d, "gx": vx.g, "running mean": params["bn/mean"].d,
           "running var": params["bn/var"].d, "beta grad": params["bn/beta"].g,
           "gamma grad": params["bn/gamma"].g}
    compare(ok, {k: to_module(v, np) for k, v in got.items()}, expected, rows, vx.dtype, "PF")
    nn.clear_parameters()


def check_groups(comm, ok: Checks) -> None:
    """A group of the first and last rank; the others are refused at the door."""
    members = [0, comm.size - 1]
    comm.new_group(("ends", members))
    if comm.rank in members:
        check_against_global(comm, ok, "ends", members, 70)
    p = global_problem((3,), [1], list(range(comm.size)), 80)
    vs = [nn.Variable.from_numpy_array(a) for a in [p["x"]] + p["params"]]
    if comm.rank not in members:
        ok.raises(DpnbError, rf"rank {comm.rank}\) is not a member of group 'ends'",
                  lambda: F.sync_batch_normalization(*vs, comm, group="ends"), "outside rank")
    ok.raises(DpnbError, r"no group named 'nope'.*comm.new_group",
              lambda: F.sync_batch_normalization(*vs, comm, group="nope"), "unknown group")


def main() -> None:
    ext = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    comm = C.MultiProcessCommunicator(get_extension_context(ext))
    comm.init()
    ok = Checks(comm.rank)
    # float64 parameters for PF; the other variables keep their arrays' dtypes
    ctx = get_extension_context(ext, device_id=comm.ctx.device_id, type_config="double")
    with nn.context_scope(ctx):
        check_against_global(comm, ok, "world", list(range(comm.size)), 10)
        check_collectives(comm, ok)
        check_parametric(comm, ok)
        check_groups(comm, ok)
    comm.barrier()
    ok.finish()


if __name__ == "__main__":
    guarded(main)
