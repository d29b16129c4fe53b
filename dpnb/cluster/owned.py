"""The processes of a cluster as the process that drives it keeps them: the claim that
makes a start on a profile exclusive, the record of every process the cluster runs
(the controller's forked schedulers too), the watchdog that stops them should the
driver die, and the end of whatever is left when it stops."""
from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
from collections.abc import Iterable, Sequence

from ..errors import DpnbError
from . import files, processes
from .profile import WATCHDOG_CMD

log = logging.getLogger(__name__)


def process_tree(pid: int | None) -> list:
    """The process ``pid`` and all its descendants, as psutil handles."""
    import psutil

    if not pid or pid < 0:
        return []
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


class OwnedProcesses:
    """The processes of the cluster ``cluster_id`` in ``profile_dir`` that this process
    knows, and the record of its start (this process's, or the one found on attaching)."""

    def __init__(self, profile_dir: str, cluster_id: str, record: processes.Record | None = None,
                 known: Iterable = ()):
        self.profile_dir, self.cluster_id = profile_dir, cluster_id
        self.record = record
        self.processes: list = list(known)
        self.watchdog: subprocess.Popen | None = None

    def claim(self, n: int) -> None:
        """Refuse to start where a cluster of this profile and id runs (or is being
        started); remove the files of one that ended without stopping; record this start
        of ``n`` engines.  All under the profile's lock, so that two starts at once see
        each other."""
        with processes.profile_lock(self.profile_dir):
            left = processes.find(self.profile_dir, self.cluster_id)
            if left.processes or left.starting:
                raise DpnbError(files.already_running(left))
            abandoned = left.abandoned
            left.remove_files()
            if abandoned:
                log.warning("removed the files of a cluster in %s that no longer runs (its "
                            "processes ended without stopping it, e.g. killed): %s",
                            files.place(self.profile_dir, self.cluster_id),
                            ", ".join(p.name for p in abandoned))
            try:
                self.record = processes.Record.claim(self.profile_dir, self.cluster_id, n)
            except FileExistsError:
                left = processes.find(self.profile_dir, self.cluster_id)
                raise DpnbError(files.already_running(left)) from None

    def start_watchdog(self) -> None:
        """The process that stops the cluster should this one die without stopping it
        (``dpnb.cluster.watchdog``)."""
        from .engine.start import THREAD_VARIABLES

        command = [*WATCHDOG_CMD, self.profile_dir, self.cluster_id, self.record.token,
                   str(os.getpid())]
        env = {**os.environ, **dict.fromkeys(THREAD_VARIABLES, "1")}   # no idle BLAS threads
        # a session of its own: a terminal's Ctrl-C or hang-up meant for this process
        # does not end it
        self.watchdog = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         env=env, start_new_session=True)

    def stop_watchdog(self) -> None:
        """End the watchdog: this process has stopped the cluster itself."""
        if self.watchdog is not None and self.watchdog.poll() is None:
            self.watchdog.terminate()
            self.watchdog.wait()
        self.watchdog = None

    def remember(self, pids: Iterable[int | None]) -> None:
        """Record the processes ``pids`` and their descendants, here and in the profile,
        so that a stop here or ``dpnb cluster stop`` elsewhere can make sure they are gone."""
        import psutil

        known = {(p.pid, p.create_time()) for p in self.processes if p.is_running()}
        for pid in pids:
            for p in process_tree(pid):
                try:
                    key = (p.pid, p.create_time())
                except psutil.NoSuchProcess:
                    continue
                if key not in known:
                    known.add(key)
                    self.processes.append(p)
        if self.record is not None:
            self.record.add(self.processes)

    def refresh(self) -> None:
        """Add the cluster's processes that started since (an attached cluster's engines)."""
        self.processes = list(processes.find(self.profile_dir, self.cluster_id,
                                             extra=self.processes).processes)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def superseded(self) -> bool:
        """Whether a later start of this profile and cluster id has replaced this one's record
        (this cluster's processes had all died and the later start cleaned up after them)."""
        if self.record is None:
            return False
        on_disk = processes.Record.load(self.record.path)
        return on_disk is not None and on_disk.token != self.record.token

    def left(self) -> processes.Footprint:
        """The cluster's live processes and files (none of a later start of its id)."""
        token = self.record.token if self.record is not None else None
        return processes.find(self.profile_dir, self.cluster_id, token=token,
                              extra=self.processes)

    def still_running(self, roles: Sequence[str] | None = None) -> str:
        """The cluster's processes that still run, of ``roles`` where given, as
        "mpiexec 4; engines 5 6", or "" where none does."""
        left = self.left()
        alive = [p for p in left.processes if roles is None or left.roles[p.pid] in roles]
        return dataclasses.replace(left, processes=alive).describe()

    def end(self) -> None:
        """End whatever of the cluster still runs and remove its files."""
        left = self.left()
        stuck = left.end()
        left.remove_files()
        self.processes = []
        self.record = None
        if stuck:
            raise DpnbError(f"processes of the cluster did not end after SIGKILL: "
                            f"{left.describe()}; end them by hand")
