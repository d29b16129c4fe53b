"""Several machines for real: 2 test hosts (network namespaces on a bridge, each with a
hostname of its own, ``dpnb.testing.TestHosts``) x 2 ranks.  Raw MPI across them, the
CIFAR-10 example under mpiexec with a hostfile, and a dpnb cluster started from this
process (the notebook's host) with the hostfile, the controller on the bridge address
with CurveZMQ: topology, where(), the seed tutorial's all_reduce and check_sync, an engine
killed on a remote host mid-training and the resumed session, stop leaving nothing on any
host, and ``dpnb cluster start`` across the hosts.  What crosses hosts is checked to have
crossed the veth links; the test hosts' own clean-up is tested too."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

import dpnb
from dpnb.cluster import processes
from dpnb.errors import DpnbError
from dpnb.notebook import check_sync, compare, gather
from dpnb.testing import (HostsUnavailable, TestHosts, assert_ranks_ok, hosts_unavailable,
                          remove_stale_hosts)
from seed_tutorial import all_reduce_is_the_mean
from test_resume import DEFINE, PARAMETERS, TRAIN

TIMEOUT = 90
PROMPT = 5.0  # seconds within which a cell must fail once an engine is gone
RANKS_PER_HOST = 2
SCRIPTS = Path(__file__).parent / "mpi_scripts"
# the controller's ports, as a firewall would need them pinned: one range per test process,
# below Linux's ephemeral ports (32768 and up), which other connections take at random
PORTS = range(20000 + os.getpid() % 500 * 24, 20024 + os.getpid() % 500 * 24)
TINY = ["--dataset", "synthetic", "-b", "4", "--nmaps", "4", "-e", "0.1", "-v", "4", "-s", "4",
        "-m", "2", "--no-progress"]


@pytest.fixture(scope="module")
def hosts():
    """Two test hosts for the module; afterwards nothing of them is left."""
    test_hosts = TestHosts(2)
    try:
        test_hosts.open()
    except HostsUnavailable as e:
        pytest.skip(f"no test hosts on this machine: {e}")
    namespaces = [h.namespace for h in test_hosts.hosts]
    links = [test_hosts.bridge] + [h.link for h in test_hosts.hosts]
    work = test_hosts.work
    yield test_hosts
    test_hosts.close()
    assert not set(namespaces) & set(os.listdir("/run/netns"))
    assert not set(links) & set(os.listdir("/sys/class/net"))
    assert not any(Path("/etc/netns", ns).exists() for ns in namespaces)
    assert not work.exists()


def expected_hosts(hosts) -> list[str]:
    """The host of each rank with RANKS_PER_HOST ranks per host, in rank order."""
    return [name for name in hosts.names for _ in range(RANKS_PER_HOST)]


def wait_until(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


def test_hosts_resolve_each_other_and_the_notebook_host(hosts):
    names = [h.name for h in hosts.hosts] + [hosts.notebook_host]
    lookup = ("import socket; print(socket.gethostname(), "
              f"*[socket.gethostbyname(n) for n in {names!r}])")
    for host in hosts.hosts:
        done = subprocess.run(hosts.command(host.name, [sys.executable, "-c", lookup]),
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [host.name, *[h.address for h in hosts.hosts],
                                       hosts.address]


def test_mpi_and_the_communicator_cross_the_links(hosts):
    before = hosts.link_bytes()
    run = hosts.run_script(SCRIPTS / "across_hosts.py", ",".join(expected_hosts(hosts)),
                           ranks_per_host=RANKS_PER_HOST, timeout=TIMEOUT)
    assert_ranks_ok(run)
    after = hosts.link_bytes()
    for name in hosts.names:   # the 16 MB sums went over TCP on the veth, not shared memory
        assert after[name] - before[name] >= 32 << 20, (name, after[name] - before[name])


def test_segments_chosen_by_the_environment_hold_across_hosts(hosts):
    run = hosts.run_script(SCRIPTS / "across_hosts.py", ",".join(expected_hosts(hosts)),
                           ranks_per_host=RANKS_PER_HOST, timeout=TIMEOUT,
                           env={"DPNB_COMM_SEGMENT_BYTES": str(4 << 20)})
    assert_ranks_ok(run)  # 16 MB in 4 MB segments: 4 collectives


def test_a_host_that_is_not_there_is_named(hosts):
    done = subprocess.run([str(hosts.launcher), "-x", "nohost", "true"], capture_output=True,
                          text=True, timeout=10)
    assert done.returncode == 255
    assert "no test host named 'nohost'" in done.stderr and hosts.names[0] in done.stderr


def test_cifar10_example_across_hosts_reads_disjoint_shards(hosts, tmp_path):
    before = hosts.link_bytes()
    run = hosts.run_script(SCRIPTS / "cifar10_shards.py", "-o", str(tmp_path), *TINY,
                           "-i", "4", ranks_per_host=RANKS_PER_HOST, timeout=TIMEOUT)
    assert run.returncode == 0, f"{run.ending}:\n{run.output}"
    after = hosts.link_bytes()
    size = RANKS_PER_HOST * hosts.n
    shards = [json.loads((tmp_path / f"shards-rank{r}.json").read_text()) for r in range(size)]
    assert [s["host"] for s in shards] == expected_hosts(hosts)
    assert all(sorted(s["batches"], key=int) == ["0", "1", "2", "3"] for s in shards)
    # the 4 iterations lie in the first epoch: no sample is read twice, by any rank
    read = [i for s in shards for batch in s["batches"].values() for i in batch]
    assert len(read) == 4 * 4 * size and len(set(read)) == len(read), shards
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in train] == [2, 4]
    assert all(np.isfinite(r["loss"]) for r in train)
    assert (tmp_path / "checkpoint_00000004" / "params.h5").exists()
    params = sum(np.prod(v.shape) for v in _h5_arrays(tmp_path / "checkpoint_00000004"
                                                       / "params.h5"))
    for name in hosts.names:   # 4 all_reduces of the gradients, float32
        assert after[name] - before[name] >= 4 * 4 * params, name


def _h5_arrays(path) -> list:
    import h5py

    found = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda _, item: found.append(item[()])
                     if isinstance(item, h5py.Dataset) else None)
    return found


@pytest.fixture(scope="module")
def cluster(hosts, ipython_dir):
    """A 4-engine cluster across the hosts, started as a notebook on this host starts it."""
    from IPython.core.interactiveshell import InteractiveShell

    InteractiveShell.instance()
    c = dpnb.start(n=4, mpi_args=hosts.mpi_args(RANKS_PER_HOST), env=hosts.env,
                   ip=hosts.address, location=hosts.notebook_host, curve=True,
                   controller_args=[f"--ports={PORTS.start}-{PORTS.stop - 1}"],
                   timeout=TIMEOUT, progress=False,
                   profile_dir=str(ipython_dir / "profile_hosts"))   # not the shell's profile
    yield c
    c.stop()


def run(view, code: str):
    return view.execute(textwrap.dedent(code), block=False).get(timeout=TIMEOUT)


def test_cluster_topology_across_hosts(cluster, hosts):
    table = cluster.topology()
    assert [row[0] for row in table.rows] == [0, 1, 2, 3]
    assert [row[1] for row in table.rows] == [0, 1, 2, 3]
    assert [row[2] for row in table.rows] == expected_hosts(hosts)
    assert [row[4] for row in table.rows] == [0, 1, 0, 1]
    in_hosts = hosts.processes()
    for row in table.rows:                       # each engine runs in its host's namespace
        assert row[3] in [p.pid for p in in_hosts[row[2]]]
    controller = psutil.Process(cluster.ipp.controller.pid)
    listening = {(c.laddr.ip, c.laddr.port) for p in [controller, *controller.children()]
                 for c in p.net_connections("tcp") if c.status == "LISTEN"}
    # the engines' and clients' ports on the bridge address only, the schedulers' own on
    # 127.0.0.1
    assert {ip for ip, _ in listening} == {hosts.address, "127.0.0.1"}
    assert all(port in PORTS for ip, port in listening if ip == hosts.address), listening
    security = Path(cluster.ipp.profile_dir, "security")
    engine_file = json.loads(next(security.glob("ipcontroller-*engine.json")).read_text())
    assert engine_file["interface"] == f"tcp://{hosts.address}"
    assert (hosts.address, engine_file["registration"]) in listening
    assert engine_file["curve_serverkey"] and engine_file["location"] == hosts.notebook_host


def test_where_answers_from_every_host(cluster):
    stacks = dpnb.where(timeout=10)
    assert stacks.missing == []
    assert [stacks[r].pid for r in range(4)] == [row[3] for row in cluster.topology().rows]
    assert all(stacks[r].state == "idle" for r in range(4)), stacks


def test_seed_tutorial_all_reduce_and_check_sync_across_hosts(cluster, hosts):
    _, after = all_reduce_is_the_mean(lambda code: run(cluster.view, code), 4)
    assert compare(after).agree()
    run(cluster.view, "solver.update()")
    report = check_sync()
    assert report.in_sync and report.checked == 4
    # a parameter changed on rank 3 alone (host 1) is found, and its values pulled
    run(cluster.view, "if mpi_rank == 3: nn.get_parameters()['affine/b'].d += 1")
    report = check_sync()
    assert not report.in_sync and list(report.differing) == ["affine/b"]
    values = report.differing["affine/b"]
    np.testing.assert_allclose(values[3], values[0] + 1, rtol=1e-6)


def test_dpnb_all_reduce_crosses_the_links(cluster, hosts):
    before = hosts.link_bytes()
    run(cluster.view, """
        import numpy as np
        from mpi4py import MPI
        import dpnb as nn
        import dpnb.communicators as C
        link_comm = C.MultiProcessCommunicator(nn.Context())
        link_comm.init()
        big = nn.NdArray.from_numpy_array(np.full(2 << 20, MPI.COMM_WORLD.rank + 1, np.float32))
        link_comm.all_reduce(big, division=False)
    """)
    after = hosts.link_bytes()
    for values in gather("big").values():
        np.testing.assert_array_equal(values, np.full(2 << 20, 1 + 2 + 3 + 4, np.float32))
    for name in hosts.names:   # 8 MB summed across the hosts
        assert after[name] - before[name] >= 8 << 20, (name, after[name] - before[name])


def run_cell(shell, source: str):
    result = shell.run_cell(source)
    assert result.success, result.error_in_exec
    return result


def test_engine_killed_on_a_remote_host_mid_training_resumes(cluster, hosts, capsys):
    """SIGKILL of rank 3 (on host 1) while the training cell runs: the cell fails at once
    naming the dead engine, the next cell says restart is the fix, and
    ``restart(resume=True)`` across the hosts replays the journal and restores the last
    commit, so the training cell run again ends with the parameters of an uninterrupted
    run, bit for bit."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "dpnb")
    cluster.restart()
    for cell in [*DEFINE, TRAIN]:
        run_cell(shell, cell)
    uninterrupted = gather(PARAMETERS)

    cluster.restart()
    for cell in DEFINE:
        run_cell(shell, cell)
    rows = cluster.topology().rows
    victim = rows[3][3]
    assert rows[3][2] == hosts.names[1]
    assert victim in [p.pid for p in hosts.processes()[hosts.names[1]]]
    marker = Path(cluster.state_dir, "commit-000003.complete")
    killed: list[float] = []
    killer = threading.Thread(target=_kill_once_there, args=(marker, victim, killed),
                              daemon=True)
    killer.start()
    result = shell.run_cell(TRAIN)
    failed_after = time.monotonic() - killed[0]
    killer.join()
    assert not result.success and failed_after < 15, failed_after
    assert re.search(r"Engine \d died", str(result.error_in_exec.elist))
    assert "cluster.restart(resume=True)" in capsys.readouterr().err
    # under MPI the others end with it: the controller sees the engines go
    assert wait_until(lambda: len(cluster.client.ids) < 4)
    start = time.monotonic()
    result = shell.run_cell("%%px\nprint(rank)")
    elapsed = time.monotonic() - start
    assert isinstance(result.error_in_exec, DpnbError) and elapsed < PROMPT, (
        repr(result.error_in_exec), elapsed)
    assert "gone" in str(result.error_in_exec)

    cluster.restart(resume=True)
    assert "Replaying 3 of 3 journal cells" in capsys.readouterr().out
    table = cluster.topology()
    assert [row[2] for row in table.rows] == expected_hosts(hosts)
    assert [row[4] for row in table.rows] == [0, 1, 0, 1]
    assert not {row[3] for row in table.rows} & {row[3] for row in rows}
    restored = set(gather("state.step").values())
    assert len(restored) == 1 and min(restored) >= 12 and min(restored) % 4 == 0, restored
    run_cell(shell, TRAIN)
    resumed = gather(PARAMETERS)
    for rank in range(4):
        assert list(resumed[rank]) == list(uninterrupted[rank])
        for name, value in uninterrupted[rank].items():
            np.testing.assert_array_equal(resumed[rank][name], value, err_msg=name)


def _kill_once_there(marker: Path, pid: int, killed: list) -> None:
    """SIGKILL ``pid`` once ``marker`` exists; the time of the kill goes into ``killed``."""
    deadline = time.monotonic() + TIMEOUT
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    killed.append(time.monotonic())
    os.kill(pid, signal.SIGKILL)


def test_stop_leaves_nothing_on_any_host(cluster, hosts, ipython_dir):
    pids = list(cluster.pids)
    profile_dir, cluster_id = cluster.ipp.profile_dir, cluster.ipp.cluster_id
    state_dir = cluster.state_dir
    assert all(hosts.processes().values())
    cluster.stop()
    assert wait_until(lambda: not any(hosts.processes().values()), timeout=15), \
        hosts.processes()
    assert not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not [p for p in processes.cluster_files(profile_dir, cluster_id) if p.exists()]
    assert not os.path.exists(state_dir)
    # nothing but IPython's own files (the notebook shell's history)
    left = {str(p.relative_to(profile_dir)) for p in Path(profile_dir).rglob("*") if p.is_file()}
    assert Path(profile_dir) == Path(ipython_dir) / "profile_hosts"
    assert left <= {"startup/README", "history.sqlite"}, left


def test_cluster_command_across_hosts(hosts, ipython_dir, tmp_path):
    """`dpnb cluster start` with the hostfile, listening on every interface (the engines
    connect to ``--location``, the notebook host's name), then status and stop."""
    dpnb_command = [sys.executable, "-m", "dpnb", "cluster"]
    where = ["--profile-dir", str(tmp_path / "profile")]
    env = {**os.environ, **hosts.env}
    mpi_args = " ".join(hosts.mpi_args(RANKS_PER_HOST))
    started = subprocess.run([*dpnb_command, "start", "-n", "4", *where, "--mpi-args", mpi_args,
                              "--ip", "*", "--location", hosts.notebook_host,
                              "--curve", "--timeout", str(TIMEOUT)],
                             capture_output=True, text=True, timeout=2 * TIMEOUT, env=env)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        for name in hosts.names:
            assert started.stdout.count(name) == RANKS_PER_HOST, started.stdout
        status = subprocess.run([*dpnb_command, "status", *where], capture_output=True,
                                text=True, timeout=TIMEOUT, env=env)
        assert status.returncode == 0 and "4 engines run" in status.stdout, status.stdout
        assert all(hosts.processes().values())
    finally:
        stopped = subprocess.run([*dpnb_command, "stop", *where], capture_output=True,
                                 text=True, timeout=TIMEOUT, env=env)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert wait_until(lambda: not any(hosts.processes().values()), timeout=15)


# A child process that makes one test host with a process left in it (in a session of its
# own, as an engine's nanny is), then ends as given.
LEAVES_A_PROCESS = """
import os, subprocess, sys
from dpnb.testing import TestHosts
with TestHosts(1) as h:
    sleeper = subprocess.Popen(h.command(h.names[0], ["sleep", "300"]), start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(h.hosts[0].namespace, h.bridge, h.work, sleeper.pid, flush=True)
    {ending}
"""


def run_child(ending: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    reason = hosts_unavailable()
    if reason is not None:
        pytest.skip(f"no test hosts on this machine: {reason}")
    done = subprocess.run([sys.executable, "-c", LEAVES_A_PROCESS.format(ending=ending)],
                          capture_output=True, text=True, timeout=60)
    return done, done.stdout.split()


def assert_removed(namespace: str, bridge: str, work: str, sleeper: str) -> None:
    assert namespace not in os.listdir("/run/netns")
    assert bridge not in os.listdir("/sys/class/net")
    assert not Path(work).exists() and not Path("/etc/netns", namespace).exists()
    assert not runs_the_sleeper(int(sleeper))


def runs_the_sleeper(pid: int) -> bool:
    """Whether process ``pid`` is still the child's ``sleep 300`` (on its way into the host
    or in it): pids are reused, and quickly where pid_max is 32768 and a full test run
    starts thousands of processes."""
    try:
        process = psutil.Process(pid)
        return (process.status() != psutil.STATUS_ZOMBIE
                and "sleep 300" in " ".join(process.cmdline()))
    except psutil.Error:
        return False


def test_a_failing_body_still_removes_the_hosts_and_their_processes():
    done, made = run_child("raise RuntimeError('the body failed')")
    assert done.returncode == 1 and "RuntimeError: the body failed" in done.stderr, done.stderr
    assert_removed(*made)


def test_a_crashed_run_is_cleaned_up_by_the_next():
    """Test hosts of a process that was killed are removed by the next run's start."""
    done, made = run_child("os._exit(0)")
    assert done.returncode == 0, done.stderr
    namespace, bridge, work, sleeper = made
    assert namespace in os.listdir("/run/netns") and bridge in os.listdir("/sys/class/net")
    assert runs_the_sleeper(int(sleeper))
    removed = remove_stale_hosts()
    assert any(namespace.split("-")[1] in what for what in removed), removed
    assert_removed(*made)


def test_without_root_there_are_no_test_hosts(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "need root" in hosts_unavailable()
    with pytest.raises(HostsUnavailable, match="need root"):
        TestHosts(1).open()
    with pytest.raises(DpnbError, match="1 to 9 hosts, got n=0"):
        TestHosts(0)
