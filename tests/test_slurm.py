"""``dpnb.start(engines="slurm")`` against a real single-machine Slurm (``tests/slurm.py``):
the engines are one Slurm job whose tasks are the ranks of one MPI world, with local
ranks from Slurm's variables; the seed tutorial's all_reduce gives NumPy's mean; stop()
ends the job and every engine process.  Also: the engine launchers dpnb refuses."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import psutil
import pytest

import dpnb
from dpnb.cluster import Cluster
from dpnb.errors import DpnbError
from dpnb.notebook import gather
from seed_tutorial import all_reduce_is_the_mean
from slurm import clean_leftovers, running_slurm, unavailable

TIMEOUT = 90


@pytest.fixture(scope="module")
def slurm(ipython_dir):
    """A private Slurm for this module, which this process's sbatch and squeue reach.
    Skipped where Slurm is not installed or not usable (not root); where it is, a Slurm
    that does not start fails the tests with the daemons' logs."""
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    with running_slurm() as running, pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(running.conf))
        yield running


def run(view, code: str):
    return view.execute(textwrap.dedent(code), block=False).get(timeout=TIMEOUT)


def processes_of_job(job_id: str) -> list[psutil.Process]:
    """The live processes whose environment names Slurm job ``job_id``."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("SLURM_JOB_ID") == job_id and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def test_engines_as_one_slurm_job(slurm):
    cluster = dpnb.start(n=2, engines="slurm", timeout=TIMEOUT, progress=False)
    try:
        jobs = slurm.jobs()
        assert [(j["name"], j["state"]) for j in jobs] == [
            (f"dpnb-engines-{cluster.ipp.cluster_id}", "RUNNING")]
        job_id = jobs[0]["id"]
        scripts = [es.batch_file for es in cluster.ipp.engines.values()]
        assert scripts and not any(map(os.path.exists, scripts))   # sbatch has read it
        table = cluster.topology()
        assert [row[:2] for row in table.rows] == [[0, 0], [1, 1]]   # engine ids are ranks
        assert [row[4] for row in table.rows] == [0, 1]              # local ranks
        engine_pids = [row[3] for row in table.rows]
        launched = gather("{k: __import__('os').environ.get(k) for k in ('SLURM_JOB_ID', "
                          "'SLURM_PROCID', 'SLURM_LOCALID', 'MPI_LOCALRANKID')}")
        for rank, pid in enumerate(engine_pids):
            # a task of the job's srun step; the local rank is Slurm's (no hydra here)
            assert launched[rank] == {"SLURM_JOB_ID": job_id, "SLURM_PROCID": str(rank),
                                      "SLURM_LOCALID": str(rank), "MPI_LOCALRANKID": None}
            parent = " ".join(psutil.Process(pid).parent().cmdline())
            assert parent.startswith(f"slurmstepd: [{job_id}.0]"), parent
        assert {p.pid for p in processes_of_job(job_id)} >= set(engine_pids)

        _, after = all_reduce_is_the_mean(lambda code: run(cluster.view, code), 2)
        np.testing.assert_equal(after[0], after[1])
        engine_set = next(iter(cluster.ipp.engines.values()))
        assert not engine_set.ended() and cluster._gone() is None
    finally:
        cluster.stop()
    assert engine_set.ended() and slurm.jobs() == []
    assert slurm.run("squeue", "--noheader", "--states=all", "--jobs", job_id,
                     "--format=%T").split()[0] in ("CANCELLED", "COMPLETED")
    assert processes_of_job(job_id) == [] and not any(psutil.pid_exists(p) and
                                                      psutil.Process(p).status() !=
                                                      psutil.STATUS_ZOMBIE
                                                      for p in engine_pids)


def test_a_job_slurm_refuses_or_keeps_pending(slurm):
    with pytest.raises(DpnbError, match="sbatch refused the job of 2 engine tasks: .*"
                                        "invalid partition specified: nosuch"):
        dpnb.start(n=2, engines="slurm", env={"SBATCH_PARTITION": "nosuch"}, progress=False)
    with pytest.raises(DpnbError, match=r"16 engines did not start within 3 s .*\n"
                                        r"\(no output yet: Slurm job \d+ is PENDING, reason: "):
        dpnb.start(n=16, engines="slurm", timeout=3, progress=False)   # more CPUs than Slurm has
    assert slurm.jobs() == [] and dpnb.cluster.registry.active() is None


def test_slurm_where_sbatch_is_missing(ipython_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DpnbError, match="submits the engines with sbatch, which is not on PATH"):
        dpnb.start(n=2, engines="slurm", timeout=TIMEOUT, progress=False)
    assert dpnb.cluster.registry.active() is None


def test_a_killed_owner_leaves_nothing(tmp_path):
    """A run that dies with its Slurm running: the next run ends that Slurm's daemons and
    removes its directory."""
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    tests = os.path.dirname(os.path.abspath(__file__))
    owner = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from slurm import running_slurm\n"
         "with running_slurm() as s:\n    print(s.dir, flush=True); time.sleep(600)"],
        cwd=tests, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        directory = owner.stdout.readline().strip()
        assert directory, f"the owner's Slurm did not start:\n{owner.communicate()[1]}"
        daemons = [p for p in psutil.process_iter(["cmdline"])
                   if any(directory in a for a in p.info["cmdline"] or ())]
        assert len(daemons) == 3                        # munged, slurmctld and slurmd
    finally:
        owner.kill()
        owner.wait()
    assert str(directory) in map(str, clean_leftovers())
    assert not os.path.exists(directory)
    _, alive = psutil.wait_procs(daemons, timeout=5)
    assert alive == []


@pytest.mark.parametrize("engines", ["ssh", "SSHEngineSetLauncher", "pbs", "MPI", None])
def test_only_tested_launchers(engines):
    with pytest.raises(DpnbError) as e:
        Cluster(2, engines=engines)
    if engines == "ssh":
        assert "rank 0 of a one-rank MPI world" in str(e.value)
        assert "mpi_args=['-f', 'hostfile']" in str(e.value)
    else:
        assert f"engines={engines!r} is not one of dpnb's engine launchers 'mpi', 'slurm'" in str(
            e.value)


def test_slurm_refuses_mpiexec_arguments():
    with pytest.raises(DpnbError, match="go to mpiexec, which engines=.slurm. does not start"):
        Cluster(2, engines="slurm", mpi_args=["-f", "hostfile"])


def test_slurm_engines_run_one_mpi_world(ipython_dir):
    from dpnb.cluster.slurm import SlurmEngines

    ipp_cluster = Cluster(2, engines="slurm", env={"SBATCH_PARTITION": "gpu"})._make_ipp_cluster()
    assert ipp_cluster.engine_launcher_class is SlurmEngines
    launcher = SlurmEngines(profile_dir=str(ipython_dir), cluster_id="x", config=ipp_cluster.config)
    launcher.write_batch_script(3)
    script = open(launcher.batch_file).read()
    assert os.path.dirname(launcher.batch_file) == os.path.join(str(ipython_dir), "log")
    assert "#SBATCH --ntasks=3\n" in script
    assert f"srun --mpi=pmi2 {sys.executable} -m dpnb.cluster.engine" in script
    assert launcher.get_env()["SBATCH_PARTITION"] == "gpu"   # sbatch runs with it
