"""Run under mpiexec with 2 or 3 ranks: every collective of the communicator
against NumPy references, groups, agreement errors and bad arguments."""
from __future__ import annotations

from typing import ClassVar

import numpy as np
from mpi4py import MPI

import dpnb as nn
import dpnb.communicators as C
from dpnb.communicators.settings import DEFAULT_BUCKET_BYTES, DEFAULT_SEGMENT_BYTES
from dpnb.errors import DpnbError
from dpnb.testing import Checks, guarded, rank_data

SHAPES = [(3, 4), (70000,), (5,), (2, 3, 4), (1,)]  # one over the direct-reduction threshold


def all_data(n: int, seed: int, shapes, dtype) -> list[list[np.ndarray]]:
    """data[r][i]: array i of rank r."""
    return [[rank_data(r, seed + i, s, dtype) for i, s in enumerate(shapes)] for r in range(n)]


def check_all_reduce(comm, ok: Checks, n: int, r: int) -> None:
    for dtype in (np.float32, np.float64):
        for division in (False, True):
            for seed, shapes in ((1, [(3, 4)]), (10, SHAPES)):
                data = all_data(n, seed, shapes, dtype)
                mine = [a.copy() for a in data[r]]
                expected = [sum(data[k][i] for k in range(n)) for i in range(len(shapes))]
                if division:
                    expected = [(e / n).astype(dtype) for e in expected]
                comm.all_reduce(mine if len(mine) > 1 else mine[0], division=division)
                for i, (got, exp) in enumerate(zip(mine, expected)):
                    ok.close(got, exp, f"all_reduce {np.dtype(dtype)} division={division} "
                                       f"{len(shapes)} arrays, array {i}")
    # small buckets and segments: many chunks through the pipeline, large arrays split
    comm.bucket_bytes, comm.segment_bytes = 4096, 65536
    data = all_data(n, 30, SHAPES + [(40000,)], np.float32)
    mine = [a.copy() for a in data[r]]
    comm.all_reduce(mine, division=True)
    for i, got in enumerate(mine):
        exp = sum(data[k][i] for k in range(n)) / np.float32(n)
        ok.close(got, exp, f"small buckets, array {i}")
    comm.bucket_bytes, comm.segment_bytes = DEFAULT_BUCKET_BYTES, DEFAULT_SEGMENT_BYTES
    # integer sums, float16 (reduced in float32), NdArray handles outside flat storage
    ints = all_data(n, 40, [(6,)], np.int64)
    got = ints[r][0].copy()
    comm.all_reduce(got)
    ok.close(got, sum(ints[k][0] for k in range(n)), "all_reduce int64")
    halves = all_data(n, 41, [(9,), (4, 4)], np.float16)
    got = [a.copy() for a in halves[r]]
    comm.all_reduce(got, division=True)
    for i in range(2):
        exp = (sum(halves[k][i].astype(np.float32) for k in range(n)) / n).astype(np.float16)
        ok.close(got[i], exp, f"all_reduce float16 array {i}")
    v = nn.Variable.from_numpy_array(rank_data(r, 42, (4, 2), np.float64))
    comm.all_reduce(v.data)
    ok.close(v.d, sum(rank_data(k, 42, (4, 2), np.float64) for k in range(n)), "all_reduce NdArray")


def make_parameters(count: int = 6) -> list:
    with nn.parameter_scope("net"):
        return [nn.get_parameter_or_create(f"p{i}", (i + 2, 3)) for i in range(count)]


def check_flat_storage(comm, ok: Checks, n: int, r: int) -> None:
    params = make_parameters()
    grads = [rank_data(r, 50 + i, p.shape, np.float32) for i, p in enumerate(params)]
    for p, g in zip(params, grads):
        p.g = g
    before, staging = comm.collectives_issued, comm.staging_bytes
    comm.all_reduce([p.grad for p in params], division=True)
    issued = comm.collectives_issued - before
    ok.true(issued == 1, f"flat-storage gradients took {issued} collectives, expected 1")
    ok.true(comm.staging_bytes == staging, "flat-storage gradients went through staging")
    for i, p in enumerate(params):
        exp = sum(rank_data(k, 50 + i, p.shape, np.float32) for k in range(n)) / np.float32(n)
        ok.close(p.g, exp, f"flat-storage gradient {i}")
    mine = b"".join(p.g.tobytes() for p in params)
    ok.true(len(set(MPI.COMM_WORLD.allgather(mine))) == 1, "gradients differ between ranks")
    # out of storage order (broken in the middle): still fused, one collective, right sums
    for p, g in zip(params, grads):
        p.g = g
    before = comm.collectives_issued
    comm.all_reduce([p.grad for p in params[3:]] + [p.grad for p in params[:3]])
    ok.true(comm.collectives_issued - before == 1,
            "gradients out of storage order should still take one collective")
    for i, p in enumerate(params):
        exp = sum(rank_data(k, 50 + i, p.shape, np.float32) for k in range(n))
        ok.close(p.g, exp, f"out-of-order flat-storage gradient {i}")
    # bcast of every parameter from rank 0 (data handles, one stretch)
    for i, p in enumerate(params):
        p.d = rank_data(r, 60 + i, p.shape, np.float32)
    before = comm.collectives_issued
    comm.bcast([p.data for p in params], src=0)
    ok.true(comm.collectives_issued - before == 1, "bcast of parameters should be one collective")
    for i, p in enumerate(params):
        ok.close(p.d, rank_data(0, 60 + i, p.shape, np.float32), f"bcast parameter {i}")
    # layouts differ between ranks (rank 0: storage handles, others: plain arrays): still right
    for p, g in zip(params, grads):
        p.g = g
    items = [p.grad for p in params] if r == 0 else [p.g.copy() for p in params]
    comm.all_reduce(items)
    for i, item in enumerate(items):
        got = item.data if r == 0 else item
        exp = sum(rank_data(k, 50 + i, params[i].shape, np.float32) for k in range(n))
        ok.close(got, exp, f"mixed layouts, array {i}")
    nn.clear_parameters()


def check_reduce_bcast(comm, ok: Checks, n: int, r: int) -> None:
    for dtype in (np.float32, np.float64):
        for root in range(n):
            for division in (False, True):
                data = all_data(n, 70 + root, SHAPES, dtype)
                mine = [a.copy() for a in data[r]]
                comm.reduce(mine, dst=root, division=division)
                for i, got in enumerate(mine):
                    exp = sum(data[k][i] for k in range(n))
                    exp = (exp / n).astype(dtype) if division else exp
                    ok.close(got, exp if r == root else data[r][i],
                             f"reduce {np.dtype(dtype)} dst={root} division={division} array {i}")
            data = all_data(n, 80 + root, SHAPES, dtype)
            mine = [a.copy() for a in data[r]]
            comm.bcast(mine, src=root)
            for i, got in enumerate(mine):
                ok.close(got, data[root][i], f"bcast {np.dtype(dtype)} src={root} array {i}")
            single = data[r][0].copy()
            comm.bcast(single, src=root)
            ok.close(single, data[root][0], f"bcast single array src={root}")


def check_gather_scatter(comm, ok: Checks, n: int, r: int) -> None:
    for dtype in (np.float32, np.float64):
        x = nn.Variable.from_numpy_array(rank_data(r, 90, (2, 3), dtype))
        ys = [nn.Variable((2, 3), dtype=dtype) for _ in range(n)]
        comm.all_gather(x.data, [y.data for y in ys])
        for k, y in enumerate(ys):
            ok.close(y.d, rank_data(k, 90, (2, 3), dtype),
                     f"all_gather {np.dtype(dtype)} from rank {k}")
        for division in (False, True):
            xs = [rank_data(r, 100 + k, (4,), dtype) for k in range(n)]
            y = np.zeros(4, dtype)
            comm.reduce_scatter(xs, y, division=division)
            exp = sum(rank_data(k, 100 + r, (4,), dtype) for k in range(n))
            ok.close(y, (exp / n).astype(dtype) if division else exp,
                     f"reduce_scatter {np.dtype(dtype)} division={division}")


def check_groups(comm, ok: Checks, n: int, r: int) -> None:
    ok.true(comm.list_groups() == {"world": list(range(n))}, f"list_groups {comm.list_groups()}")
    ok.true(comm.new_group(("pair", [0, 1])) == "pair", "new_group returns the name")
    ok.true(comm.find_group("pair") == [0, 1] and comm.find_group("nope") == [], "find_group")
    ok.true(comm.list_groups() == {"world": list(range(n)), "pair": [0, 1]},
            "list_groups after new_group")
    ok.raises(DpnbError, "already exists", lambda: comm.new_group(("pair", [0, 1])),
              "duplicate group")
    ok.raises(DpnbError, "distinct ranks", lambda: comm.new_group(("bad", [0, n])),
              "rank out of range")
    data = all_data(n, 110, [(5,), (3, 3)], np.float64)
    mine = [a.copy() for a in data[r]]
    if r < 2:
        comm.all_reduce(mine, division=True, group="pair")
        for i, got in enumerate(mine):
            ok.close(got, (data[0][i] + data[1][i]) / 2, f"group all_reduce array {i}")
        comm.bcast(mine, src=1, group="pair")
        for i, got in enumerate(mine):
            ok.close(got, (data[0][i] + data[1][i]) / 2, f"group bcast array {i}")
        ok.raises(DpnbError, "out of range", lambda: comm.bcast(mine, src=2, group="pair"),
                  "src outside the group")
    else:
        ok.raises(DpnbError, rf"rank {r}\) is not a member of group 'pair'",
                  lambda: comm.all_reduce(mine, group="pair"), "rank outside the group")
        for i, got in enumerate(mine):
            ok.close(got, data[r][i], f"outside rank's array {i} untouched")
    ok.raises(DpnbError, "no group named 'nope'", lambda: comm.all_reduce(mine, group="nope"),
              "unknown group")
    comm.barrier()


def check_callback(comm, ok: Checks, n: int, r: int) -> None:
    """all_reduce_callback during backward equals backward then all_reduce."""
    import dpnb.functions as F

    with nn.parameter_scope("cb"):
        params = [nn.get_parameter_or_create(f"w{i}", (8, 16),
                                             initializer=np.full((8, 16), 0.1 * (i + 1)))
                  for i in range(5)]
        shared = nn.get_parameter_or_create("shared", (8, 16), initializer=np.full((8, 16), 0.5))
    x = nn.Variable.from_numpy_array(rank_data(r, 120, (8, 16), np.float32))
    h = x
    for w in params:
        h = F.tanh(h * w + shared)  # ``shared`` is read by five functions
    loss = F.mean(h * h)
    everything = [shared] + params  # ``shared`` completes last: it goes in the last pack
    loss.forward()
    for p in everything:
        p.grad.zero()
    loss.backward()
    comm.all_reduce([p.grad for p in everything], division=True)
    expected = [p.g.copy() for p in everything]

    class Probe:
        """Records how many collectives had been issued after each function's backward."""
        counts: ClassVar[list[int]] = []

        def on_finish_function_backward(self, fn):
            Probe.counts.append(comm.collectives_issued - start)

        def on_finish(self):
            pass

    for p in everything:
        p.grad.zero()
    start = comm.collectives_issued
    callback = comm.all_reduce_callback([p.grad for p in everything], 8 * 16 * 2, division=True)
    loss.backward(communicator_callbacks=[callback, Probe()])
    for i, p in enumerate(everything):
        ok.close(p.g, expected[i], f"all_reduce_callback gradient {i}")
    ok.true(Probe.counts[-2] >= 1, f"packs sent as backward ran: {Probe.counts}, expected "
            "one before the last function")
    for p in everything:
        p.grad.zero()
    loss.backward(communicator_callbacks=callback)  # the same callback again
    for i, p in enumerate(everything):
        ok.close(p.g, expected[i], f"reused all_reduce_callback gradient {i}")
    nn.clear_parameters()


def check_tutorial(comm, ok: Checks, n: int, r: int) -> None:
    """The tutorial's step: after all_reduce(division=True) every rank holds the mean
    of the per-rank gradients, bit for bit the same; the solver then keeps ranks equal."""
    import dpnb.functions as F
    import dpnb.parametric_functions as PF
    import dpnb.solvers as S
    from dpnb.initializer import UniformInitializer, calc_uniform_lim_glorot

    rng = np.random.RandomState(r)
    x = nn.Variable.from_numpy_array(rng.rand(4, 1, 8, 8).astype(np.float32))
    y = nn.Variable.from_numpy_array(rng.randint(0, 2, (4, 1)))
    w_init = UniformInitializer(calc_uniform_lim_glorot(1, 0.5, kernel=(1, 1)),
                                rng=np.random.RandomState(0))
    h = PF.convolution(x, 1, (3, 3), (1, 1), (1, 1), w_init=w_init)
    loss = F.mean(F.softmax_cross_entropy(PF.affine(h, 2, w_init=w_init), y))
    solver = S.Adam()
    solver.set_parameters(nn.get_parameters())
    loss.forward()
    solver.zero_grad()
    loss.backward()
    params = list(nn.get_parameters().values())
    everyone = MPI.COMM_WORLD.allgather([p.g.copy() for p in params])
    before = comm.collectives_issued
    comm.all_reduce([p.grad for p in params], division=True)
    ok.true(comm.collectives_issued - before == 1,
            "the tutorial's gradients took more than one collective")
    for i, p in enumerate(params):
        ok.close(p.g, sum(g[i] for g in everyone) / np.float32(n), f"tutorial gradient {i}")
    grads = MPI.COMM_WORLD.allgather(b"".join(p.g.tobytes() for p in params))
    ok.true(len(set(grads)) == 1, "tutorial gradients differ between ranks after all_reduce")
    solver.update()
    weights = MPI.COMM_WORLD.allgather(b"".join(p.d.tobytes() for p in params))
    ok.true(len(set(weights)) == 1, "parameters differ between ranks after the update")
    nn.clear_parameters()


def check_bad_arguments(comm, ok: Checks, n: int, r: int) -> None:
    """Every rank passes the same bad argument: each raises RankArgumentError with its own
    error first (the arguments of a collective); a callback's are checked where it is made."""
    a = np.zeros((4, 4), np.float32)
    ok.raises(C.RankArgumentError, "not C-contiguous", lambda: comm.all_reduce(a.T), "non-contiguous")
    ok.raises(C.RankArgumentError, "division=True needs floating-point",
              lambda: comm.all_reduce(np.zeros(3, np.int64), division=True),
              "integer with division")
    ok.raises(C.RankArgumentError, "empty list", lambda: comm.all_reduce([]), "empty list")
    ok.raises(C.RankArgumentError, r"src=\d+ is out of range", lambda: comm.bcast(a, src=n),
              "src out of range")
    ok.raises(C.RankArgumentError, r"dst=-1 is out of range", lambda: comm.reduce(a, dst=-1),
              "dst out of range")
    ok.raises(C.RankArgumentError, "is a Variable", lambda: comm.all_reduce(nn.Variable((2,))), "Variable")
    ok.raises(C.RankArgumentError, "is a list", lambda: comm.all_reduce([[1.0, 2.0]]), "nested list")
    ok.raises(C.RankArgumentError, "dtype object", lambda: comm.all_reduce(np.zeros(2, object)),
              "object dtype")
    ok.raises(C.RankArgumentError, "one array per rank",
              lambda: comm.all_gather(a, [a.copy()] * (n + 1)), "all_gather list length")
    ok.raises(DpnbError, "pack_size must be a positive",
              lambda: comm.all_reduce_callback([a], 0), "pack_size 0")


def check_inline(comm, ok: Checks, n: int, r: int) -> None:
    """Small data travel with the agreement check: one collective, every dtype, every operation."""
    for dtype in (np.float16, np.float32, np.float64, np.int32, np.int64):
        data = all_data(n, 70, [(1,), (3, 2), (5,)], dtype)
        mine = [a.copy() for a in data[r]]
        before = comm.collectives_issued
        comm.all_reduce(mine)
        ok.true(comm.collectives_issued - before == 1,
                f"small {np.dtype(dtype)} all_reduce took {comm.collectives_issued - before} "
                "collectives, expected 1")
        for i, got in enumerate(mine):
            ok.close(got, sum(data[k][i] for k in range(n)), f"small {np.dtype(dtype)} sum {i}")
        if np.dtype(dtype).kind == "f":
            mine = [a.copy() for a in data[r]]
            comm.all_reduce(mine, division=True)
            for i, got in enumerate(mine):
                exp = (sum(data[k][i] for k in range(n)) / n).astype(dtype)
                ok.close(got, exp, f"small {np.dtype(dtype)} mean {i}")
        mine = [a.copy() for a in data[r]]
        comm.bcast(mine, src=n - 1)
        for i, got in enumerate(mine):
            ok.close(got, data[n - 1][i], f"small {np.dtype(dtype)} bcast {i}")
        mine = [a.copy() for a in data[r]]
        comm.reduce(mine, dst=0)
        for i, got in enumerate(mine):
            exp = sum(data[k][i] for k in range(n)) if r == 0 else data[r][i]
            ok.close(got, exp, f"small {np.dtype(dtype)} reduce {i}")


def check_mismatches(comm, ok: Checks, n: int, r: int) -> None:
    """A rank that calls differently: every rank raises the same AgreementError."""
    cases = {
        "count": (lambda: comm.all_reduce([np.ones(3), np.ones(3)] if r == 0 else [np.ones(3)]),
                  "array count"),
        "shape": (lambda: comm.all_reduce(np.ones(3 if r == 0 else 4)),
                  r"float64\[3\].*float64\[4\]"),
        "dtype": (lambda: comm.all_reduce(np.ones(3, np.float32 if r == 0 else np.float64)),
                  r"rank 0: float32\[3\]"),
        "operation": (lambda: (comm.bcast(np.ones(3), src=0) if r == 0
                               else comm.all_reduce(np.ones(3))),
                      r"rank 0: bcast.*rank 1: all_reduce"),
        "division": (lambda: comm.all_reduce(np.ones(3), division=(r == 0)), "division"),
        # rank 0's data travel with the check, the others' are too large to
        "inline or not": (lambda: comm.all_reduce(np.ones(3 if r == 0 else 100_000)),
                           (r"rank 0: all_reduce.*float64\[3\].*rank 1: all_reduce.*"
                            r"float64\[100000\]")),
    }
    for name, (call, pattern) in cases.items():
        error = ok.raises(C.AgreementError, pattern, call, f"mismatched {name}")
        messages = MPI.COMM_WORLD.allgather(str(error))
        ok.true(len(set(messages)) == 1, f"mismatched {name}: ranks raised different messages")
    a = np.full(2, r + 1.0)
    comm.all_reduce(a)  # still usable afterwards
    ok.close(a, np.full(2, n * (n + 1) / 2), "all_reduce after mismatches")
    # the same arrays again after a call of theirs failed its check, which had packed
    # their bucket while the check travelled: the next call starts from scratch
    items = [np.full(50, r + 1.0) for _ in range(3)]  # 1200 bytes: a bucket, not inline
    ok.raises(C.AgreementError, "division", lambda: comm.all_reduce(items, division=(r == 0)),
              "mismatched division on a bucket")
    before = comm.collectives_issued
    comm.all_reduce(items)
    ok.true(comm.collectives_issued - before == 1, "the bucket took more than one collective")
    for i, item in enumerate(items):
        ok.close(item, np.full(50, n * (n + 1) / 2), f"bucket item {i} after a failed check")


def main() -> None:
    comm = C.MultiProcessCommunicator(nn.Context())
    comm.init()
    n, r = comm.size, comm.rank
    ok = Checks(r)
    ok.true(comm.ctx.device_id == str(comm.local_rank) and comm.local_rank == r,
            "init sets ctx.device_id to the local rank")
    ok.true(comm.name == "MultiProcessDataParallelCommunicator", "name")
    ok.true(comm.segment_bytes == DEFAULT_SEGMENT_BYTES, "cache-sized segments on one host")
    check_all_reduce(comm, ok, n, r)
    check_flat_storage(comm, ok, n, r)
    check_reduce_bcast(comm, ok, n, r)
    check_gather_scatter(comm, ok, n, r)
    check_bad_arguments(comm, ok, n, r)
    check_inline(comm, ok, n, r)
    check_mismatches(comm, ok, n, r)
    check_callback(comm, ok, n, r)
    check_tutorial(comm, ok, n, r)
    check_groups(comm, ok, n, r)
    comm.barrier()
    ok.finish()


if __name__ == "__main__":
    guarded(main)
