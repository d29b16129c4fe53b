"""Attaching to a cluster started by another process while its engines still register,
the helpers and ``%%px`` on it, one cluster per process for ``dpnb.start``, and the
``%%px`` that ``%load_ext dpnb`` gives before any cluster exists."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

import dpnb
from dpnb.cluster import Cluster, processes, registry
from dpnb.cluster.elsewhere import stop_cluster
from dpnb.errors import DpnbError
from dpnb.notebook import check_sync, gather

TIMEOUT = 60


@pytest.fixture(scope="module")
def shell(ipython_dir):
    """An IPython shell with ``%load_ext dpnb``, as a notebook has it."""
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "dpnb")
    yield ip
    registry.stop_current()


def start_elsewhere(profile_dir, tmp_path):
    """``dpnb cluster start -n 2`` in a process of its own, as a terminal runs it."""
    with open(tmp_path / "cluster-start.log", "w") as log:
        return subprocess.Popen([sys.executable, "-m", "dpnb.cli", "cluster", "start", "-n", "2",
                                 "--profile-dir", str(profile_dir), "--timeout", str(TIMEOUT)],
                                stdout=log, stderr=subprocess.STDOUT)


def wait_for(path, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout} s"
        time.sleep(0.02)


@pytest.fixture
def elsewhere(ipython_dir, tmp_path):
    """A profile directory where another process is starting a cluster; stopped after the test."""
    profile_dir = tmp_path / "profile_elsewhere"
    profile_dir.mkdir()
    starter = start_elsewhere(profile_dir, tmp_path)
    yield profile_dir, starter
    try:
        starter.wait(timeout=TIMEOUT + 30)
    finally:
        left = processes.find(profile_dir, "")
        if left.processes or left.files:
            stop_cluster(profile_dir=str(profile_dir))
        assert not processes.find(profile_dir, "").processes


def test_px_before_any_cluster_says_how_to_get_one(shell):
    assert registry.active() is None
    for cell in ("%%px\nprint(rank)\n", "%px print(rank)\n"):
        result = shell.run_cell(cell)
        error = result.error_in_exec
        assert isinstance(error, DpnbError)
        assert "dpnb.start(n=2)" in str(error) and "%dpnb start" in str(error)
        assert "dpnb.Cluster.attach('mpi')" in str(error)


def test_attach_while_engines_register_then_helpers_px_and_stop(shell, elsewhere):
    profile_dir, _ = elsewhere
    wait_for(processes.record_path(profile_dir, ""))     # the start is recorded: no controller yet
    began = time.monotonic()
    cluster = Cluster.attach(profile_dir=str(profile_dir), timeout=TIMEOUT)
    waited = time.monotonic() - began
    assert cluster.running and sorted(cluster.client.ids) == [0, 1] and cluster.n == 2
    assert waited > 0.5, "the engines were registered before attach began: nothing was waited for"
    assert cluster.view.pull(["rank", "size"]) == [[0, 2], [1, 2]]

    # the attached cluster is the current one: helpers without a view use it
    assert dpnb.current() is cluster and registry.active() is cluster
    assert gather("rank") == {0: 0, 1: 1}
    report = check_sync()
    assert report.in_sync and report.ranks == [0, 1]

    # %%px on it: ipyparallel's magics replaced the placeholder
    result = shell.run_cell("%%px\nvalue = 10 * rank + 1\n")
    assert result.success, result.error_in_exec
    assert cluster.view.pull("value") == [1, 11]

    # one cluster per process: a start is refused while the attached one runs
    with pytest.raises(DpnbError, match=r"(?s)already running in this process.*"
                                        r"dpnb.current\(\).*restart\(\).*stop\(\)"):
        dpnb.start(n=2, timeout=TIMEOUT)
    assert gather("value") == {0: 1, 1: 11}

    shell.user_ns["attached"] = cluster
    assert shell.run_cell("attached.stop()").success
    assert not cluster.running and registry.active() is None
    error = shell.run_cell("%%px\nprint(rank)\n").error_in_exec
    assert isinstance(error, DpnbError) and "dpnb.start(n=2)" in str(error)
    with pytest.raises(DpnbError, match=r"no cluster is running in this process.*attach"):
        check_sync()


def test_attach_with_a_too_short_timeout_says_what_to_do(elsewhere):
    profile_dir, starter = elsewhere
    wait_for(processes.cluster_file(profile_dir, ""))
    for path in processes.connection_files(profile_dir, ""):
        wait_for(path)
    with pytest.raises(DpnbError) as raised:
        Cluster.attach(profile_dir=str(profile_dir), timeout=0.2)
    message = str(raised.value)
    assert "of the 2 engines of the cluster in" in message and "within 0.2 s" in message
    assert "timeout=120)" in message and "dpnb cluster stop --profile-dir" in message
    assert "The end of the engine log:" in message
    assert registry.active() is None
    assert starter.wait(timeout=TIMEOUT + 30) == 0           # the cluster started all the same
    cluster = Cluster.attach(profile_dir=str(profile_dir), timeout=TIMEOUT)
    try:
        assert gather("rank") == {0: 0, 1: 1}
    finally:
        cluster.stop()


def test_attach_to_engines_that_are_gone_then_restart(elsewhere):
    import ipyparallel as ipp

    profile_dir, starter = elsewhere
    assert starter.wait(timeout=TIMEOUT + 30) == 0
    client = ipp.Client(profile_dir=str(profile_dir), timeout=TIMEOUT)
    client.shutdown(targets="all", block=True)
    client.close()
    deadline = time.monotonic() + TIMEOUT
    while {"mpiexec", "engine"} & set(processes.find(profile_dir, "").roles.values()):
        assert time.monotonic() < deadline, "the engines did not exit"
        time.sleep(0.1)
    began = time.monotonic()
    cluster = Cluster.attach(profile_dir=str(profile_dir), timeout=TIMEOUT)
    assert time.monotonic() - began < 10            # no engines to wait for: no waiting
    try:
        assert not cluster.running
        with pytest.raises(DpnbError, match=r"(?s)has no engines.*cluster.restart\(\)"):
            dpnb.current()
        cluster.restart()
        assert dpnb.current() is cluster and gather("rank") == {0: 0, 1: 1}
    finally:
        cluster.stop()


def test_start_twice_refuses_and_the_first_keeps_working(ipython_dir, tmp_path):
    first = dpnb.start(n=2, timeout=TIMEOUT, progress=False, profile_dir=str(tmp_path))
    try:
        with pytest.raises(DpnbError) as raised:
            dpnb.start(n=2, timeout=TIMEOUT)
        message = str(raised.value)
        assert repr(first) in message and f"profile directory {tmp_path}" in message
        assert "dpnb.current()" in message and "cluster.restart()" in message
        assert "cluster.stop()" in message
        assert len(first.client.ids) == 2 and gather("rank") == {0: 0, 1: 1}
    finally:
        first.stop()
    assert registry.active() is None


def test_attach_right_after_a_profile_start_waits_for_its_engines(tmp_path):
    """ipcluster (and the IPython Clusters panel, the same ipyparallel code in the Jupyter
    server) starts the controller, then the engines: an attach in between waits for them,
    though dpnb has no record of that start.  The cluster's file is private from the start."""
    import stat

    from dpnb.cluster.owned import process_tree
    from dpnb.cluster.profile import CONFIG_TEXT

    profile_dir = tmp_path / "profile_panel"
    (profile_dir / "security").mkdir(parents=True, mode=0o700)
    (profile_dir / "ipcluster_config.py").write_text(CONFIG_TEXT)
    ipcluster = [sys.executable, "-m", "ipyparallel.cluster", "start", "-n", "2",
                 f"--profile-dir={profile_dir}", "--Cluster.delay=3"]
    with open(tmp_path / "ipcluster.log", "w") as log:
        server = subprocess.Popen(ipcluster, stdout=log, stderr=subprocess.STDOUT)
    try:
        cluster_file = processes.cluster_file(profile_dir, "")
        wait_for(cluster_file)                 # made empty by dpnb's controller launcher
        assert stat.S_IMODE(cluster_file.stat().st_mode) == 0o600
        deadline = time.monotonic() + TIMEOUT
        while not cluster_file.read_text():   # the controller is up once ipyparallel writes it
            assert time.monotonic() < deadline, "ipyparallel did not write its cluster file"
            time.sleep(0.02)
        assert json.loads(cluster_file.read_text())["engines"]["sets"] == {}   # engines: next
        cluster = Cluster.attach(profile_dir=str(profile_dir), timeout=TIMEOUT)
        try:
            assert cluster.running and cluster.n == 2
            assert cluster.view.pull(["rank", "size"]) == [[0, 2], [1, 2]]
            assert stat.S_IMODE(cluster_file.stat().st_mode) == 0o600
        finally:
            cluster.stop()
        assert server.wait(timeout=TIMEOUT) is not None
    finally:
        for p in reversed(process_tree(server.pid)):
            p.kill()
        server.wait(timeout=30)
    assert not processes.find(profile_dir, "").processes


def test_ipyparallels_own_stop_is_no_crash(tmp_path):
    """After ``ipcluster stop`` ipyparallel leaves its engine id table (log/engines.json):
    that is no cluster that ended without stopping, for ``dpnb cluster status`` or a start."""
    from dpnb.cluster.profile import CONFIG_TEXT

    profile_dir = tmp_path / "profile_ipcluster"
    (profile_dir / "security").mkdir(parents=True, mode=0o700)
    (profile_dir / "ipcluster_config.py").write_text(CONFIG_TEXT)
    where = [f"--profile-dir={profile_dir}"]
    ipcluster = [sys.executable, "-m", "ipyparallel.cluster"]
    for tries_left in reversed(range(2)):   # as dpnb's launcher: MPICH's MPI_Init now and
        subprocess.run([*ipcluster, "start", "-n", "2", "--daemonize", *where], check=True,
                       capture_output=True, timeout=TIMEOUT)   # then fails (mpich#7417)
        try:
            Cluster.attach(profile_dir=str(profile_dir), timeout=TIMEOUT).client.close()
            started = True
        except DpnbError as e:
            started = False
            if not tries_left or "exited" not in str(e):
                raise
        finally:
            subprocess.run([*ipcluster, "stop", *where], check=True, capture_output=True,
                           timeout=TIMEOUT)
            deadline = time.monotonic() + TIMEOUT
            while processes.find(profile_dir, "").processes:
                assert time.monotonic() < deadline, "ipcluster stop left processes"
                time.sleep(0.1)
        if started:
            break
    assert processes.engine_state_file(profile_dir, "").exists()     # what ipyparallel leaves
    dpnb = [sys.executable, "-m", "dpnb", "cluster"]
    status = subprocess.run([*dpnb, "status", "--profile-dir", str(profile_dir)],
                            capture_output=True, text=True, timeout=TIMEOUT)
    assert status.returncode == 3, status.stderr
    assert status.stdout.strip() == (
        f"no cluster is running in profile directory {profile_dir}; start one with "
        f"`dpnb cluster start --profile-dir {profile_dir}`")
    started = subprocess.run([*dpnb, "start", "-n", "2", "--profile-dir", str(profile_dir)],
                             capture_output=True, text=True, timeout=TIMEOUT)
    try:
        assert started.returncode == 0, started.stderr
        assert "removed the files" not in started.stderr, started.stderr
    finally:
        stopped = subprocess.run([*dpnb, "stop", "--profile-dir", str(profile_dir)],
                                 capture_output=True, text=True, timeout=TIMEOUT)
    assert stopped.returncode == 0, stopped.stderr


def test_a_cluster_file_that_stays_unreadable_fails_at_the_deadline(tmp_path):
    """A cluster file the starter is writing is read again until the deadline; one that
    stays unreadable then fails, saying what to do."""
    from dpnb.cluster import files

    path = processes.cluster_file(tmp_path, "")
    path.parent.mkdir()
    path.write_text('{"cluster": {"n": 2')                      # half written
    left = processes.find(tmp_path, "")
    started = time.monotonic()
    with pytest.raises(DpnbError, match=r"the cluster file of the cluster in .* cannot be read "
                                        r"\(.*\); `dpnb cluster stop"):
        files.load_cluster_file(tmp_path, "", left, deadline=started + 0.5)
    assert 0.5 <= time.monotonic() - started < 5                 # it kept trying until then
    with pytest.raises(DpnbError, match="cannot be read"):
        files.load_cluster_file(tmp_path, "", left)               # no deadline: at once
