"""Clusters that broke: engines dead, a second start on the same profile, the files of a
crashed cluster, a killed controller.  Each test starts its own real cluster (controller,
its forked schedulers, mpiexec, engines, nannies), breaks it with
SIGKILL, and checks what ``dpnb cluster status|start|stop`` and ``Cluster`` say and do,
and that every process found from ipyparallel's cluster file at start is gone at the end."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from dpnb.cluster import Cluster, processes
from dpnb.errors import ClusterGone, DpnbError

TIMEOUT = 60


@pytest.fixture
def security(ipython_dir):
    """The profile's security directory, checked to hold no cluster's files after the test."""
    path = ipython_dir / "profile_mpi" / "security"
    yield path
    leftovers = [f.name for f in path.glob("*.json")] if path.exists() else []
    assert leftovers == []


def dpnb(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``dpnb ARGS`` in a fresh process (the module's IPYTHONDIR is in the environment)."""
    out = subprocess.run([sys.executable, "-m", "dpnb.cli", *args], capture_output=True,
                         text=True, timeout=timeout)
    assert "Traceback" not in out.stderr, out.stderr
    return out


def cluster_processes(security, cluster_id: str = "") -> list[psutil.Process]:
    """Controller and mpiexec from ipyparallel's cluster file, with all their descendants
    (schedulers, engines, nannies), as psutil handles taken now."""
    info = json.loads((security / f"cluster-{cluster_id}.json").read_text())
    roots = [info["controller"]["state"]["pid"]]
    roots += [s["pid"] for s in info["engines"]["sets"].values()]
    found = []
    for pid in roots:
        root = psutil.Process(pid)
        found += [root, *root.children(recursive=True)]
    for p in found:
        cmdline = p.cmdline()
        program = os.path.basename(cmdline[0]).split(".")[0]    # mpiexec.gforker: mpiexec
        python = program.startswith("python") and "-m" in cmdline
        PROGRAMS[p] = cmdline[cmdline.index("-m") + 1] if python else program
    return found


PROGRAMS: dict[psutil.Process, str] = {}


def programs(found: list[psutil.Process]) -> list[str]:
    """What each process ran when found: the program, or the module Python ran with ``-m``."""
    return [PROGRAMS[p] for p in found]


def check_complete(found: list[psutil.Process], engines: int = 2) -> None:
    """A whole cluster: controller and its schedulers, mpiexec (gforker on one host, so no
    hydra proxy), engines, nannies."""
    names = programs(found)
    assert names.count("ipyparallel.controller") >= 2              # controller + schedulers
    assert names.count("mpiexec") == 1
    assert names.count("dpnb.cluster.engine") == engines
    assert names.count("ipyparallel.engine.nanny") == engines


def alive(found: list[psutil.Process]) -> list[psutil.Process]:
    """Those still running (the same process: pid and start time; zombies count as gone)."""
    running = []
    for p in found:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                running.append(p)
        except psutil.NoSuchProcess:
            pass
    return running


def wait_gone(found: list[psutil.Process], timeout: float = 20) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while alive(found) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(found)


def kill(found: list[psutil.Process]) -> None:
    for p in found:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def engine_pids(found: list[psutil.Process]) -> list[int]:
    return [p.pid for p, name in zip(found, programs(found)) if name == "dpnb.cluster.engine"]


@pytest.fixture
def started(security):
    """``dpnb cluster start -n 2``; its processes; everything killed at the end in any case."""
    found: list[psutil.Process] = []

    def start():
        out = dpnb("cluster", "start", "-n", "2", "--timeout", str(TIMEOUT))
        assert out.returncode == 0, out.stderr
        found.extend(cluster_processes(security))
        check_complete(found)
        return found

    yield start
    if alive(found):
        kill(found)
        pytest.fail(f"processes {[p.pid for p in alive(found)]} were left")


def test_status_and_stop_after_the_engines_died(started, security):
    found = started()
    os.kill(engine_pids(found)[1], signal.SIGKILL)        # under MPI the other rank ends too
    mpiexec = next(p for p, name in zip(found, programs(found)) if name == "mpiexec")
    mpiexec.wait(timeout=30)
    status = dpnb("cluster", "status")
    assert status.returncode == 4, status.stderr
    controller = found[0].pid
    assert (f"the controller of the cluster in profile 'mpi' runs (pid {controller}), but no "
            "engines are registered" in status.stdout)
    assert "`dpnb cluster stop --profile mpi` stops it" in status.stdout
    stopped = dpnb("cluster", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"controller {controller}" in stopped.stdout and "schedulers" in stopped.stdout
    assert wait_gone(found) == []
    status = dpnb("cluster", "status")
    assert status.returncode == 3 and "no cluster is running in profile 'mpi'" in status.stdout
    stopped = dpnb("cluster", "stop")
    assert stopped.returncode == 1 and "nothing to stop" in stopped.stderr


def test_a_second_start_is_refused_and_the_first_cluster_keeps_running(started, security):
    found = started()
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    second = dpnb("cluster", "start", "-n", "2", "--timeout", str(TIMEOUT))
    assert second.returncode == 1
    message = second.stderr
    assert "a cluster is already running in profile 'mpi'" in message
    assert f"controller {found[0].pid};" in message
    assert "engines " + " ".join(map(str, sorted(engine_pids(found)))) in message
    assert "`dpnb cluster stop --profile mpi`" in message
    assert "`dpnb.Cluster.attach('mpi')`" in message
    with pytest.raises(DpnbError, match=r"already running in profile 'mpi'.*attach\('mpi'\)"):
        Cluster(2, profile="mpi", cluster_id="", timeout=TIMEOUT).start()
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
    assert alive(found) == found                             # nothing of the first was touched
    assert cluster_processes(security) == found              # and nothing was started beside it
    status = dpnb("cluster", "status")
    assert status.returncode == 0 and "2 engines run in profile 'mpi'" in status.stdout
    assert dpnb("cluster", "stop").returncode == 0
    assert wait_gone(found) == []


def test_a_start_after_a_crash_removes_the_dead_clusters_files(started, security):
    found = started()
    kill(found)                                              # kill -9 of everything
    assert wait_gone(found) == []
    stale = sorted(f.name for f in security.glob("*.json"))
    assert stale == ["cluster-.json", "dpnb-cluster-.json", "ipcontroller-client.json",
                     "ipcontroller-engine.json"]
    # The recorded controller's pid now belongs to another process (started later): it
    # is not the controller, and is neither reported nor killed.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        for name in ("cluster-.json", "dpnb-cluster-.json"):
            text = (security / name).read_text().replace(f'"pid": {found[0].pid},',
                                                         f'"pid": {other.pid},')
            (security / name).write_text(text)
        status = dpnb("cluster", "status")
        assert status.returncode == 3 and "no cluster is running in profile 'mpi'" in status.stdout
        assert "files of one that ended without stopping are left" in status.stdout
        found.clear()
        restarted = dpnb("cluster", "start", "-n", "2", "--timeout", str(TIMEOUT))
        assert restarted.returncode == 0, restarted.stderr
        assert ("dpnb: removed the files of a cluster in profile 'mpi' that no longer runs"
                in restarted.stderr)
        found.extend(cluster_processes(security))
        check_complete(found)
        assert other.poll() is None
        assert dpnb("cluster", "status").returncode == 0
        assert dpnb("cluster", "stop").returncode == 0
        assert wait_gone(found) == [] and other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_stop_after_the_controller_was_killed_ends_schedulers_and_engines(started, security):
    found = started()
    os.kill(found[0].pid, signal.SIGKILL)
    assert wait_gone(found[:1]) == []
    status = dpnb("cluster", "status")
    assert status.returncode == 4
    assert "the controller of the cluster in profile 'mpi' is not running" in status.stdout
    assert "schedulers" in status.stdout and "engines" in status.stdout
    refused = dpnb("cluster", "start", "-n", "2", "--timeout", str(TIMEOUT))
    assert refused.returncode == 1 and "without its controller" in refused.stderr
    stopped = dpnb("cluster", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert wait_gone(found) == []


def test_a_hung_controller_is_reported_and_stopped(started, security):
    found = started()
    found[0].suspend()                                       # SIGSTOP: alive, never answers
    status = dpnb("cluster", "status", "--timeout", "5")
    assert status.returncode == 1                       # an error: the controller hangs
    assert (f"the controller (pid {found[0].pid}) of the cluster in profile 'mpi' did not "
            "answer" in status.stderr)
    stopped = dpnb("cluster", "stop", "--timeout", "5")
    assert stopped.returncode == 0, stopped.stderr
    assert "through its controller failed" in stopped.stderr
    assert wait_gone(found) == []


def test_cluster_stop_in_python_after_the_controller_was_killed(security):
    cluster = Cluster(2, profile="mpi", cluster_id="python", timeout=TIMEOUT, progress=False)
    cluster.start()
    try:
        found = cluster_processes(security, "python")
        check_complete(found)
        assert {p.pid for p in found} <= set(cluster.pids)   # schedulers recorded too
        with pytest.raises(DpnbError, match=r"cluster id 'python'.*--cluster-id python"):
            Cluster(2, profile="mpi", cluster_id="python").start()
        os.kill(cluster.ipp.controller.pid, signal.SIGKILL)
        assert wait_gone(found[:1]) == []
        engines = " ".join(map(str, sorted(engine_pids(found))))
        with pytest.raises(ClusterGone, match=rf"the controller \(pid {found[0].pid}\) of the "
                                              r"cluster in .* is gone, but the rest of the "
                                              rf"cluster still runs \(mpiexec \d+; engines "
                                              rf"{engines};.* schedulers .*cluster.stop\(\)"):
            cluster.view.execute("1")                        # says what runs, not "all gone"
        cluster.stop()
        assert wait_gone(found) == []
        assert not cluster.running
    finally:
        cluster.stop()


def test_a_start_under_way_elsewhere_is_refused(security):
    """A record claimed by a live process that has no cluster processes yet is a start
    under way: refused, and left alone; once its starter is gone it is a crashed start."""
    from dpnb.cluster.processes import Record

    starter = subprocess.Popen([sys.executable, "-c",
                                "import sys; from dpnb.cluster.processes import Record; "
                                f"Record.claim({str(security.parent)!r}, 'busy', 2); "
                                "print('claimed', flush=True); sys.stdin.read()"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert starter.stdout.readline() == "claimed\n"
        record = Record.load(security / "dpnb-cluster-busy.json")
        assert record.starter.pid == starter.pid and record.processes == []
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        with pytest.raises(DpnbError, match=rf"being started in profile 'mpi' \(cluster id "
                                            rf"'busy'\) by process {starter.pid}"):
            Cluster(2, profile="mpi", cluster_id="busy", timeout=TIMEOUT).start()
        assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
        assert Record.load(security / "dpnb-cluster-busy.json").token == record.token
    finally:
        starter.communicate("", timeout=30)
    status = dpnb("cluster", "status", "--cluster-id", "busy")
    assert status.returncode == 3 and "files of one that ended without stopping" in status.stdout
    stopped = dpnb("cluster", "stop", "--cluster-id", "busy")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == "stopped the cluster in profile 'mpi' (cluster id 'busy')"


def test_two_starts_at_the_same_moment_one_wins(security):
    """Two `dpnb cluster start`s on one profile at once: the profile's lock makes one
    check, clean up and claim before the other looks, so one starts and the other is
    refused, never both failing or one cluster's engines registering with the other."""
    for attempt in range(3):
        command = [sys.executable, "-m", "dpnb.cli", "cluster", "start", "-n", "2",
                   "--timeout", str(TIMEOUT)]
        starts = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True) for _ in range(2)]
        outs = [p.communicate(timeout=3 * TIMEOUT) for p in starts]
        found = []
        try:
            assert sorted(p.returncode for p in starts) == [0, 1], (attempt, outs)
            loser = outs[[p.returncode for p in starts].index(1)][1]
            assert re.search(r"a cluster is (already running|being started) in profile 'mpi'",
                             loser), loser
            assert "Traceback" not in loser
            assert not any("removed the files" in err for _, err in outs)   # none was stale
            found = cluster_processes(security)
            check_complete(found)
            ours = {p.pid for p in processes.find(security.parent, "").processes}
            assert ours == {p.pid for p in found}                # nothing of the loser's runs
            status = dpnb("cluster", "status")
            assert status.returncode == 0 and "2 engines run" in status.stdout, status.stdout
        finally:
            stopped = dpnb("cluster", "stop")
            assert wait_gone(found) == []
        assert stopped.returncode == 0, stopped.stderr


def test_a_stop_from_outside_ends_the_drivers_watchdog(security):
    """The watchdog of a cluster this process owns exits once `dpnb cluster stop` has
    stopped the cluster: it never outlives it, nor stops a later one."""
    cluster = Cluster(2, profile="mpi", cluster_id="outside", timeout=TIMEOUT, progress=False)
    cluster.start()
    try:
        found = cluster_processes(security, "outside")
        watchdog = cluster._owned.watchdog
        assert watchdog.poll() is None
        stopped = dpnb("cluster", "stop", "--cluster-id", "outside")
        assert stopped.returncode == 0, stopped.stderr
        assert wait_gone(found) == []
        assert watchdog.wait(timeout=5) == 0
    finally:
        cluster.stop()
