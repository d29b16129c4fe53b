"""Resuming a session on a real 2-engine cluster: the journal of %%px cells, TrainingState
commits, an engine SIGKILLed mid-training, ``restart(resume=True)``, and the training
cell run again ending with the parameters of an uninterrupted run, bit for bit."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from dpnb.cluster import Cluster
from dpnb.cluster.journal import Entry
from dpnb.errors import DpnbError
from dpnb.notebook import gather
from dpnb.testing import check_ranks

TIMEOUT = 60
N_STEPS = 60

DEFINE = [
    """%%px
import time
from pathlib import Path
import numpy as np
import dpnb
import dpnb.communicators as C
import dpnb.functions as F
import dpnb.parametric_functions as PF
import dpnb.solvers as S
from dpnb.ext_utils import get_extension_context
ctx = get_extension_context("cpu")
comm = C.MultiProcessCommunicator(ctx)
comm.init()
""",
    """%%px
nn = dpnb
nn.clear_parameters()
nn.seed(7)
np.random.seed(comm.rank)          # each rank draws its own data
x = nn.Variable((8, 6))
t = nn.Variable((8, 1))
h = F.relu(PF.batch_normalization(PF.affine(x, 16, name="fc1"), name="bn"))
h = F.dropout(h, 0.25)             # draws from dpnb's generator
loss = F.mean(F.squared_error(PF.affine(h, 1, name="fc2"), t))
solver = S.Adam(0.01)
solver.set_parameters(nn.get_parameters())
""",
    """%%px
state = dpnb.TrainingState(solver=solver, step=0)
""",
]
TRAIN = f"""%%px
while state.step < {N_STEPS}:
    x.d = np.random.randn(*x.shape)
    t.d = np.random.randn(*t.shape)
    loss.forward()
    solver.zero_grad()
    loss.backward()
    comm.all_reduce([p.grad for p in nn.get_parameters().values()], division=True)
    solver.update()
    solver.set_learning_rate(0.01 / (1 + 0.05 * state.step))
    state.step += 1
    if state.step % 4 == 0:
        state.commit()
    time.sleep(0.02)
"""
PARAMETERS = "{k: v.d.copy() for k, v in nn.get_parameters(grad_only=False).items()}"


@pytest.fixture(scope="module")
def shell(ipython_dir):
    """IPython as a notebook's kernel runs it, with a private IPYTHONDIR."""
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


@pytest.fixture(scope="module")
def cluster(shell):
    c = Cluster(2, timeout=TIMEOUT, progress=False)
    c.start()
    shell.run_line_magic("load_ext", "dpnb")
    yield c
    state_dir = c.state_dir
    assert os.path.isdir(state_dir) and state_dir.startswith(c.ipp.profile_dir)
    c.stop()
    assert not os.path.exists(state_dir)                       # the cluster's own: removed


def run(shell, source: str):
    result = shell.run_cell(source)
    assert result.success, result.error_in_exec
    return result


def fresh_session(cluster, shell) -> None:
    cluster.restart()
    assert len(cluster.journal) == 0
    for cell in DEFINE:
        run(shell, cell)


def kill_after_marker(cluster, number: int) -> threading.Thread:
    """SIGKILL rank 1's engine once commit ``number`` is complete (while training runs)."""
    victim = cluster.view.apply_sync(os.getpid)[1]
    marker = os.path.join(cluster.state_dir, f"commit-{number:06d}.complete")

    def kill():
        deadline = time.monotonic() + TIMEOUT
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(victim, signal.SIGKILL)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def uninterrupted(cluster, shell):
    """The parameters after training the session's cells without interruption."""
    fresh_session(cluster, shell)
    run(shell, TRAIN)
    return gather(PARAMETERS)


def test_killed_mid_training_resumes_to_the_same_parameters(cluster, shell, uninterrupted, capsys):
    fresh_session(cluster, shell)
    killer = kill_after_marker(cluster, 3)
    result = shell.run_cell(TRAIN)
    killer.join()
    assert not result.success                                  # the engine died in the cell
    assert [e.training for e in cluster.journal] == [False, False, False]  # failed: not kept
    capsys.readouterr()

    cluster.restart(resume=True)
    out = capsys.readouterr().out
    assert "Replaying 3 of 3 journal cells" in out and "[2] state = dpnb.TrainingState" in out
    restored = gather("state.step")
    assert restored[0] == restored[1] and 12 <= restored[0] < N_STEPS
    assert restored[0] % 4 == 0
    assert f"Restored TrainingState commit {restored[0] // 4} on all 2 ranks: " \
           f"step={restored[0]}" in out

    run(shell, TRAIN)                                          # the training cell, again
    resumed = gather(PARAMETERS)
    for rank in (0, 1):
        assert list(resumed[rank]) == list(uninterrupted[rank])
        for name, value in uninterrupted[rank].items():
            np.testing.assert_array_equal(resumed[rank][name], value, err_msg=name)
    assert "bn/bn/mean" in resumed[0]                          # running statistics included
    assert [e.training for e in cluster.journal] == [False, False, False, True]


def test_journal_table_and_editing(cluster, shell, capsys):
    journal = cluster.journal
    assert len(journal) == 4 and journal[3].training
    table = shell.run_line_magic("dpnb", "journal")
    assert table is journal
    text = repr(journal)
    assert "training (not replayed)" in text and "state = dpnb.TrainingState" in text
    assert "<table>" in journal._repr_html_()
    assert [e.first_line for e in journal.replayed] == [
        "import time", "nn = dpnb", "state = dpnb.TrainingState(solver=solver, step=0)"]

    journal.append("%%px\nmarker = 'added'")
    journal[4].source = "print('not on the engines')"
    with pytest.raises(DpnbError, match=r"journal entries \[4\] are not %%px cells"):
        cluster.restart(resume=True)
    journal[4].source = "%%px\nmarker = 'edited'"
    with pytest.raises(DpnbError, match="%%px cell"):
        journal.append("print('not a px cell')")
    run(shell, "%%px --targets 1\ntargeted = rank")
    assert journal[5].source.startswith("%%px --targets 1")
    shell.run_cell("%%px\n1 / 0")                              # fails: not journaled
    shell.run_cell("print('local cells are not journaled')")
    assert len(journal) == 6
    capsys.readouterr()

    shell.run_line_magic("dpnb", "restart --resume")
    assert gather("marker") == {0: "edited", 1: "edited"}
    assert gather("'targeted' in globals()") == {0: False, 1: True}
    assert "Restored TrainingState commit 15 on all 2 ranks: step=60" in capsys.readouterr().out
    assert gather("state.step") == {0: 60, 1: 60}

    del journal[2]                                             # the state is made in no cell now
    journal.insert(0, Entry("%%px\nmarker = 'first'"))
    assert journal[0].first_line == "marker = 'first'"
    capsys.readouterr()
    cluster.restart(resume=True)
    out = capsys.readouterr().out
    assert "TrainingState commit 15 (step=60) will be restored when a TrainingState is " \
           "constructed" in out
    run(shell, "%%px\nstate = dpnb.TrainingState(solver=solver, step=0)")
    assert gather("(state.step, state.restored)") == {0: (60, 15), 1: (60, 15)}


def test_a_failing_journal_cell_stops_the_resume(cluster, shell, capsys):
    cluster.journal.insert(1, "%%px\nraise ValueError('broken on purpose')")
    with pytest.raises(DpnbError, match=r"resume stopped at journal entry \[1\].*ValueError"):
        cluster.restart(resume=True)
    assert "broken on purpose" in capsys.readouterr().out     # the cell's own traceback
    assert gather("marker") == {0: "first", 1: "first"}       # entries before it ran
    assert gather("'comm' in globals()") == {0: False, 1: False}
    cluster.restart()
    assert len(cluster.journal) == 0                           # a plain restart starts afresh


def test_commit_without_marker_restores_the_previous_commit(cluster, shell, capsys):
    fresh_session(cluster, shell)
    run(shell, TRAIN.replace(f"< {N_STEPS}", "< 8"))           # commits 1 and 2
    os.mkdir(os.path.join(cluster.state_dir, "commit-000003.complete"))  # the marker cannot be written
    result = shell.run_cell(TRAIN.replace(f"< {N_STEPS}", "< 12"))
    assert not result.success
    shown = capsys.readouterr()   # %%px shows the ranks' errors once the cell is done
    assert "commit 3 failed: rank 0 could not mark it complete" in shown.out + shown.err
    files = sorted(os.listdir(cluster.state_dir))
    assert "commit-000003.rank-0.npz" in files and "commit-000003.rank-1.npz" in files
    os.rmdir(os.path.join(cluster.state_dir, "commit-000003.complete"))
    capsys.readouterr()
    cluster.restart(resume=True)
    assert "Restored TrainingState commit 2 on all 2 ranks: step=8" in capsys.readouterr().out
    assert gather("state.step") == {0: 8, 1: 8}


def test_bad_state_input_is_refused(cluster, shell, capsys):
    for cell, message in [
            ("state = dpnb.TrainingState(solver=3)", "must be a solver"),
            ("state = dpnb.TrainingState(solver=solver, when=object())", "JSON values"),
            ("state = dpnb.TrainingState(solver=solver, rngs={'r': 1})", "keeps the state of"),
            ("state = dpnb.TrainingState(solver=solver, commit=1)", "hide its own attributes")]:
        capsys.readouterr()
        result = shell.run_cell("%%px\n" + cell)
        shown = capsys.readouterr()
        assert not result.success and message in shown.out + shown.err, cell


def test_noblock_cells_are_kept_once_they_succeed(cluster, shell):
    before = len(cluster.journal)
    run(shell, "%%px --noblock\nimport time; time.sleep(0.5); quiet = 1")
    run(shell, "%%px --noblock\nimport time; time.sleep(0.5); 1 / 0")
    assert cluster.journal[-1].result is not None             # both still running
    assert "running" in repr(cluster.journal)
    cluster.client.wait(timeout=TIMEOUT)
    assert len(cluster.journal) == before + 1                  # the failed one is gone
    assert cluster.journal[-1].first_line == "import time; time.sleep(0.5); quiet = 1"
    assert not cluster.journal[-1].training and cluster.journal[-1].result is None


ONE_PROCESS = """
import os, random, sys
import numpy as np
import dpnb as nn, dpnb.functions as F, dpnb.parametric_functions as PF, dpnb.solvers as S
from dpnb.cluster.engine import training_state
from dpnb.context import to_module
from dpnb.ext_utils import get_extension_context

ctx = get_extension_context(sys.argv[1])
directory = sys.argv[2]
gen, py = np.random.default_rng(3), random.Random(4)

def session():
    nn.clear_parameters()
    nn.seed(1)
    np.random.seed(0)
    random.seed(5)
    gen.bit_generator.state = np.random.default_rng(3).bit_generator.state
    py.seed(4)
    with nn.context_scope(ctx):
        x, t = nn.Variable((8, 4)), nn.Variable((8, 1))
        h = F.dropout(F.relu(PF.batch_normalization(PF.affine(x, 16, name="a"))), 0.3)
        loss = F.mean(F.squared_error(PF.affine(h, 1, name="b"), t))
    solver = S.Momentum(0.05)
    solver.set_parameters(nn.get_parameters())
    return x, t, loss, solver

def train(x, t, loss, solver, state, until):
    while state.step < until:
        x.d = np.random.randn(*x.shape) + gen.normal() + py.random() + random.random()
        t.d = np.random.randn(*t.shape)
        loss.forward()
        solver.zero_grad()
        loss.backward()
        solver.update()
        state.step += 1
        if state.step % 3 == 0:
            state.commit()

net = session()
state = nn.TrainingState(solver=net[3], rngs={"gen": gen, "py": py}, directory=directory, step=0)
train(*net, state, 10)
reference = {k: to_module(v.d, np).copy() for k, v in nn.get_parameters(grad_only=False).items()}
draws = (gen.normal(), py.random(), random.random(), np.random.rand(), nn.random.prng.rand())

net = session()                                   # a fresh run dies after step 8
state = nn.TrainingState(solver=net[3], rngs={"gen": gen, "py": py}, directory=directory, step=0)
train(*net, state, 8)
training_state.prepare_resume()                   # what a resume does on a fresh engine
net = session()
state = nn.TrainingState(solver=net[3], rngs={"gen": gen, "py": py}, directory=directory, step=0)
gen.normal(), py.random(), random.random(), np.random.rand(), nn.random.prng.rand()  # later cells draw
assert training_state.finish_resume() == {"restored": 2, "counters": {"step": 6}}
train(*net, state, 10)
for k, v in nn.get_parameters(grad_only=False).items():
    assert np.array_equal(to_module(v.d, np), reference[k]), k
assert (gen.normal(), py.random(), random.random(), np.random.rand(),
        nn.random.prng.rand()) == draws
print("identical", sorted(os.listdir(directory)))
"""


@pytest.mark.parametrize("extension", ["cpu", "cudnn"])
def test_restore_in_one_process(tmp_path, extension, request):
    """Parameters, a Momentum solver's states, dpnb's, NumPy's, Python's and the user's
    generators come back from a commit (one MPI rank, host or GPU arrays: the real CuPy's
    or the stand-in's)."""
    env = request.getfixturevalue("gpu_environment") if extension == "cudnn" else {}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(ONE_PROCESS), extension,
                             str(tmp_path)], capture_output=True, text=True, timeout=120,
                            check=False, env={**os.environ, **env})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "identical ['commit-000003.complete', 'commit-000003.rank-0.npz']" in result.stdout


def test_commits_across_ranks_and_resume_outside_a_restart(tmp_path):
    """Two ranks commit, agreeing in JSON over MPI; a rank's failed write and rank 0's
    failed marker fail the commit on both; ``resume=True`` takes the last commit, and a
    new run warns, naming the commits, before it removes them."""
    check_ranks(2, Path(__file__).parent / "mpi_scripts" / "training_state.py", str(tmp_path),
                timeout=120)


@pytest.mark.parametrize("text", ['{"commit": 4}', '[4, 2]', '{"commit": 4, "size": 2, '
                                  '"counters": [1]}', "{not json"])
def test_a_marker_not_as_rank_0_writes_it_is_no_commit(tmp_path, text):
    from dpnb.cluster.engine.training_state import _marker_file, _read_marker

    with open(_marker_file(str(tmp_path), 4), "w") as f:
        f.write(text)
    assert _read_marker(str(tmp_path), 4) is None
    with open(_marker_file(str(tmp_path), 5), "w") as f:
        f.write('{"commit": 5, "size": 2, "counters": {"step": 10}}')
    assert _read_marker(str(tmp_path), 5) == {"commit": 5, "size": 2, "counters": {"step": 10}}
