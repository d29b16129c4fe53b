"""The engine entry point's preparation of a rank: local rank, threads, re-execution."""
import os
import subprocess
import sys
import textwrap

import pytest

from dpnb.cluster.engine import start as engine
from dpnb.communicators.mpiexec import find_mpiexec


@pytest.mark.parametrize("environ, expected", [
    ({"MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4"}, (1, 4)),                 # MPICH
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, (2, 3)),
    ({"SLURM_LOCALID": "1", "SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "3"}, (1, 1)),
    ({"SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "4", "SLURM_NODEID": "0"}, (0, 4)),
    ({"SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "garbage"}, None),
    ({"MPI_LOCALRANKID": "0"}, None),                                          # size missing
    ({"PMI_RANK": "1", "PMI_SIZE": "2", "DPNB_ONE_HOST": "1"}, (1, 2)),       # gforker, here
    ({"PMI_RANK": "1", "PMI_SIZE": "2"}, None),                     # ranks maybe on other hosts
    ({}, None),
])
def test_local_rank_from_env(environ, expected):
    assert engine.local_rank_from_env(environ) == expected


def test_slurm_tasks_per_node():
    assert [engine._slurm_tasks_on_node("2(x2),3", i) for i in range(4)] == [2, 2, 3, None]


def test_thread_settings_split_cores_and_respect_user(monkeypatch):
    monkeypatch.setattr(engine, "host_cores", lambda: 16)
    settings = engine.thread_settings(4, environ={"MKL_NUM_THREADS": "7"})
    assert settings["OMP_NUM_THREADS"] == "4" and settings["OPENBLAS_NUM_THREADS"] == "4"
    assert "MKL_NUM_THREADS" not in settings
    assert engine.thread_settings(64, environ={})["OMP_NUM_THREADS"] == "1"
    assert engine.thread_settings(2, environ=dict.fromkeys(engine.THREAD_VARIABLES, "3")) == {}


def test_local_rank_by_shared_memory_split():
    """Without launcher variables, ranks find their local rank with Split_type."""
    script = textwrap.dedent("""
        import os
        for name in ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"):
            os.environ.pop(name, None)
        from mpi4py import MPI
        from dpnb.cluster.engine import start as engine
        assert engine.local_rank_from_env() is None
        local_rank, local_size = engine.local_rank_from_mpi(MPI.COMM_WORLD)
        os.write(1, f"{MPI.COMM_WORLD.Get_rank()} {local_rank} {local_size}\\n".encode())
    """)
    out = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, "-c", script],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == ["0 0 2", "1 1 2"]


def test_limit_threads_reexecutes_once(monkeypatch):
    """BLAS reads the thread variables when it loads, so the entry point starts itself again."""
    calls = []
    monkeypatch.setattr(engine.os, "execv", lambda exe, argv: calls.append([exe, *argv[1:]]))
    for name in (*engine.THREAD_VARIABLES, engine._REEXEC_MARK):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(engine, "host_cores", lambda: 8)
    monkeypatch.setattr(sys, "argv", ["dpnb/cluster/engine/start.py", "--mpi"])
    engine._limit_threads(4)
    assert os.environ["OMP_NUM_THREADS"] == "2" and os.environ["OPENBLAS_NUM_THREADS"] == "2"
    assert calls == [[sys.executable, "-m", "dpnb.cluster.engine", "--mpi"]]
    engine._limit_threads(4)                                   # everything set: no second exec
    assert len(calls) == 1


def test_user_thread_settings_are_kept(monkeypatch):
    calls = []
    monkeypatch.setattr(engine.os, "execv", lambda exe, argv: calls.append(argv))
    for name in engine.THREAD_VARIABLES:
        monkeypatch.setenv(name, "3")
    engine._limit_threads(2)
    assert calls == [] and os.environ["OMP_NUM_THREADS"] == "3"


def test_engines_take_the_gpu_of_their_local_rank(gpu):
    """Local rank r uses GPU r modulo the GPU count (the real CuPy's, or the stand-in's)."""
    count = gpu.cuda.runtime.getDeviceCount()
    for local_rank in range(count + 2):
        assert engine.use_local_gpu(local_rank) == f"gpu:{local_rank % count}"
        assert gpu.cuda.runtime.getDevice() == local_rank % count
    gpu.cuda.Device(0).use()


def test_a_gpu_machine_starts_one_engine_per_gpu_and_reports_them(gpu):
    import importlib.util

    from dpnb.cluster.checks import check_gpu
    from dpnb.cluster.launcher import default_n

    count = gpu.cuda.runtime.getDeviceCount()
    assert default_n() == count
    cupy_check, gpus, nccl = check_gpu()
    assert (cupy_check.found, cupy_check.detail) == (True, gpu.__version__)
    assert (gpus.found, gpus.detail) == (True, f"{count} visible")
    if importlib.util.find_spec("cupy.cuda.nccl") is None:   # the stand-in has no NCCL
        assert not nccl.found and "MPI staging is used instead" in nccl.detail
    else:
        assert nccl.found, nccl.detail
