"""Clusters started by another process (``dpnb cluster start``, ipcluster, the IPython
Clusters panel): stop one, whatever is left of it, or tell its state without changing it
(``dpnb cluster stop`` / ``status``, and a driver's watchdog)."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from ..errors import DpnbError
from ..notebook.table import Table
from . import files, processes
from .launcher import Cluster

log = logging.getLogger(__name__)


def stop_cluster(profile: str | None = "mpi", cluster_id: str = "", timeout: float = 60.0, *,
                 profile_dir: str | None = None) -> processes.Footprint:
    """Stop a cluster started elsewhere, whatever is left of it, and remove its files.

    Through its controller where that still answers, then by ending every process
    that belongs to it; returns what was found.  A DpnbError if nothing was there."""
    where = files.profile_path(profile, profile_dir)
    left = processes.find(where, cluster_id)
    if not left.processes and not left.abandoned:
        raise DpnbError(f"no cluster is running in {files.place(where, cluster_id)}; nothing "
                        "to stop")
    if left.controller is not None:
        try:
            Cluster.connect(profile, cluster_id, timeout, profile_dir=profile_dir, wait=False,
                            activate=False).stop()
        except Exception as e:  # the processes are ended below all the same
            log.warning("stopping the cluster in %s through its controller failed (%s); "
                        "ending its processes", files.place(where, cluster_id),
                        (str(e).splitlines() or [repr(e)])[0])
    rest = processes.find(where, cluster_id)
    stuck = rest.end()
    rest.remove_files()
    if stuck:
        raise DpnbError(f"processes of the cluster in {files.place(where, cluster_id)} did not end "
                        f"after SIGKILL: {rest.describe()}; end them by hand")
    return left


@dataclass
class Status:
    """A cluster as ``dpnb cluster status`` shows it: ``state`` ("running", "no engines",
    "no controller" or "not running"), what that means and what to do, and the
    engines' topology where they run."""

    state: str
    message: str
    topology: Table | None = None


def cluster_status(profile: str | None = "mpi", cluster_id: str = "", timeout: float = 60.0, *,
                   profile_dir: str | None = None) -> Status:
    """The state of a cluster started elsewhere, without changing it."""
    where = files.profile_path(profile, profile_dir)
    left = processes.find(where, cluster_id)
    if left.controller is None:
        return Status("no controller" if left.processes else "not running", files.not_running(left))
    cluster = Cluster.connect(profile, cluster_id, timeout, profile_dir=profile_dir, wait=False,
                              activate=False)
    named = files.place(where, cluster_id)
    try:
        if not cluster.running:
            return Status("no engines", (
                f"the controller of the cluster in {named} runs (pid {left.controller.pid}), "
                f"but no engines are registered: they died or were stopped.  "
                f"{files.stop_hint(where, cluster_id)} stops it; "
                f"`{files.attach_hint(where, cluster_id).strip('`')}.restart()` starts "
                f"{cluster.n} fresh engines"))
        table = cluster.topology()
        registered = len(table.rows)
        message = f"{registered} engines run in {named}"
        if registered < cluster.n:
            message = (f"only {registered} of the {cluster.n} engines started run in {named}; "
                       f"{files.stop_hint(where, cluster_id)} stops them")
        return Status("running", message, table)
    finally:
        cluster.client.close()
