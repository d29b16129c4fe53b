"""What a notebook sees when its cluster fails around a ``%%px`` cell: an engine
killed, a rank interrupted in a collective its peer never calls, the cluster
stopped from outside.  A real 2-engine cluster driven through IPython's
``%%px``, and a real 2-rank MPI run of tests/mpi_scripts/peer_broken.py."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dpnb.cluster import Cluster
from dpnb.errors import DpnbError
from dpnb.testing import check_ranks

TIMEOUT = 60
PROMPT = 5.0      # seconds within which a cell must fail where the cluster is gone
SCRIPT = Path(__file__).parent / "mpi_scripts" / "peer_broken.py"
COMM_SETUP = ("%%px\nimport time\nimport numpy as np\nimport dpnb as nn\n"
              "import dpnb.communicators as C\n"
              "comm = C.MultiProcessCommunicator(nn.Context())\ncomm.init()\n"
              "x = [np.ones(10, np.float32)]")


@pytest.fixture(scope="module")
def cluster(ipython_dir):
    """One cluster for the module, started where IPython runs (so ``%%px`` is its view)."""
    from IPython.core.interactiveshell import InteractiveShell

    InteractiveShell.instance()
    c = Cluster(2, timeout=TIMEOUT, progress=False)
    c.start()
    yield c
    c.stop()


@pytest.fixture
def shell(cluster):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    assert shell.magics_manager.registry["ParallelMagics"].view is cluster.view
    return shell


def timed_cell(shell, cell: str):
    start = time.monotonic()
    result = shell.run_cell(cell)
    return result, time.monotonic() - start


def wait_until(condition, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


def test_a_peer_learns_at_once_that_a_rank_broke_its_communicator():
    """Communicator level: the healthy rank's next collective, and a wait under way,
    fail within a second or so naming the interrupted rank, not after the timeout."""
    check_ranks(2, SCRIPT, timeout=90)


def test_after_an_engine_died_the_next_cell_says_restart(cluster, shell):
    victim = cluster.topology().rows[1][3]
    os.kill(victim, signal.SIGKILL)
    try:
        # the controller unregisters it (and rank 0, which mpiexec ends with it)
        assert wait_until(lambda: len(cluster.client.ids) < 2, timeout=30)
        result, elapsed = timed_cell(shell, "%%px\nprint(rank)")
        error = result.error_in_exec
        assert isinstance(error, DpnbError) and elapsed < PROMPT, (repr(error), elapsed)
        message = str(error)
        assert "gone" in message and "cluster.restart(resume=True)" in message
        assert "wait_for_engines" not in message
    finally:
        cluster.restart()
    assert shell.run_cell("%%px\nprint(rank)").success


def test_an_interrupt_shows_every_rank_and_the_next_collective_fails_at_once(
        cluster, shell, capfd):
    assert shell.run_cell(COMM_SETUP).success
    capfd.readouterr()
    threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    result, elapsed = timed_cell(
        shell, "%%px\nif rank == 0:\n    comm.all_reduce(x)\nelse:\n    time.sleep(60)")
    assert elapsed < 15, elapsed
    shown = capfd.readouterr().err
    assert "[rank 0] CommunicatorInterrupted: all_reduce" in shown, shown
    assert "[rank 1] KeyboardInterrupt" in shown, shown
    result, elapsed = timed_cell(shell, "%%px\ncomm.all_reduce(x)")
    assert not result.success and elapsed < PROMPT, elapsed
    told = str(result.error_in_exec) + capfd.readouterr().out
    assert "rank 0 was interrupted in all_reduce #1" in told, told
    assert "communicator is broken" in told and "restart" in told
    cluster.restart()
    assert shell.run_cell("%%px\nprint(rank)").success


def _stop_from_outside(cluster) -> None:
    """``dpnb cluster stop`` in another process, as a terminal (or the panel) would."""
    command = [sys.executable, "-m", "dpnb", "cluster", "stop", "--profile-dir",
               cluster.ipp.profile_dir]
    if cluster.ipp.cluster_id:
        command += ["--cluster-id", cluster.ipp.cluster_id]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_cluster_stopped_from_outside_fails_the_next_cell_at_once(cluster, shell):
    _stop_from_outside(cluster)
    result, elapsed = timed_cell(shell, "%%px\nprint(rank)")
    error = result.error_in_exec
    assert isinstance(error, DpnbError) and elapsed < PROMPT, (repr(error), elapsed)
    assert "controller" in str(error) and "gone" in str(error)
    assert "cluster.restart()" in str(error)
    cluster.restart()                         # a new controller and engines
    assert shell.run_cell("%%px\nprint(rank)").success


def _kill_all(cluster) -> None:
    """SIGKILL to the controller, mpiexec and the engines."""
    for pid in cluster.pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_cell_waiting_on_a_killed_cluster_fails_at_once(cluster, shell):
    """The controller and engines are killed while a cell waits: without an interrupt,
    the cell ends within a second or so with every rank's ClusterGone (ipyparallel's
    client would wait for the dead controller forever)."""
    from ipyparallel.error import CompositeError

    threading.Timer(1.25, _kill_all, (cluster,)).start()
    result, elapsed = timed_cell(shell, "%%px\nimport time\ntime.sleep(60)")
    error = result.error_in_exec
    assert elapsed < 1.25 + PROMPT, elapsed
    assert isinstance(error, CompositeError), repr(error)
    assert [(name, info["engine_id"]) for name, _, _, info in error.elist] == [
        ("ClusterGone", 0), ("ClusterGone", 1)]
    for _, message, _, _ in error.elist:
        assert "controller" in message and "gone" in message and "cluster.restart()" in message
    result, elapsed = timed_cell(shell, "%%px\nprint(rank)")
    assert isinstance(result.error_in_exec, DpnbError) and elapsed < PROMPT
    cluster.restart()
    assert shell.run_cell("%%px\nprint(rank)").success
