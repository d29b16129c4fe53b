"""A private single-machine Slurm for tests: munged, slurmctld and slurmd of Debian's
``slurm-wlm`` and ``munge``, started in a temporary directory and stopped again.

Everything lives in that directory (munge key and socket, slurm.conf, state, spool,
pid and log files); the machine's own Slurm and munge configuration is never read
or changed, and clients reach this Slurm through ``SLURM_CONF``.  ``running_slurm()``
stops every daemon, job and job step and removes the directory, also after a
failed test; it first does the same for what a previous run left (its owner died)."""
from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

PREFIX = "dpnb-slurm-"
COMMANDS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel", "sinfo")
CPUS = 4            # claimed with config_overrides, so 2 tasks fit on any machine
# A fresh Slurm numbers jobs from FirstJobId.  MPICH names its shared memory after the
# job step, and a step killed in MPI_Init leaves it in /dev/shm, where the same step of a
# later Slurm found and misread it (first steps failed in MPI_Init); so each Slurm here
# starts at a random job id.
FIRST_JOB_IDS = (10**5, 6 * 10**7)   # below Slurm's MaxJobId (67043328)
START_TIMEOUT = 30  # seconds for the node to become idle
STOP_TIMEOUT = 15   # seconds for jobs, then each daemon, to end

CONFIG = """\
ClusterName=dpnbtest
FirstJobId={first_job_id}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/run/munge.socket
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/run/slurmctld.pid
SlurmdPidFile={dir}/run/slurmd.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd.log
PlugStackConfig={dir}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
KillWait=5
SlurmdParameters=config_overrides
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class SlurmUnavailable(Exception):
    """Slurm cannot run here; the message says why."""


@dataclass
class Slurm:
    """A running private Slurm: its directory, node name and the client environment."""

    dir: Path
    node: str

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm client (sbatch, squeue) needs to reach this Slurm."""
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *command: str, timeout: float = 30) -> str:
        """A Slurm client command's output (an error with its stderr where it fails)."""
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env})
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr}")
        return done.stdout

    def jobs(self) -> list[dict[str, str]]:
        """squeue's jobs that have not ended: id, name, state and node list."""
        out = self.run("squeue", "--noheader", "--format=%i|%j|%T|%N")
        return [dict(zip(("id", "name", "state", "nodes"), line.split("|")))
                for line in out.splitlines() if line.strip()]

    def log(self, name: str, lines: int = 20) -> str:
        """The last lines of a daemon's log and of its output (``slurmctld``, ``slurmd``,
        ``munged``; a daemon that cannot read its configuration says why only there)."""
        parts = []
        for path in (self.dir / "log" / f"{name}.log", self.dir / "log" / f"{name}.out"):
            if path.exists() and path.stat().st_size:
                text = path.read_text(errors="replace")
                parts.append("".join(text.splitlines(True)[-lines:]))
        return "".join(parts) or "(nothing logged)"


def unavailable() -> str | None:
    """Why Slurm cannot run here, or None."""
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} not found); "
                "`apt-get install slurm-wlm munge` installs it")
    if os.geteuid() != 0:
        return "a private Slurm needs root (slurmd runs the jobs' processes as their users)"
    return None


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_of(directory: Path) -> list[psutil.Process]:
    """Every process that belongs to the Slurm in ``directory``: the daemons (their command
    lines name it), job steps (slurmstepd keeps slurmd's log open) and the jobs' processes
    (their ``SLURM_CONF`` is its slurm.conf)."""
    mark, conf = str(directory), str(directory / "slurm.conf")
    found = []
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        try:
            if (any(mark in arg for arg in p.cmdline())
                    or p.environ().get("SLURM_CONF") == conf
                    or any(f.path.startswith(mark + os.sep) for f in p.open_files())):
                found.append(p)
        except psutil.Error:
            continue
    return found


def _end(processes: list[psutil.Process], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM, then SIGKILL what is still alive after ``timeout``."""
    for p in processes:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=timeout)


def _owner_alive(directory: Path) -> bool:
    """Whether the process that made ``directory`` still runs."""
    try:
        owner = json.loads((directory / "owner.json").read_text())
        process = psutil.Process(owner["pid"])
        return abs(process.create_time() - owner["start_time"]) < 0.01
    except (OSError, ValueError, KeyError, psutil.Error):
        return False


def clean_leftovers(root: Path | None = None) -> list[Path]:
    """End the processes and remove the directories of private Slurms whose owner died."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    for directory in sorted(root.glob(PREFIX + "*")):
        if directory.is_dir() and not _owner_alive(directory):
            _end(_processes_of(directory), timeout=5)
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    return removed


def _write_files(directory: Path, host: str) -> None:
    """The munge key, slurm.conf, an empty plugin stack and the state folders."""
    me = psutil.Process()
    (directory / "owner.json").write_text(json.dumps({"pid": me.pid,
                                                      "start_time": me.create_time()}))
    for sub, mode in (("run", 0o755), ("log", 0o700), ("state", 0o700), ("spool", 0o700),
                      ("munge", 0o700)):
        (directory / sub).mkdir(mode=mode)
    key = directory / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    (directory / "plugstack.conf").write_text("")
    (directory / "slurm.conf").write_text(CONFIG.format(
        host=host, dir=directory, cpus=CPUS, first_job_id=random.randrange(*FIRST_JOB_IDS),
        ctld_port=_free_port(), slurmd_port=_free_port()))


def _start_daemons(slurm: Slurm, started: list[subprocess.Popen]) -> None:
    """munged, slurmctld and slurmd in the foreground, as children of this process."""
    d = slurm.dir
    env = {**os.environ, **slurm.env}
    commands = [
        ["munged", "--foreground", f"--socket={d}/run/munge.socket",
         f"--key-file={d}/munge/munge.key", f"--log-file={d}/log/munged.log",
         f"--pid-file={d}/run/munged.pid", f"--seed-file={d}/munge/munged.seed",
         "--num-threads=2"],
        ["slurmctld", "-D", "-c", "-f", str(slurm.conf)],
        ["slurmd", "-D", "-N", slurm.node, "-f", str(slurm.conf)],
    ]
    for command in commands:
        with open(d / "log" / f"{command[0]}.out", "wb") as out:
            started.append(subprocess.Popen(command, env=env, stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True))
        if command[0] == "munged":
            _wait_for(lambda: (d / "run" / "munge.socket").exists(), started, slurm,
                      "munged did not create its socket")


def _wait_for(ready, started: list[subprocess.Popen], slurm: Slurm, what: str) -> None:
    """Wait until ``ready()``; SlurmUnavailable with the logs where a daemon exits or
    ``START_TIMEOUT`` passes."""
    deadline = time.monotonic() + START_TIMEOUT
    while not ready():
        exited = [p.args[0] for p in started if p.poll() is not None]
        if exited or time.monotonic() > deadline:
            why = f"{', '.join(exited)} exited" if exited else f"{START_TIMEOUT} s passed"
            logs = "\n".join(f"--- {name}:\n{slurm.log(name, 8)}"
                             for name in ("munged", "slurmctld", "slurmd"))
            raise SlurmUnavailable(f"a private Slurm could not start: {what} ({why})\n{logs}")
        time.sleep(0.2)


def _node_idle(slurm: Slurm) -> bool:
    """Whether sinfo shows the node idle (it answers once slurmctld and slurmd talk)."""
    try:
        return slurm.run("sinfo", "--noheader", "--nodes", slurm.node,
                         "--format=%T").split() == ["idle"]
    except (RuntimeError, subprocess.TimeoutExpired):
        return False


def _stop(slurm: Slurm, started: list[subprocess.Popen]) -> None:
    """Cancel the jobs, stop the daemons (slurmd, slurmctld, munged), end whatever else
    of this Slurm runs and remove its directory."""
    try:
        if len(started) == 3 and all(p.poll() is None for p in started):
            ids = [job["id"] for job in slurm.jobs()]
            if ids:
                slurm.run("scancel", *ids)
            deadline = time.monotonic() + STOP_TIMEOUT
            while slurm.jobs() and time.monotonic() < deadline:
                time.sleep(0.2)
    except (RuntimeError, subprocess.TimeoutExpired):
        pass   # the processes are ended below all the same
    finally:
        for daemon in reversed(started):
            if daemon.poll() is None:
                daemon.terminate()
                try:
                    daemon.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait()
        _end(_processes_of(slurm.dir))
        shutil.rmtree(slurm.dir, ignore_errors=True)


@contextlib.contextmanager
def running_slurm():
    """A private Slurm with one idle node of ``CPUS`` CPUs (this host), stopped and removed
    on exit; SlurmUnavailable where Slurm is not installed, not usable or does not start
    (with the daemons' logs)."""
    why = unavailable()
    if why is not None:
        raise SlurmUnavailable(why)
    clean_leftovers()
    directory = Path(tempfile.mkdtemp(prefix=PREFIX))
    directory.chmod(0o755)   # munged wants every directory above its socket searchable
    slurm = Slurm(directory, socket.gethostname().split(".")[0])
    started: list[subprocess.Popen] = []
    try:
        _write_files(directory, slurm.node)
        _start_daemons(slurm, started)
        _wait_for(lambda: _node_idle(slurm), started, slurm, f"node {slurm.node} not idle")
        yield slurm
    finally:
        _stop(slurm, started)
