"""Real clusters of 2 MPI engines on CPU: start, topology, %%px, the tutorial's
all_reduce on the engines, inspection, restart, an engine dying mid-cell,
failures, security defaults, stop and interpreter exit leaving no process."""
from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import psutil
import pytest

import dpnb
from dpnb.cluster import Cluster
from dpnb.cluster import processes
from dpnb.cluster.owned import process_tree
from dpnb.cluster.mpi_engines import MPIEngines
from dpnb.errors import DpnbError
from dpnb.notebook import ProgressMonitor, check_sync, compare, gather, gather_grads
from seed_tutorial import NNABLA_CELLS, all_reduce_is_the_mean


TIMEOUT = 60


def run(view, code: str, timeout: float = TIMEOUT):
    """Execute ``code`` on every engine, failing instead of hanging."""
    return view.execute(textwrap.dedent(code), block=False).get(timeout=timeout)


def alive(pids) -> list[int]:
    """The pids among ``pids`` that still run (zombies count as gone)."""
    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


def wait_gone(pids, timeout: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(pids)


@pytest.fixture(scope="module")
def cluster(ipython_dir):
    """One 2-engine cluster shared by the tests of this module."""
    c = Cluster(2, timeout=TIMEOUT, progress=False)
    c.start()
    pids = list(c.pids)
    yield c
    c.stop()
    assert wait_gone(pids) == []


def test_start_topology_and_ids(cluster):
    assert cluster.running and sorted(cluster.client.ids) == [0, 1]
    assert cluster.view.targets == [0, 1] and cluster.view.block is True
    table = cluster.topology()
    assert [row[0] for row in table.rows] == [0, 1]            # ranks
    assert [row[1] for row in table.rows] == [0, 1]            # engine ids equal ranks
    assert all(row[5] == "cpu" for row in table.rows)
    engine_pids = [row[3] for row in table.rows]
    assert set(engine_pids) <= set(cluster.pids) and alive(engine_pids) == engine_pids
    assert "engine id" in str(table) and "<table>" in table._repr_html_()


def test_engine_namespace_and_threads(cluster):
    assert cluster.view.pull(["rank", "size", "local_rank"]) == [[0, 2, 0], [1, 2, 1]]
    expected = str(max(1, len(os.sched_getaffinity(0)) // 2))
    assert gather("__import__('os').environ['OMP_NUM_THREADS']") == {0: expected, 1: expected}


def test_px_magic_through_ipython(cluster, capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    cluster.view.activate()
    result = shell.run_cell("%%px\nprint('hello from', rank, 'of', size)")
    assert result.success
    out = capsys.readouterr().out
    assert "hello from 0 of 2" in out and "hello from 1 of 2" in out
    shell.run_line_magic("load_ext", "dpnb")
    assert shell.run_line_magic("dpnb", "status").rows[1][:2] == [1, 1]
    shell.run_line_magic("dpnb", "help")
    assert "%dpnb start" in capsys.readouterr().out


def test_gather(cluster):
    ranks = gather("rank")
    assert ranks == {0: 0, 1: 1}
    run(cluster.view, "import numpy as np; a = np.arange(10.0) * (rank + 1)")
    arrays = gather("a")
    np.testing.assert_array_equal(arrays[1], 2 * np.arange(10.0))
    text = repr(arrays)
    assert "float64(10,)" in text and f"norm={np.linalg.norm(np.arange(10.0)):.6g}" in text
    assert "<table>" in arrays._repr_html_()
    assert gather("{'double': a * 2}")[0]["double"][1] == 2.0


def test_tutorial_all_reduce_on_engines(cluster):
    before, after = all_reduce_is_the_mean(lambda code: run(cluster.view, code), 2)
    assert list(before[0]) == ["conv/W", "conv/b", "affine/W", "affine/b"]
    np.testing.assert_equal(after[0], after[1])
    result = compare(before, after)
    assert not result.agree("before") and result.agree("after")
    assert [r.name for r in result.rows if r.stage == "after"] == list(before[0])
    text = repr(result)
    assert "max |diff|" in text and "NO" in text and "yes" in text
    run(cluster.view, "solver.update()")
    report = check_sync()
    assert report.in_sync and report.checked == 4 and "yes" in repr(report)


def test_seed_tutorial_px_cells_with_nnabla_imports_unchanged(cluster, capsys):
    """The engines stand in for nnabla, so the seed's own %%px cells run as typed."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    cluster.view.activate()
    run(cluster.view, "import dpnb; dpnb.clear_parameters()")
    for cell in NNABLA_CELLS:
        assert shell.run_cell("%%px\n" + cell.strip()).success
    assert shell.run_cell("%%px\nprint(nn.__name__, PF.__name__, 'rank', mpi_rank)").success
    out = capsys.readouterr().out
    for rank in (0, 1):
        assert f"dpnb dpnb.parametric_functions rank {rank}" in out
    before = gather_grads()
    assert list(before[0]) == ["conv/W", "conv/b", "affine/W", "affine/b"]
    assert shell.run_cell("%%px\ncomm.all_reduce([x.grad for x in nn.get_parameters().values()], "
                          "division=True)").success
    after = gather_grads()
    for name in before[0]:
        mean = (before[0][name].astype(np.float64) + before[1][name]) / 2
        np.testing.assert_allclose(after[0][name], mean, rtol=1e-5, atol=1e-6)
    assert not compare(before).agree() and compare(after).agree()


def test_check_sync_pulls_only_differing(cluster):
    run(cluster.view, """
        import dpnb as nn
        nn.clear_parameters()
        with nn.parameter_scope("net"):
            same = nn.get_parameter_or_create("same", (3,), np.ones(3))
            other = nn.get_parameter_or_create("other", (2, 2), np.full((2, 2), 1.0 + rank))
    """)
    report = check_sync()
    assert not report.in_sync and report.checked == 2
    assert list(report.differing) == ["net/other"]
    np.testing.assert_array_equal(report.differing["net/other"][1], np.full((2, 2), 2.0))
    assert "1 of 2 parameters differ" in repr(report)


def progress_of(cluster, code: str) -> list:
    """The runs a ProgressMonitor sees while the engines execute ``code``."""
    monitor = ProgressMonitor(interval=0.05, display=False)
    monitor.start()
    try:
        monitor.watch(cluster.view.execute(textwrap.dedent(code), block=False))
        deadline = time.monotonic() + 10
        while not monitor.runs and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        monitor.stop()
    return monitor.runs


def test_progress_reaches_the_notebook(cluster):
    runs = progress_of(cluster, """
        import time
        from dpnb.notebook import report
        for step in range(1, 9):
            time.sleep(0.05)
            report(step, 8, loss=1.0 / (step + rank))
    """)
    assert len(runs) == 1
    run_ = runs[0]
    assert run_.total == 8 and run_.steps == {0: 8, 1: 8}
    assert run_.losses[1][-1] == (8, pytest.approx(1.0 / 9))


def test_nnabla_monitor_series_on_engines_feed_the_progress(cluster, tmp_path):
    """A MonitorSeries named like a loss reaches the notebook, last step included
    (sent when the cell ends, as it has no total); other series do not mix in."""
    runs = progress_of(cluster, f"""
        import time
        from nnabla.monitor import Monitor, MonitorSeries
        m = Monitor({str(tmp_path)!r} + "/rank" + str(rank))
        loss_series = MonitorSeries("Training loss", m, verbose=False)
        error_series = MonitorSeries("Training error", m, verbose=False)
        for i in range(1, 9):
            time.sleep(0.05)
            loss_series.add(i, 1.0 / (i + rank))
            error_series.add(i, 0.5)
    """)
    assert len(runs) == 1
    run_ = runs[0]
    assert run_.total is None and run_.steps == {0: 8, 1: 8}
    assert run_.losses[1] == [(i, pytest.approx(1.0 / (i + 1))) for i in range(1, 9)]
    assert (tmp_path / "rank1" / "Training-loss.series.txt").read_text().startswith("1 0.5\n")


def test_security_defaults(cluster):
    security = os.path.join(cluster.ipp.profile_dir, "security")
    assert stat.S_IMODE(os.stat(security).st_mode) == 0o700
    files = os.listdir(security)
    assert len([f for f in files if f.startswith("ipcontroller-")]) == 2
    for f in files:
        assert stat.S_IMODE(os.stat(os.path.join(security, f)).st_mode) == 0o600
    listening = set()
    for p in process_tree(cluster.ipp.controller.pid):
        listening |= {c.laddr.ip for c in p.net_connections("tcp") if c.status == "LISTEN"}
    assert listening == {"127.0.0.1"}


def test_nothing_listens_beyond_loopback(cluster):
    """Controller, schedulers, mpiexec, engines and nannies of a one-host cluster: every
    listening TCP socket and every bound UDP socket is on 127.0.0.1 or ::1 (as `ss -ltnp`
    and `ss -lunp` show them); hydra would listen on 0.0.0.0, UCX on the host's address."""
    found = {p.pid: p for pid in cluster.pids for p in process_tree(pid)}
    roles = {processes.role_of(p) for p in found.values()}
    assert {"controller", "scheduler", "mpiexec", "engine", "nanny"} <= roles
    sockets = []
    for p in found.values():
        sockets += [(p.pid, "tcp", c.laddr) for c in p.net_connections("tcp")
                    if c.status == psutil.CONN_LISTEN]
        sockets += [(p.pid, "udp", c.laddr) for c in p.net_connections("udp") if not c.raddr]
    assert sockets                                             # the controller's, at least
    beyond = [s for s in sockets if s[2].ip not in ("127.0.0.1", "::1")]
    assert beyond == []


def test_listening_elsewhere_is_explicit(ipython_dir):
    ipp_cluster = Cluster(2, ip="*", curve=True)._make_ipp_cluster()
    assert ipp_cluster.controller_ip == "*"
    assert "--IPController.enable_curve=True" in ipp_cluster.controller_args
    assert Cluster(2)._make_ipp_cluster().controller_ip == ""   # ipyparallel's 127.0.0.1
    for ip in ("127.0.0.1", "::1", "localhost"):
        Cluster(2, ip=ip)                                       # this host only: no question
    for ip in ("*", "0.0.0.0", "10.0.0.1", "head-node"):
        with pytest.raises(DpnbError, match=rf"ip='{re.escape(ip)}' opens the controller to "
                                            r"other hosts without encryption.*curve=True.*"
                                            r"insecure=True \(`--insecure`\)"):
            Cluster(2, ip=ip)                                       # before anything starts
    plain = Cluster(2, ip="*", insecure=True)._make_ipp_cluster()
    assert plain.controller_ip == "*" and not plain.controller_args


def test_slurm_launcher_and_mpiexec_options_pass_through(ipython_dir):
    from dpnb.cluster.slurm import SlurmEngines

    slurm = Cluster(2, engines="slurm", env={"A": "1"})._make_ipp_cluster()
    assert slurm.engine_launcher_class is SlurmEngines
    assert slurm.config.EngineLauncher.engine_cmd == [sys.executable, "-m", "dpnb.cluster.engine"]
    assert slurm.config.EngineLauncher.environment == {"A": "1"}
    hosts = Cluster(2, mpi_args=["-f", "hosts"])._make_ipp_cluster()
    assert hosts.engine_launcher_class is MPIEngines
    assert hosts.config.MPIEngineSetLauncher.mpi_args == ["-f", "hosts"]
    launcher = MPIEngines(config=hosts.config)
    assert launcher.find_args()[0].endswith("/mpiexec")            # hydra, across hosts
    assert "DPNB_ONE_HOST" not in launcher.get_env()


def test_one_host_runs_mpich_gforker_with_mpi_on_loopback(ipython_dir):
    """No hostfile: MPICH's gforker instead of hydra (which listens on every interface),
    the netmods kept to the loopback interface unless the user set them."""
    local = Cluster(2, mpi_args=["-genv", "X", "1"])._make_ipp_cluster()
    assert local.engine_launcher_class is MPIEngines
    launcher = MPIEngines(config=local.config, environment={"FI_TCP_IFACE": "eth9"})
    launcher.n = 2
    assert launcher.find_args()[0].endswith("/mpiexec.gforker")
    assert launcher.find_args()[1:5] == ["-n", "2", "-genv", "X"]
    env = launcher.get_env()
    assert env["UCX_NET_DEVICES"] == "lo" and env["DPNB_ONE_HOST"] == "1"
    assert env["FI_TCP_IFACE"] == "eth9"                           # the user's setting wins
    elsewhere = MPIEngines(config=local.config, environment={"HYDRA_HOST_FILE": "hosts"})
    assert elsewhere.find_args()[0].endswith("/mpiexec")


def test_restart_gives_fresh_engines(cluster):
    run(cluster.view, "leftover = 1")
    old = list(cluster.pids)
    cluster.restart()
    assert sorted(cluster.client.ids) == [0, 1] and cluster.view.targets == [0, 1]
    assert cluster.view.pull("rank") == [0, 1]
    assert gather("'leftover' in globals()") == {0: False, 1: False}
    engine_pids = [row[3] for row in cluster.topology().rows]
    assert not set(engine_pids) & set(old)


def test_engine_dying_mid_cell_raises_and_restart_recovers(cluster, capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()                        # %%px, as a notebook runs it
    assert shell.magics_manager.registry["ParallelMagics"].view is cluster.view
    victim = cluster.topology().rows[1][3]
    threading.Timer(1.0, os.kill, (victim, signal.SIGKILL)).start()
    start = time.monotonic()
    result = shell.run_cell("%%px\nimport time\ntime.sleep(60)")
    assert time.monotonic() - start < 15
    assert not result.success
    error = result.error_in_exec           # one-host MPI (gforker) interrupts the survivors
    error = getattr(error, "original_error", error)     # first, whose errors are streamed
    assert re.search(r"Engine [01] died", str(error.elist))
    told = capsys.readouterr().err
    assert re.search(r"Engine [01] died while running task", told)
    assert "cluster.restart(resume=True)" in told
    cluster.restart()
    assert gather("40 + 2") == {0: 42, 1: 42}


def test_stop_leaves_no_process(cluster):
    pids = list(cluster.pids)
    assert len(alive(pids)) >= 5                               # controller, mpiexec, 2 engines...
    watchdog = cluster._owned.watchdog.pid                     # ends it should this process die
    cluster.stop()
    cluster.stop()                                             # idempotent
    assert not cluster.running
    assert wait_gone(pids + [watchdog]) == []
    with pytest.raises(DpnbError, match="not running"):
        cluster.topology()


def test_missing_mpiexec_fails_before_starting(ipython_dir, monkeypatch):
    import dpnb.communicators.mpiexec as mpiexec

    def missing():
        raise DpnbError("mpiexec was found neither beside python nor on PATH")

    monkeypatch.setattr(mpiexec, "find_mpiexec", missing)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    cluster = Cluster(2, timeout=10)
    with pytest.raises(DpnbError, match=r"mpiexec.*fix: pip install 'dpnb\[mpich\]'"):
        cluster.start()
    assert cluster.ipp is None
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_engines_failing_to_start_report_their_log(ipython_dir):
    cluster = Cluster(2, timeout=20, mpi_args=["-no-such-mpiexec-option"],
                      cluster_id="dpnb-failing")
    start = time.monotonic()
    with pytest.raises(DpnbError, match=r"(?s)engines did not start.*engine log.*no-such"):
        cluster.start()
    assert time.monotonic() - start < 15                      # mpiexec's exit is noticed
    assert not cluster.running and cluster.ipp is None
    leftovers = []
    for p in psutil.process_iter(["cmdline"]):
        if any("dpnb-failing" in part for part in (p.info["cmdline"] or [])):
            leftovers.append(p.pid)
    assert wait_gone(leftovers) == []


def test_interpreter_exit_stops_the_cluster(ipython_dir):
    script = textwrap.dedent("""
        import dpnb
        cluster = dpnb.start(2, timeout=60)
        print(" ".join(map(str, cluster.pids)), flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) >= 5
    assert out.stderr == ""                                    # quiet start and stop
    assert wait_gone(pids) == []


def test_a_killed_driver_takes_its_cluster_along(ipython_dir):
    """A driver killed outright (SIGKILL, as the OOM killer ends a kernel) runs no atexit;
    its watchdog stops the cluster, and every process of it ends within 30 s."""
    script = textwrap.dedent("""
        import time
        import dpnb
        cluster = dpnb.start(2, timeout=60, cluster_id="killed-driver")
        print(" ".join(map(str, cluster.pids)), flush=True)
        time.sleep(600)
    """)
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in driver.stdout.readline().split()]
        watchdogs = [p.pid for p in psutil.Process(driver.pid).children()
                     if "dpnb.cluster.watchdog" in p.cmdline()]
    finally:
        driver.kill()
        driver.wait()
    killed = time.monotonic()
    assert len(pids) >= 5 and len(watchdogs) == 1
    assert wait_gone(pids + watchdogs, timeout=30) == []
    print(f"all {len(pids)} processes gone {time.monotonic() - killed:.1f} s after SIGKILL")
    security = ipython_dir / "profile_default" / "security"
    assert not list(security.glob("*killed-driver*"))           # its files removed too


def test_an_mpi_job_that_exits_at_start_is_started_once_more(ipython_dir, tmp_path,
                                                             monkeypatch, caplog):
    """MPICH's UCX now and then fails MPI_Init (pmodels/mpich#7417): a job whose ranks
    exit before any engine registers is started again, once, noted in the log at INFO
    (below what a notebook cell shows)."""
    from dpnb.cluster import launcher

    marker = tmp_path / "failed-once"
    wrapper = tmp_path / "engine_failing_once.py"
    wrapper.write_text(textwrap.dedent(f"""
        import os, runpy, sys
        try:
            os.close(os.open({str(marker)!r}, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            runpy.run_module("dpnb.cluster.engine", run_name="__main__")
        else:                       # as MPI_Init failing in one rank does: an abort
            from mpi4py import MPI
            print("this rank fails its first start", flush=True)
            MPI.COMM_WORLD.Abort(3)
    """))
    monkeypatch.setattr(launcher, "ENGINE_CMD", [sys.executable, str(wrapper)])
    cluster = Cluster(2, cluster_id="started-twice", timeout=60, progress=False)
    with caplog.at_level("INFO", "dpnb.cluster.launcher"):
        cluster.start()
    try:
        assert marker.exists()
        assert cluster.view.pull("rank") == [0, 1]
        told = [r.getMessage() for r in caplog.records if r.name == "dpnb.cluster.launcher"
                and r.levelname == "INFO"]
        assert len(told) == 1 and told[0].startswith(
            "the engines' MPI job exited before any engine registered; starting it once more")
        assert "this rank fails its first start" in told[0]
    finally:
        cluster.stop()


def test_profile_with_ipcluster(tmp_path):
    from dpnb.cluster.profile import install

    ipython_dir = tmp_path / "ipython"
    install(ipython_dir)
    env = dict(os.environ, IPYTHONDIR=str(ipython_dir))
    ipcluster = os.path.join(os.path.dirname(sys.executable), "ipcluster")
    server = subprocess.Popen([ipcluster, "start", "--profile=mpi", "-n", "2"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client_code = textwrap.dedent("""
        import ipyparallel as ipp
        rc = ipp.Client(profile="mpi", timeout=60)  # waits for ipcluster's connection file
        rc.wait_for_engines(2, timeout=60)
        print(sorted(rc.ids), rc[:].apply_sync(lambda: (rank, size)))
        rc.close()
    """)
    try:
        out = subprocess.run([sys.executable, "-c", client_code], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().splitlines()[-1] == "[0, 1] [(0, 2), (1, 2)]"
        pids = [p.pid for p in process_tree(server.pid)]
        subprocess.run([ipcluster, "stop", "--profile=mpi"], env=env, timeout=60,
                       capture_output=True)
        server.wait(timeout=60)
        assert wait_gone(pids) == []
    finally:
        if server.poll() is None:
            for p in reversed(process_tree(server.pid)):
                p.kill()
            server.wait(timeout=30)


def test_top_level_names_are_lazy():
    code = ("import sys, dpnb; assert 'ipyparallel' not in sys.modules; "
            "assert dpnb.start and dpnb.Cluster and dpnb.gather and dpnb.check_sync; "
            "print(dpnb.Cluster.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "dpnb.cluster.launcher"
    assert dpnb.load_ipython_extension.__module__ == "dpnb.notebook.magics"


def test_dpnb_launchers_load_back_from_cluster_files():
    """ipyparallel names launcher classes in cluster files; dpnb's must load back from
    there (``dpnb cluster stop``, ``attach`` and the Clusters panel read those files)."""
    import ipyparallel as ipp
    from ipyparallel.cluster.launcher import abbreviate_launcher_class

    from dpnb.cluster.controller_launcher import PrivateFileControllerLauncher
    from dpnb.cluster.slurm import SlurmEngines

    named = ipp.Cluster(controller=abbreviate_launcher_class(PrivateFileControllerLauncher),
                        engines=abbreviate_launcher_class(SlurmEngines))
    assert named.controller_launcher_class is PrivateFileControllerLauncher
    assert named.engine_launcher_class is SlurmEngines
    assert ipp.Cluster(engines=abbreviate_launcher_class(MPIEngines)
                       ).engine_launcher_class is MPIEngines
