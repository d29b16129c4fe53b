"""Run under mpiexec with 2 or 3 ranks: the gradient reducer against
comm.all_reduce and against NumPy references (the mean of every rank's
gradients, gathered with mpi4py), after and during backward, with the list in
and out of storage order, and with flat storage growing between steps; and
the count of plans built and collectives issued per step of a network with
several sync-BN layers (no plan after the first step); and the agreement check of
backward's callback, waited for only when the first pack is ready."""
from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

import dpnb as nn
import dpnb.communicators as C
import dpnb.functions as F
import dpnb.parametric_functions as PF
import dpnb.solvers as S
from dpnb.errors import AgreementError, DpnbError
from dpnb.testing import Checks, guarded, rank_data


def mlp(x):
    h = F.tanh(PF.affine(x, 16, name="fc1"))
    h = F.tanh(PF.affine(h, 12, name="fc2"))
    return F.mean(PF.affine(h, 3, name="fc3") ** 2)


def mean_over_ranks(arrays: list) -> list:
    everyone = MPI.COMM_WORLD.allgather([a.copy() for a in arrays])
    n = len(everyone)
    return [sum(g[i] for g in everyone) / np.float32(n) for i in range(len(arrays))]


def backward_of(loss, params, callback=None) -> None:
    loss.forward()
    for p in params:
        p.grad.zero()
    loss.backward(communicator_callbacks=callback)


def check_against_references(comm, ok: Checks, r: int) -> None:
    """Every path gives the NumPy mean of the ranks' gradients, bit for bit alike."""
    x = nn.Variable.from_numpy_array(rank_data(r, 1, (5, 7), np.float32))
    loss = mlp(x)
    solver = S.Sgd(0.1)
    params = list(nn.get_parameters().values())
    solver.set_parameters(nn.get_parameters())
    reducer = comm.gradient_reducer(solver, division=True, pack_size=64)
    ok.true(isinstance(reducer, C.GradientReducer), "gradient_reducer gives a GradientReducer")
    backward_of(loss, params)
    expected = mean_over_ranks([p.g for p in params])
    shuffled = [params[i] for i in (3, 0, 5, 1, 4, 2)]
    paths = {
        "reducer.all_reduce()": lambda: reducer.all_reduce(),
        "all_reduce, storage order": lambda: comm.all_reduce([p.grad for p in params],
                                                            division=True),
        "all_reduce, shuffled": lambda: comm.all_reduce([p.grad for p in shuffled],
                                                       division=True),
        "all_reduce, reversed": lambda: comm.all_reduce([p.grad for p in params[::-1]],
                                                       division=True),
    }
    results = {}
    for name, reduce in paths.items():
        backward_of(loss, params)
        before = comm.collectives_issued
        reduce()
        issued = comm.collectives_issued - before
        ok.true(issued == 1, f"{name}: {issued} collectives for one flat stretch, expected 1")
        for i, p in enumerate(params):
            ok.close(p.g, expected[i], f"{name}: gradient {i}")
        results[name] = b"".join(p.g.tobytes() for p in params)
    ok.true(len(set(results.values())) == 1, "the paths give different bits")
    callbacks = {
        "reducer as callback": reducer,
        "all_reduce_callback, shuffled": comm.all_reduce_callback([p.grad for p in shuffled],
                                                                 64, division=True),
        "get_all_reduce_callback": comm.get_all_reduce_callback(pack_size=64),
    }
    for name, callback in callbacks.items():
        for step in range(2):  # the same callback reused
            backward_of(loss, params, callback)
            for i, p in enumerate(params):
                ok.close(p.g, expected[i], f"{name} (use {step + 1}): gradient {i}")
            mine = b"".join(p.g.tobytes() for p in params)
            ok.true(len(set(MPI.COMM_WORLD.allgather(mine))) == 1,
                    f"{name}: gradients differ between ranks")
    sums = comm.gradient_reducer(solver, division=False)
    backward_of(loss, params)
    sums.all_reduce()
    for i, p in enumerate(params):
        ok.close(p.g, expected[i] * np.float32(comm.size), f"division=False: gradient {i}")
    nn.clear_parameters()


def check_storage_growth(comm, ok: Checks, r: int) -> None:
    """Flat storage grows (and moves) between steps: the reducer, as callback or
    after backward, and all_reduce of the same list re-plan once and reduce the new
    memory; the solver's new parameters are followed too."""
    x = nn.Variable.from_numpy_array(rank_data(r, 2, (4, 6), np.float32))
    loss = mlp(x)
    solver = S.Sgd(0.1)
    solver.set_parameters(nn.get_parameters())
    params = list(nn.get_parameters().values())
    reducer = comm.gradient_reducer(solver, division=True, pack_size=50)
    paths = {  # name: (backward's callback, what runs after backward)
        "reducer.all_reduce()": (None, reducer.all_reduce),
        "reducer as callback": (reducer, lambda: None),
        "all_reduce(list)": (None, lambda: comm.all_reduce([p.grad for p in params],
                                                          division=True)),
    }
    for k, (name, (callback, after)) in enumerate(paths.items()):
        def step():
            backward_of(loss, params, callback)
            after()

        step()
        built = comm.plans_built
        step()
        ok.true(comm.plans_built == built, f"{name}: a plan was built on the second step "
                f"({comm.plans_built - built})")
        where = params[0].g.__array_interface__["data"][0]
        with nn.parameter_scope(f"grown{k}"):
            nn.get_parameter_or_create("big", (200000,))  # beyond the capacity: storage moves
        ok.true(params[0].g.__array_interface__["data"][0] != where, "storage did not move")
        backward_of(loss, params)
        expected = mean_over_ranks([p.g for p in params])
        built = comm.plans_built
        step()
        ok.true(comm.plans_built > built, f"{name}: no new plan after the storage moved")
        for i, p in enumerate(params):
            ok.close(p.g, expected[i], f"{name}, after growth: gradient {i}")
        built = comm.plans_built
        step()
        ok.true(comm.plans_built == built, f"{name}: re-planned again")
        for i, p in enumerate(params):
            ok.close(p.g, expected[i], f"{name}, step after growth: gradient {i}")
    # the solver takes more parameters: the reducer follows them
    with nn.parameter_scope("extra"):
        extra = nn.get_parameter_or_create("w", (3,), initializer=np.ones(3))
    loss2 = loss + F.sum(extra * F.slice(x, (0, 0), (1, 3)))
    solver.set_parameters({"extra/w": extra}, reset=False)
    everything = params + [extra]
    backward_of(loss2, everything)
    expected = mean_over_ranks([p.g for p in everything])
    backward_of(loss2, everything)
    reducer.all_reduce()
    for i, p in enumerate(everything):
        ok.close(p.g, expected[i], f"after set_parameters: gradient {i}")
    nn.clear_parameters()


def check_errors(comm, ok: Checks) -> None:
    ok.raises(DpnbError, "expects a dpnb solver", lambda: comm.gradient_reducer(object()),
              "not a solver")
    ok.raises(DpnbError, "has no parameters", lambda: comm.gradient_reducer(S.Sgd()),
              "a solver without parameters")
    with nn.parameter_scope("e"):
        w = nn.get_parameter_or_create("w", (2,))
    solver = S.Sgd()
    solver.set_parameters({"w": w})
    ok.raises(DpnbError, "pack_size must be a positive",
              lambda: comm.gradient_reducer(solver, pack_size=0), "pack_size 0")
    nn.clear_parameters()


def sync_bn_net(x, comm):
    """A small ResNet-like network: a stem, two residual blocks and a head, six sync-BN layers."""
    def conv_bn(h, maps, name, relu=True):
        with nn.parameter_scope(name):
            h = PF.convolution(h, maps, (3, 3), pad=(1, 1), with_bias=False)
            h = PF.sync_batch_normalization(h, comm)
        return F.relu(h) if relu else h

    h = conv_bn(x, 4, "stem")
    for b in range(2):
        with nn.parameter_scope(f"block{b}"):
            h = F.relu(h + conv_bn(conv_bn(h, 4, "a"), 4, "b", relu=False))
    h = conv_bn(h, 4, "head")
    return F.mean(PF.affine(F.global_average_pooling(h), 2, name="fc") ** 2)


def check_plans_per_step(comm, ok: Checks, r: int) -> None:
    """No plan is built after the first step, and each step issues the same collectives:
    two per sync-BN layer in forward, one in backward, and the gradients' chunks."""
    layers = 6
    x = nn.Variable.from_numpy_array(rank_data(r, 3, (2, 3, 6, 6), np.float32))
    loss = sync_bn_net(x, comm)
    solver = S.Momentum(0.01)
    solver.set_parameters(nn.get_parameters())
    params = list(nn.get_parameters().values())
    reducer = comm.gradient_reducer(solver, division=True)
    gradient_chunks = len(reducer.plan.chunks)
    forms = {
        "reducer.all_reduce()": (None, reducer.all_reduce),
        "reducer as callback": (reducer, lambda: None),
        "nnabla all_reduce(list)": (None, lambda: comm.all_reduce([p.grad for p in params],
                                                                  division=True)),
    }
    for name, (callback, after) in forms.items():
        counts = []
        for step in range(4):
            plans, issued = comm.plans_built, comm.collectives_issued
            loss.forward()
            solver.zero_grad()
            loss.backward(communicator_callbacks=callback)
            after()
            solver.update()
            counts.append((comm.plans_built - plans, comm.collectives_issued - issued))
        expected = 3 * layers + gradient_chunks
        ok.true(all(plans == 0 for plans, _ in counts[1:]),
                f"{name}: plans built per step {[p for p, _ in counts]}, expected none after "
                "the first")
        ok.true(all(issued == expected for _, issued in counts),
                f"{name}: collectives per step {[i for _, i in counts]}, expected {expected}")
    weights = MPI.COMM_WORLD.allgather(b"".join(p.d.tobytes() for p in params))
    ok.true(len(set(weights)) == 1, "parameters differ between ranks after training")
    nn.clear_parameters()


LATE_S = 0.6  # how long the other ranks start backward after rank 0


class Clock:
    """A callback beside the reducer: when each function's backward (and the reducer's
    work after it) finished, from ``start``."""

    def __init__(self):
        self.start, self.times = 0.0, []

    def on_finish_function_backward(self, fn) -> None:
        self.times.append(time.perf_counter() - self.start)

    def on_finish(self) -> None:
        pass


def check_deferred_agreement(comm, ok: Checks, r: int) -> None:
    """During backward the agreement check is waited for only when the first pack is
    ready: rank 0 runs backward up to there while the others start it ``LATE_S`` later
    (before, it waited for them at backward's first function).  With sync BN's
    collectives in backward (which settle the check first) the gradients are those of
    backward then all_reduce; a mismatch found there raises AgreementError on every
    rank, and the next backward works."""
    x = nn.Variable.from_numpy_array(rank_data(r, 5, (5, 7), np.float32))
    loss = mlp(x)
    solver = S.Sgd(0.1)
    solver.set_parameters(nn.get_parameters())
    reducer = comm.gradient_reducer(solver, division=True)  # one pack: ready at the end
    clock = Clock()
    loss.forward()
    solver.zero_grad()
    comm.barrier()
    if r != 0:
        time.sleep(LATE_S)
    clock.start = time.perf_counter()
    loss.backward(communicator_callbacks=[reducer, clock])
    total = time.perf_counter() - clock.start
    if r == 0:
        ok.true(clock.times[-2] < LATE_S / 2 and total > LATE_S * 0.9,
                f"rank 0 ran backward while the others were late: functions done at "
                f"{[round(t, 3) for t in clock.times]} s, backward took {total:.3f} s, the "
                f"others started it {LATE_S} s later")
    params = list(nn.get_parameters().values())
    backward_of(loss, params)
    comm.all_reduce([p.grad for p in params], division=True)
    expected = [p.g.copy() for p in params]
    mismatched = comm.all_reduce_callback([p.grad for p in params], 1 << 20,
                                          division=(r == 0))
    for use in (1, 2):  # the second use checks afresh: its failed first one reset it
        ok.raises(AgreementError, "differ in: division",
                  lambda: backward_of(loss, params, mismatched),
                  f"callbacks of different division, use {use}")
    backward_of(loss, params, reducer)
    for i, p in enumerate(params):
        ok.close(p.g, expected[i], f"after the mismatched callback: gradient {i}")
    nn.clear_parameters()

    x = nn.Variable.from_numpy_array(rank_data(r, 6, (2, 3, 6, 6), np.float32))
    loss = sync_bn_net(x, comm)
    solver.set_parameters(nn.get_parameters())
    params = list(nn.get_parameters().values())
    backward_of(loss, params)
    comm.all_reduce([p.grad for p in params], division=True)
    expected = [p.g.copy() for p in params]
    reducer = comm.gradient_reducer(solver, division=True)
    mismatched = comm.all_reduce_callback([p.grad for p in params], 1 << 20,
                                          division=(r == 0))

    def step_gives_expected(name: str) -> None:
        backward_of(loss, params, reducer)
        for i, p in enumerate(params):
            ok.close(p.g, expected[i], f"sync BN, {name}: gradient {i}")

    step_gives_expected("reducer")
    # The mismatch is found by the first sync-BN collective of backward, which settles
    # the callback's check; used again, the callback raises it again, then checks afresh.
    for use in (1, 2, 3):
        ok.raises(AgreementError, "differ in: division",
                  lambda: backward_of(loss, params, mismatched),
                  f"sync BN, callbacks of different division, use {use}")
    step_gives_expected("reducer after the mismatch")
    nn.clear_parameters()


def main() -> None:
    comm = C.MultiProcessCommunicator(nn.Context())
    comm.init()
    ok = Checks(comm.rank)
    check_against_references(comm, ok, comm.rank)
    check_storage_growth(comm, ok, comm.rank)
    check_errors(comm, ok)
    check_plans_per_step(comm, ok, comm.rank)
    check_deferred_agreement(comm, ok, comm.rank)
    comm.barrier()
    ok.finish()


if __name__ == "__main__":
    guarded(main)
