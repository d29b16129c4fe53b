"""Which processes and files belong to one cluster (a profile directory and a cluster id).

A cluster's controller forks schedulers, mpiexec starts proxies and engines, and
engines start nannies, each in a session of its own; after a crash, or after one of
them was killed, ipyparallel's cluster file names only pids that may be dead or
reused.  So the cluster's starter records every process (pid and start time) in
``security/dpnb-cluster-<id>.json``, and :func:`find` finds them again from any
process: the recorded ones still alive, every process that ipyparallel's launchers
tagged with the cluster's ``IPP_PROFILE_DIR`` and ``IPP_CLUSTER_ID``, and all their
descendants."""
from __future__ import annotations

import json
import logging
import os
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

RECORD_VERSION = 1
# psutil gives start times in seconds from the boot time and clock ticks: equal to
# well below this for one process, apart by at least a tick for two.
SAME_START = 0.005


def record_path(profile_dir: str | os.PathLike, cluster_id: str) -> Path:
    """dpnb's record of a cluster's processes, beside ipyparallel's cluster file."""
    return Path(profile_dir) / "security" / f"dpnb-cluster-{cluster_id}.json"


def cluster_file(profile_dir: str | os.PathLike, cluster_id: str) -> Path:
    """ipyparallel's cluster file (``Cluster.cluster_file``'s default)."""
    return Path(profile_dir) / "security" / f"cluster-{cluster_id}.json"


def connection_files(profile_dir: str | os.PathLike, cluster_id: str) -> list[Path]:
    """The controller's connection files, named as ipyparallel's launchers name them."""
    prefix = f"ipcontroller-{cluster_id}" if cluster_id else "ipcontroller"
    security = Path(profile_dir) / "security"
    return [security / f"{prefix}-{kind}.json" for kind in ("client", "engine")]


def engine_state_file(profile_dir: str | os.PathLike, cluster_id: str) -> Path:
    """The controller's engine id table, which ipyparallel writes in the profile's log
    folder and never removes (one more file per start)."""
    return Path(profile_dir) / "log" / f"engines{cluster_id}.json"


def cluster_files(profile_dir: str | os.PathLike, cluster_id: str) -> list[Path]:
    """Every file a cluster leaves in its profile while it runs."""
    return [record_path(profile_dir, cluster_id), cluster_file(profile_dir, cluster_id),
            *connection_files(profile_dir, cluster_id), engine_state_file(profile_dir, cluster_id)]


@contextmanager
def profile_lock(profile_dir: str | os.PathLike):
    """Hold the profile's start lock (``flock`` on its security directory) while inside.

    :func:`find` is no snapshot: a start that looks while another claims may see the
    other's fresh files without its processes and remove them as a crashed cluster's.
    Starts that check, clean up and claim under this lock see each other's records."""
    import fcntl

    security = Path(profile_dir) / "security"
    security.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(security, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)      # released when closed, or when this process dies
        yield
    finally:
        os.close(fd)


def _same_process(pid: int, start_time: float):
    """The live (not zombie) process ``pid`` if it started at ``start_time``, else None."""
    import psutil

    try:
        process = psutil.Process(pid)
        if abs(process.create_time() - start_time) > SAME_START:
            return None                                    # the pid was reused
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return process
    except psutil.Error:
        return None


def role_of(process) -> str:
    """A short name for a cluster process, from its command line.

    The controller is started in a session of its own and forks its schedulers
    into that session, so the one of them that leads the session is the controller."""
    import psutil

    try:
        cmdline = process.cmdline()
        if any("ipyparallel.controller" in part for part in cmdline):
            return "controller" if os.getsid(process.pid) == process.pid else "scheduler"
    except (psutil.Error, OSError):
        return "process"
    program = os.path.basename(cmdline[0]) if cmdline else "process"
    if program.startswith(("mpiexec", "mpirun")):
        return "mpiexec"
    if program.startswith("hydra_pmi_proxy"):
        return "hydra_pmi_proxy"
    text = " ".join(cmdline)
    for needle, role in (("ipyparallel.engine.nanny", "nanny"), ("dpnb.cluster.engine", "engine"),
                         ("ipengine", "engine")):
        if needle in text:
            return role
    return program


def alive(process) -> bool:
    """Whether a psutil process still runs: the same process (pid and start time), no zombie."""
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@dataclass
class Entry:
    """One recorded process: pid, start time (psutil's create_time) and role."""

    pid: int
    start_time: float
    role: str

    @classmethod
    def of(cls, process, role: str | None = None) -> Entry:
        return cls(process.pid, process.create_time(), role or role_of(process))


@dataclass
class Record:
    """The starter's record of a cluster: who started it (pid, start time), a token
    that tells this start from a later one of the same id, and its processes."""

    path: Path
    token: str
    starter: Entry
    processes: list[Entry] = field(default_factory=list)
    n: int | None = None

    @classmethod
    def claim(cls, profile_dir: str | os.PathLike, cluster_id: str, n: int) -> Record:
        """Create the record for a start; FileExistsError if another start created it first."""
        import psutil

        path = record_path(profile_dir, cluster_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = cls(path, uuid.uuid4().hex, Entry.of(psutil.Process(), "starter"), n=n)
        temporary = record._write_temporary()
        try:
            os.link(temporary, path)    # whole, and only if absent: else FileExistsError
        finally:
            temporary.unlink()
        return record

    @classmethod
    def load(cls, path: Path) -> Record | None:
        """The record at ``path``; None where there is none or it cannot be read."""
        try:
            d = json.loads(path.read_text())
            if d.get("version") != RECORD_VERSION:
                raise ValueError(f"version {d.get('version')!r}")
            return cls(path, d["token"], Entry(**d["starter"]),
                       [Entry(**e) for e in d["processes"]], d.get("n"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("ignoring the unreadable cluster record %s (%s)", path, e)
            return None

    def to_dict(self) -> dict:
        return {"version": RECORD_VERSION, "token": self.token, "n": self.n,
                "starter": vars(self.starter), "processes": [vars(e) for e in self.processes]}

    def add(self, processes: list) -> None:
        """Add live processes not yet recorded and write the record (atomically)."""
        import psutil

        known = {(e.pid, e.start_time) for e in self.processes}
        for p in processes:
            try:
                entry = Entry.of(p)
            except psutil.Error:
                continue
            if (entry.pid, entry.start_time) not in known:
                known.add((entry.pid, entry.start_time))
                self.processes.append(entry)
        self.processes = [e for e in self.processes if _same_process(e.pid, e.start_time)]
        self.write()

    def write(self) -> None:
        """Replace the record on disk at once (readers never see part of it)."""
        os.replace(self._write_temporary(), self.path)

    def _write_temporary(self) -> Path:
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.{self.token}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.to_dict(), f)
        return temporary


def _tagged(profile_dir: str, cluster_id: str) -> list:
    """Processes whose environment names this cluster, as ipyparallel's launchers set it."""
    import psutil

    wanted = os.path.realpath(profile_dir)
    found = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
            if (env.get("IPP_CLUSTER_ID") == cluster_id and "IPP_PROFILE_DIR" in env
                    and os.path.realpath(env["IPP_PROFILE_DIR"]) == wanted):
                found.append(p)
        except psutil.Error:
            continue
    return found


@dataclass
class Footprint:
    """What is left of one cluster: its files, and its processes that still run."""

    profile_dir: str
    cluster_id: str
    files: list[Path]
    processes: list
    roles: dict[int, str]
    record: Record | None

    @property
    def starting(self) -> bool:
        """Whether a start is under way: recorded, with no processes yet, its starter alive."""
        return (self.record is not None and not self.record.processes
                and _same_process(self.record.starter.pid, self.record.starter.start_time)
                is not None)

    @property
    def controller(self):
        """The cluster's controller process, if it still runs."""
        for p in self.processes:
            if self.roles.get(p.pid) == "controller":
                return p
        return None

    @property
    def abandoned(self) -> list[Path]:
        """The files only a cluster that ended without stopping leaves: all but the engine id
        table, which ipyparallel leaves after its own ``ipcluster stop`` too."""
        table = engine_state_file(self.profile_dir, self.cluster_id)
        return [f for f in self.files if f != table]

    def describe(self) -> str:
        """The processes' pids by role, controller and engines first:
        "controller 10; mpiexec 20; engines 22 23; schedulers 11 12"."""
        by_role: dict[str, list[int]] = {}
        for p in sorted(self.processes, key=lambda p: p.pid):
            by_role.setdefault(self.roles[p.pid], []).append(p.pid)
        order = ["controller", "mpiexec", "engine"]
        roles = sorted(by_role, key=lambda r: (order.index(r) if r in order else len(order), r))
        plural = {"nanny": "nannies"}
        return "; ".join(f"{role if len(by_role[role]) == 1 else plural.get(role, role + 's')} "
                         + " ".join(map(str, by_role[role])) for role in roles)

    def remove_files(self) -> None:
        """Remove the cluster's files (those already gone are no error)."""
        for path in self.files:
            path.unlink(missing_ok=True)

    def end(self, grace: float = 3.0, timeout: float = 10.0) -> list:
        """SIGTERM every process, SIGKILL those alive after ``grace`` seconds; return
        those still alive ``timeout`` seconds later (none unless signals are refused)."""
        import psutil

        for p in self.processes:
            try:
                p.terminate()
            except psutil.Error:
                pass
        _, left = psutil.wait_procs(self.processes, timeout=grace)
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        _, left = psutil.wait_procs(left, timeout=timeout)
        return [p for p in left if alive(p)]


def _ancestors_and_self() -> set[int]:
    import psutil

    me = psutil.Process()
    return {me.pid, *(p.pid for p in me.parents())}


def find(profile_dir: str | os.PathLike, cluster_id: str, *, token: str | None = None,
         extra: list | None = None) -> Footprint:
    """The files and live processes of cluster ``cluster_id`` in ``profile_dir``.

    Processes: those recorded (same pid and start time) and ``extra``, every process
    tagged with the cluster's profile and id, and all their descendants; never this
    process or its ancestors.  With ``token``, processes are taken from the record and
    the environment only if the record on disk is that start's (another start of the
    same id may have replaced it), and its files only then, too."""
    import psutil

    profile_dir = os.path.abspath(profile_dir)
    record = Record.load(record_path(profile_dir, cluster_id))
    ours = token is None or record is None or record.token == token
    roles: dict[int, str] = {}
    found: dict[int, object] = {}
    excluded = _ancestors_and_self()

    def add(p, recorded_role: str = "process") -> None:
        if p.pid not in found and p.pid not in excluded and alive(p):
            role = role_of(p)              # now: a process may have exec'd since it was recorded
            roles[p.pid] = recorded_role if role == "process" else role
            found[p.pid] = p

    for p in extra or []:
        add(p)
    if ours:
        for entry in record.processes if record is not None else []:
            p = _same_process(entry.pid, entry.start_time)
            if p is not None:
                add(p, entry.role)
        for p in _tagged(profile_dir, cluster_id):
            add(p)
    for p in list(found.values()):
        try:
            for child in p.children(recursive=True):
                add(child)
        except psutil.Error:
            continue
    files = [f for f in cluster_files(profile_dir, cluster_id) if f.exists()] if ours else []
    return Footprint(profile_dir, cluster_id, files, list(found.values()), roles, record)
