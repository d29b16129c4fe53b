"""Test hosts on this one machine, so that tests of several machines cross a real network link.

Each host is a network namespace joined by a veth pair to a bridge in the root namespace,
which stands for the notebook's host and has an address on the bridge too; the addresses
are in 10.213.k.0/24, on those links only.  Every command entered into a host gets a UTS
namespace with the host's name, and each namespace's ``/etc/netns/<ns>/hosts`` (which
``ip netns exec`` puts over ``/etc/hosts``) names the hosts and the notebook's host.
MPICH's ``mpiexec`` reaches the hosts as a user's reaches machines: a hostfile, and
hydra's ssh launcher pointed at ``launcher``, a command called as ssh is called; its
proxies connect back to it by this machine's host name, which the hosts files give the
bridge address.

Needs root and iproute2 (``HostsUnavailable`` otherwise).  Names carry the owner's pid,
and a record of what a run made (under ``RECORD_DIR``) lets a later run remove what a
crashed one left."""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import ipaddress
import json
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from ..communicators import find_mpiexec
from ..errors import DpnbError
from .ranks import ONE_THREAD, RanksRun, run_ranks

log = logging.getLogger(__name__)

NETWORK = ipaddress.ip_network("10.213.0.0/16")  # one /24 of it per run
RECORD_DIR = Path("/run/dpnb-hosts")
NETNS_ETC = Path("/etc/netns")
NETNS_RUN = Path("/run/netns")
GRACE_SECONDS = 5.0  # between SIGTERM and SIGKILL for the processes left in a host
SAME_START = 0.005   # psutil start times of one process agree to well below this
FIRST_HOST = 10      # host i has address .(10 + i); the bridge has .1
LAUNCHER = "enter-host"  # the ssh-style command, in the run's work folder
# MPI between the hosts over TCP on their links: UCX's shared-memory transports (and CMA)
# reach processes of one kernel across network namespaces, so only TCP and a process's
# own loopback are allowed; hosts that are separate machines need none of this.
MPI_ENV = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "eth0"}
_NAME = re.compile(r"dpnb(\d+)(?:br|v\d+|pb|pv)$")
_NAMESPACE = re.compile(r"dpnb-(\d+)-(?:h\d+|probe)$")


class HostsUnavailable(DpnbError):
    """This machine cannot make test hosts (not root, no iproute2, no network namespaces)."""


@dataclasses.dataclass(frozen=True)
class TestHost:
    """One test host: its name (hostname, and what a hostfile names), network namespace,
    address on the bridge, and the root namespace's end of its veth pair."""

    __test__ = False  # not a pytest test class
    name: str
    namespace: str
    address: str
    link: str


class TestHosts:
    """``n`` test hosts and the notebook's host on one bridge, as a context manager that
    always removes them, and every process in them, at its end.

    ``hosts``: the :class:`TestHost`\\ s; ``notebook_host`` and ``address``: this
    (the root namespace's) host name and its bridge address; ``launcher``: the
    ssh-style command that enters a host; ``mpi_args(k)``: mpiexec's arguments for
    ``k`` ranks on each host; ``env``: what MPI between the hosts needs (``MPI_ENV``)."""

    __test__ = False  # not a pytest test class
    _open: ClassVar[set[int]] = set()   # pids of this process's TestHosts that are set up

    def __init__(self, n: int = 2):
        if not isinstance(n, int) or not 1 <= n <= 9:
            raise DpnbError(f"TestHosts makes 1 to 9 hosts, got n={n!r}")
        self.n = n
        self.tag = str(os.getpid())
        self.bridge = f"dpnb{self.tag}br"
        self.notebook_host = socket.gethostname()
        self.env = dict(MPI_ENV)
        self.hosts: list[TestHost] = []
        self.address = ""
        self.prefix = 24
        self.work: Path | None = None
        self.launcher: Path | None = None
        self._record: Path | None = None
        self._opened = False

    # -- setting up ------------------------------------------------------------------------

    def __enter__(self) -> TestHosts:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> TestHosts:
        """Remove what crashed runs left, then make the bridge, the hosts and their files."""
        reason = hosts_unavailable()
        if reason is not None:
            raise HostsUnavailable(reason)
        if os.getpid() in TestHosts._open:
            raise DpnbError("this process has test hosts set up already; close() them first "
                            "(their names carry the pid, so one set per process)")
        TestHosts._open.add(os.getpid())
        self._opened = True
        try:
            with _locked():
                remove_stale_hosts()
                subnet = _free_subnet(int(self.tag))
                self._plan(subnet)
                self._write_record(subnet)
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def _plan(self, subnet: ipaddress.IPv4Network) -> None:
        """Names and addresses of the bridge and the hosts."""
        addresses = list(subnet.hosts())
        self.address = str(addresses[0])
        self.hosts = [TestHost(f"host{i}-{self.tag}", f"dpnb-{self.tag}-h{i}",
                               str(addresses[FIRST_HOST - 1 + i]), f"dpnb{self.tag}v{i}")
                      for i in range(self.n)]
        self.prefix = subnet.prefixlen

    def _write_record(self, subnet) -> None:
        """What this run makes, written before it is made, for ``remove_stale_hosts``."""
        import psutil

        RECORD_DIR.mkdir(mode=0o700, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix=f"dpnb-hosts-{self.tag}-"))
        record = {"pid": os.getpid(), "start_time": psutil.Process().create_time(),
                  "subnet": str(subnet), "bridge": self.bridge, "work": str(self.work),
                  "namespaces": [h.namespace for h in self.hosts],
                  "links": [h.link for h in self.hosts]}
        self._record = RECORD_DIR / f"{self.tag}.json"
        _write_atomically(self._record, json.dumps(record, indent=1) + "\n")

    def _make(self) -> None:
        ip = _tool("ip")
        _ip(ip, "link", "add", self.bridge, "type", "bridge")
        _ip(ip, "addr", "add", f"{self.address}/{self.prefix}", "dev", self.bridge)
        _ip(ip, "link", "set", self.bridge, "up")
        for host in self.hosts:
            _ip(ip, "netns", "add", host.namespace)
            _ip(ip, "link", "add", host.link, "type", "veth", "peer", "name", "eth0",
                "netns", host.namespace)
            _ip(ip, "link", "set", host.link, "master", self.bridge, "up")
            _ip(ip, "-n", host.namespace, "addr", "add", f"{host.address}/{self.prefix}",
                "dev", "eth0")
            _ip(ip, "-n", host.namespace, "link", "set", "eth0", "up")
            _ip(ip, "-n", host.namespace, "link", "set", "lo", "up")
            etc = NETNS_ETC / host.namespace
            etc.mkdir(parents=True, exist_ok=True)
            _write_atomically(etc / "hosts", self._hosts_file(host))
        self.launcher = self.work / LAUNCHER
        _write_atomically(self.launcher, self._launcher_script(ip), mode=0o755)

    def _hosts_file(self, host: TestHost) -> str:
        """``/etc/hosts`` as a host sees it: itself, the other hosts and the notebook's host."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
                 f"{self.address}\t{self.notebook_host}"]
        lines += [f"{h.address}\t{h.name}" for h in self.hosts]
        return "\n".join(lines) + "\n"

    def _launcher_script(self, ip: str) -> str:
        """A command called as ssh is (``[-flags] HOST COMMAND...``) that runs COMMAND,
        through a shell as sshd does, in HOST's namespace under HOST's name."""
        cases = "\n".join(f"  {h.name}) ns={h.namespace} ;;" for h in self.hosts)
        names = " ".join(h.name for h in self.hosts)
        return f"""#!/bin/sh
# Enters a dpnb test host of process {self.tag}, as ssh reaches a machine: [-flags] HOST COMMAND...
while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done
case ${{1:-}} in
{cases}
  *) echo "enter-host: no test host named '${{1:-}}'; the hosts are: {names}" >&2; exit 255 ;;
esac
host=$1; shift
if [ $# -eq 0 ]; then echo "enter-host: no command to run on $host" >&2; exit 255; fi
exec {ip} netns exec "$ns" {_tool("unshare")} --uts /bin/sh -c \\
  'hostname "$0" && eval "exec $1"' "$host" "$*"
"""

    # -- using them --------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """The hosts' names, as a hostfile names them."""
        return [h.name for h in self.hosts]

    def hostfile(self, ranks_per_host: int = 1) -> Path:
        """A hostfile (MPICH's ``-f``) giving each host ``ranks_per_host`` ranks."""
        self._require_open()
        path = self.work / f"hostfile-{ranks_per_host}"
        _write_atomically(path, "".join(f"{h.name}:{ranks_per_host}\n" for h in self.hosts))
        return path

    def mpi_args(self, ranks_per_host: int = 1) -> list[str]:
        """MPICH mpiexec's arguments for ``ranks_per_host`` ranks on each host: the hostfile
        and hydra's ssh launcher pointed at ``launcher``."""
        return ["-f", str(self.hostfile(ranks_per_host)), "-launcher", "ssh",
                "-launcher-exec", str(self.launcher)]

    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run on the host named ``host``, as ssh would run it there."""
        self._require_open()
        return [str(self.launcher), host, shlex.join(map(str, argv))]

    def run_script(self, script: str | os.PathLike, *args: str, ranks_per_host: int = 1,
                   timeout: float = 60.0, env: dict[str, str] | None = None) -> RanksRun:
        """Run the Python file ``script`` with ``ranks_per_host`` ranks on each host under
        mpiexec (one BLAS thread each, ``env`` on top), stopped at ``timeout``."""
        command = [find_mpiexec(), "-n", str(ranks_per_host * self.n),
                   *self.mpi_args(ranks_per_host), sys.executable, str(script), *args]
        run = run_ranks(0, command, timeout, {**ONE_THREAD, **self.env, **(env or {})})
        return dataclasses.replace(run, ranks=ranks_per_host * self.n)

    def link_bytes(self) -> dict[str, int]:
        """Bytes that have crossed each host's link so far, both ways, by host name."""
        self._require_open()
        counts = {}
        for h in self.hosts:
            stats = Path("/sys/class/net") / h.link / "statistics"
            counts[h.name] = sum(int((stats / f"{way}_bytes").read_text())
                                 for way in ("rx", "tx"))
        return counts

    def processes(self) -> dict[str, list]:
        """The processes running in each host, by host name (psutil handles)."""
        self._require_open()
        inodes = {_namespace_inode(h.namespace): h.name for h in self.hosts}
        found: dict[str, list] = {h.name: [] for h in self.hosts}
        for process in _processes_in(inodes, set()):
            with contextlib.suppress(OSError):
                found[inodes[os.stat(f"/proc/{process.pid}/ns/net").st_ino]].append(process)
        return found

    def _require_open(self) -> None:
        if self.work is None or not self.hosts:
            raise DpnbError("the test hosts are not set up; use `with TestHosts(n) as hosts:`")

    # -- tearing down ------------------------------------------------------------------------

    def close(self) -> None:
        """End every process in the hosts, remove namespaces, links, bridge and files.
        Idempotent; a DpnbError naming what could not be removed."""
        try:
            if self._record is not None:
                left = _remove(self.bridge, [h.namespace for h in self.hosts],
                               [h.link for h in self.hosts], self.work)
                if left:
                    raise DpnbError("the test hosts could not be removed entirely: "
                                    + "; ".join(left))
                self._record.unlink(missing_ok=True)
        finally:
            self._record, self.work, self.hosts = None, None, []
            if self._opened:
                TestHosts._open.discard(os.getpid())
                self._opened = False


def hosts_unavailable() -> str | None:
    """Why this machine cannot make test hosts, or None where it can."""
    if not sys.platform.startswith("linux"):
        return f"test hosts need Linux network namespaces; this is {sys.platform}"
    if os.geteuid() != 0:
        return "test hosts need root (network namespaces, veth links and a bridge)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"test hosts need `{tool}` (iproute2, util-linux), not found on PATH"
    pid = os.getpid()
    probe, bridge, link = f"dpnb-{pid}-probe", f"dpnb{pid}pb", f"dpnb{pid}pv"
    try:
        for step in (["netns", "add", probe], ["link", "add", bridge, "type", "bridge"],
                     ["link", "add", link, "type", "veth", "peer", "name", "eth0", "netns",
                      probe]):
            made = subprocess.run(["ip", *step], capture_output=True, text=True)
            if made.returncode != 0:
                return f"`ip {' '.join(step[:2])}` does not work here: {made.stderr.strip()}"
    finally:
        _remove(bridge, [probe], [link], None)
    return None


def remove_stale_hosts() -> list[str]:
    """Remove what runs whose process has ended left (namespaces, links, processes, files);
    what was removed, each also logged."""
    removed = []
    recorded_pids = set()
    for path in sorted(RECORD_DIR.glob("*.json")) if RECORD_DIR.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue   # being written: its owner is alive
        recorded_pids.add(record["pid"])
        if _owner_alive(record["pid"], record["start_time"]):
            continue
        left = _remove(record["bridge"], record["namespaces"], record["links"],
                       Path(record["work"]))
        if left:
            log.warning("the test hosts of ended process %s could not be removed entirely: %s",
                        record["pid"], "; ".join(left))
            continue
        path.unlink(missing_ok=True)
        removed.append(f"test hosts of ended process {record['pid']}")
    # names of a run that crashed before its record was written, or whose record was lost
    etc = [p.name for p in NETNS_ETC.iterdir()] if NETNS_ETC.is_dir() else []
    namespaces = sorted({ns for ns in [*_netns_names(), *etc]
                         if _stale_name(_NAMESPACE, ns, recorded_pids)})
    links = [name for name in _link_names() if _stale_name(_NAME, name, recorded_pids)]
    if namespaces or links:
        _remove(None, namespaces, links, None)
        removed.append("unrecorded test hosts: " + ", ".join(namespaces + links))
    for what in removed:
        log.warning("removed %s", what)
    return removed


def _stale_name(pattern: re.Pattern, name: str, recorded: set[int]) -> bool:
    import psutil

    match = pattern.match(name)
    return bool(match) and int(match.group(1)) not in recorded and not psutil.pid_exists(
        int(match.group(1)))


def _owner_alive(pid: int, start_time: float) -> bool:
    import psutil

    try:
        return abs(psutil.Process(pid).create_time() - start_time) <= SAME_START
    except psutil.Error:
        return False


def _remove(bridge: str | None, namespaces: Sequence[str], links: Sequence[str],
            work: Path | None) -> list[str]:
    """End the processes in ``namespaces``, then remove them, ``links``, ``bridge`` and the
    files; what could not be removed."""
    ip = shutil.which("ip") or "ip"
    left = []
    inodes = {i: ns for ns in namespaces if (i := _namespace_inode(ns)) is not None}
    launcher = [str(work / LAUNCHER)] if work is not None else []
    stuck = _end_processes(inodes, [*namespaces, *launcher])
    if stuck:
        left.append("processes that outlived SIGKILL: " + ", ".join(map(str, stuck)))
    existing = set(_netns_names())
    for ns in namespaces:
        if ns in existing:
            failed = subprocess.run([ip, "netns", "del", ns], capture_output=True, text=True)
            if failed.returncode != 0:
                left.append(f"namespace {ns}: {failed.stderr.strip()}")
        shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
    present = set(_link_names())
    for link in [*links, *([bridge] if bridge else [])]:
        if link in present:
            failed = subprocess.run([ip, "link", "del", link], capture_output=True, text=True)
            if failed.returncode != 0 and link in _link_names():
                left.append(f"link {link}: {failed.stderr.strip()}")
    with contextlib.suppress(OSError):
        NETNS_ETC.rmdir()   # only where no namespace has files left
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)
    return left


def _end_processes(inodes: dict[int, str], entering: Sequence[str]) -> list[int]:
    """End every process in the namespaces of ``inodes`` and every one on its way into them
    (a command line with an argument of ``entering``: the launcher, a namespace's name):
    SIGTERM, SIGKILL to those left after ``GRACE_SECONDS``, and again for those that
    arrived meanwhile, until none is found; the pids still there at the end."""
    import psutil

    deadline = time.monotonic() + 4 * GRACE_SECONDS
    while True:
        found = _processes_in(inodes, set(entering))
        if not found:   # none, twice, a moment apart: one between two programs shows now
            time.sleep(0.2)
            found = _processes_in(inodes, set(entering))
        if not found or time.monotonic() > deadline:
            return [p.pid for p in found]
        for signum in (signal.SIGTERM, signal.SIGKILL):
            for p in found:
                with contextlib.suppress(psutil.Error):
                    p.send_signal(signum)
            _, found = psutil.wait_procs(found, timeout=GRACE_SECONDS)
            if not found:
                break


def _processes_in(inodes: dict[int, str], entering: set[str]) -> list:
    """Every live process whose network namespace (``/proc/<pid>/ns/net``) is one of
    ``inodes``, or whose command line has an argument of ``entering``; zombies count as gone.

    The command line is read before the namespace: a process on its way in has one of
    the two at every moment (the launcher's arguments until ``ip netns exec`` has entered
    the namespace), so reading them in that order cannot miss it, where the other order
    could read the namespace before it entered and the command line after ``ip`` had
    executed the next program."""
    import psutil

    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if (not entering.isdisjoint(arguments)
                    or os.stat(entry / "ns" / "net").st_ino in inodes):
                process = psutil.Process(int(entry.name))
                if process.status() != psutil.STATUS_ZOMBIE:
                    found.append(process)
        except (OSError, psutil.Error):
            continue
    return found


def _namespace_inode(namespace: str) -> int | None:
    """The inode of a named network namespace (what ``/proc/<pid>/ns/net`` links to)."""
    try:
        return os.stat(NETNS_RUN / namespace).st_ino
    except OSError:
        return None


def _netns_names() -> list[str]:
    try:
        return sorted(p.name for p in NETNS_RUN.iterdir())
    except OSError:
        return []


def _link_names() -> list[str]:
    return sorted(p.name for p in Path("/sys/class/net").iterdir())


def _free_subnet(start: int) -> ipaddress.IPv4Network:
    """A /24 of ``NETWORK`` no address of this namespace and no live record uses."""
    used = set()
    shown = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True)
    for address in re.findall(r"inet (\S+)", shown.stdout):
        used.add(ipaddress.ip_interface(address).network)
    for path in RECORD_DIR.glob("*.json") if RECORD_DIR.is_dir() else []:
        with contextlib.suppress(OSError, ValueError, KeyError):
            used.add(ipaddress.ip_network(json.loads(path.read_text())["subnet"]))
    subnets = list(NETWORK.subnets(new_prefix=24))
    for k in range(len(subnets)):
        candidate = subnets[(start + k) % len(subnets)]
        if not any(candidate.overlaps(u) for u in used):
            return candidate
    raise DpnbError(f"every /24 of {NETWORK} is in use on this machine; remove test hosts "
                    "that are left (`ip netns list`, `ip link`) or end the runs that hold them")


@contextlib.contextmanager
def _locked():
    """Runs setting up test hosts at the same time take turns (choosing subnets)."""
    RECORD_DIR.mkdir(mode=0o700, exist_ok=True)
    with open(RECORD_DIR / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise HostsUnavailable(f"test hosts need `{name}`, not found on PATH")
    return found


def _ip(ip: str, *args: str) -> None:
    done = subprocess.run([ip, *args], capture_output=True, text=True)
    if done.returncode != 0:
        command = shlex.join(["ip", *args])
        raise DpnbError(f"setting up test hosts: `{command}` failed: {done.stderr.strip()}")


def _write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
