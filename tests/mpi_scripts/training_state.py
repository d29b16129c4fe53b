"""Run under mpiexec with 2 ranks and a shared directory: TrainingState across ranks,
whose agreement travels as JSON over MPI (never pickles).

Commits 1 and 2 on both ranks, which remove what a killed commit left; a commit whose
file rank 1 cannot write fails on every rank naming rank 1 and the OSError; one whose
marker rank 0 cannot write fails on every rank too.  A new state with ``resume=True``
takes commit 2 (the counters, the parameters), passing over a commit 4 whose marker
lacks what rank 0 writes; one without it warns on rank 0, naming commits 2-4 and how to
keep them, then removes every rank's files."""
from __future__ import annotations

import os
import shutil
import sys

import numpy as np
from mpi4py import MPI

import dpnb as nn
import dpnb.parametric_functions as PF
import dpnb.solvers as S
from dpnb.cluster.engine.training_state import _marker_file, _rank_file
from dpnb.testing import Checks, LoggedWarnings, guarded


def network():
    nn.clear_parameters()
    PF.affine(nn.Variable((2, 3)), 4, name="fc")
    solver = S.Sgd(0.1)
    solver.set_parameters(nn.get_parameters())
    return solver


def main(directory: str) -> None:
    world = MPI.COMM_WORLD
    r = world.Get_rank()
    ok = Checks(r)
    solver = network()
    state = nn.TrainingState(solver=solver, directory=directory, step=0, name="run")
    killed = os.path.join(directory, f".commit-7.rank-{r}.npz.x1y2z3.tmp")  # a killed write's
    with open(killed, "wb") as f:
        f.write(b"partial")
    for step in (5, 10):
        nn.get_parameters()["fc/affine/W"].d = step + r
        state.step = step
        ok.true(state.commit() == step // 5, f"commit at step {step}")
    ok.true(not os.path.exists(killed), "a commit sweeps the temporaries of killed ones")

    blocked = _rank_file(directory, 3, 1)
    if r == 1:
        os.mkdir(blocked)  # the file cannot replace a directory
    world.Barrier()
    ok.raises(nn.DpnbError, r"commit 3 failed \(nothing was committed; the last complete "
              r"commit is 2\): rank 1: \w+Error", state.commit, "a rank's write fails")
    if r == 1:
        os.rmdir(blocked)
    if r == 0:
        os.mkdir(_marker_file(directory, 3))
    world.Barrier()
    ok.raises(nn.DpnbError, "commit 3 failed: rank 0 could not mark it complete",
              state.commit, "rank 0's marker fails")
    world.Barrier()
    if r == 0:
        os.rmdir(_marker_file(directory, 3))

    shutil.copyfile(_rank_file(directory, 2, r), _rank_file(directory, 4, r))
    if r == 0:  # a marker that is JSON but not one rank 0 writes: commit 4 is no commit
        with open(_marker_file(directory, 4), "w") as f:
            f.write('{"commit": 4}')
    world.Barrier()
    solver = network()
    resumed = nn.TrainingState(solver=solver, directory=directory, resume=True, step=0,
                               name="")
    ok.true((resumed.restored, resumed.step, resumed.name) == (2, 10, "run"),
            "resume=True takes commit 2, past a damaged marker",
            f"{resumed.restored, resumed.step, resumed.name}")
    ok.close(nn.get_parameters()["fc/affine/W"].d, np.full((3, 4), 10.0 + r, np.float32),
             "the parameters of commit 2")

    records = LoggedWarnings("dpnb.cluster.engine.training_state")
    nn.TrainingState(solver=network(), directory=directory, step=0)
    world.Barrier()
    if r == 0:
        ok.true(len(records.messages) == 1 and "removes the commits of an earlier run in "
                f"{directory}: 2, 3, 4; the newest complete one, commit 2, holds step=10, "
                "name='run'.  To continue from an earlier run's last commit instead, "
                "construct the state with resume=True" in records.messages[0],
                "rank 0 names the commits it removes", repr(records.messages))
        ok.true(os.listdir(directory) == [], "every rank's files removed",
                repr(os.listdir(directory)))
    else:
        ok.true(records.messages == [], "only rank 0 warns", repr(records.messages))
    ok.finish()


if __name__ == "__main__":
    guarded(lambda: main(sys.argv[1]))
