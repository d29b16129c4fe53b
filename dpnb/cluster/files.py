"""A cluster as its files and process records tell it, for a process that did not
start it or has yet to: where it is, whether it is still starting, ipyparallel's view
of it from its cluster file, and the messages that name it and say how to attach to
it, stop it or start another."""
from __future__ import annotations

import json
import logging
import os
import time

from ..errors import DpnbError
from . import processes
from .checks import require_mpi
from .profile import ENGINE_CMD, name_of
from .profile import profile_dir as named_profile_dir

# ipyparallel's own logging (launcher output, engine logs at stop) goes here, not into cells.
IPP_LOG = logging.getLogger("dpnb.cluster.ipyparallel")
IPP_LOG.addHandler(logging.NullHandler())
IPP_LOG.propagate = False
IPP_LOG.setLevel(logging.WARNING)  # at DEBUG, launchers copy engine output to stderr


def profile_path(profile: str | None, profile_dir: str | os.PathLike | None):
    """The directory of a profile given by name or by directory."""
    if profile_dir is not None:
        return os.path.abspath(profile_dir)
    return str(named_profile_dir(name=profile or "default"))


def controller_starting(left: processes.Footprint) -> bool:
    """Whether a cluster's controller is on its way: a start recorded with no process yet,
    or a controller that runs before ipyparallel has written the cluster file (dpnb's
    controller launcher makes it empty first)."""
    if left.starting:
        return True
    return left.controller is not None and cluster_file_state(left) is None


def cluster_file_state(left: processes.Footprint) -> dict | None:
    """What ipyparallel wrote in a cluster's file, or None while it is missing or unwritten."""
    try:
        return json.loads(processes.cluster_file(left.profile_dir, left.cluster_id).read_text())
    except (OSError, ValueError):
        return None


def starter_alive(record: processes.Record | None) -> bool:
    """Whether the process that recorded a cluster's start still runs (it may be starting
    the engines)."""
    import psutil

    if record is None:
        return False
    try:
        starter = psutil.Process(record.starter.pid)
        same = abs(starter.create_time() - record.starter.start_time) <= processes.SAME_START
    except psutil.Error:
        return False
    return same and processes.alive(starter)


def engines_due(left: processes.Footprint) -> bool:
    """Whether a cluster started without dpnb's record (ipcluster, the IPython Clusters
    panel) is about to start its engines: its file names no engine set yet, and the
    process that started its controller, which starts them next, still runs."""
    import psutil

    state = cluster_file_state(left)
    if state is None or state.get("engines", {}).get("sets"):
        return False
    try:
        starter = left.controller.parent()
    except psutil.Error:
        return False
    return starter is not None and starter.pid != 1 and processes.alive(starter)


def _engines_as_ranks(loaded) -> None:
    """Where a profile does not say how engines start, the engines that ``restart()``
    starts for an attached cluster are dpnb's, one per MPI rank, as ``start()`` starts them."""
    from ipyparallel.cluster.launcher import MPILauncher

    config = loaded.config
    if "engine_cmd" not in config.EngineLauncher:
        config.EngineLauncher.engine_cmd = list(ENGINE_CMD)
    launcher = loaded.engine_launcher_class
    if issubclass(launcher, MPILauncher) and "mpi_cmd" not in config.MPIEngineSetLauncher:
        config.MPIEngineSetLauncher.mpi_cmd = [require_mpi()]


def load_cluster_file(where, cluster_id: str, left: processes.Footprint,
                      deadline: float | None = None):
    """ipyparallel's Cluster of a running cluster, from its file, with only the engine sets
    whose processes are the cluster's, and engines started as ranks; a DpnbError where the
    file is unreadable (still, at ``deadline`` of ``time.monotonic()``: the starter may be
    writing it, which ipyparallel does in place) or stale."""
    import ipyparallel as ipp

    while True:
        try:
            loaded = ipp.Cluster.from_file(profile_dir=str(where), cluster_id=cluster_id,
                                           log=IPP_LOG)
            break
        except (OSError, ValueError) as e:
            if deadline is None or time.monotonic() >= deadline:
                raise DpnbError(f"the cluster file of the cluster in {place(where, cluster_id)} "
                                f"cannot be read ({e}); {stop_hint(where, cluster_id)} ends "
                                f"its processes: {left.describe()}") from None
            time.sleep(0.05)
    if loaded.controller is None or loaded.controller.pid != left.controller.pid:
        raise DpnbError(f"the cluster file of {place(where, cluster_id)} does not name "
                        f"its running controller (pid {left.controller.pid}); "
                        f"{stop_hint(where, cluster_id)} ends its processes: "
                        f"{left.describe()}")
    ours = {p.pid for p in left.processes}
    for engine_set_id, engine_set in list(loaded.engines.items()):
        if engine_set.pid not in ours:              # its pid was reused since: not ours
            loaded.engines.pop(engine_set_id)
    _engines_as_ranks(loaded)
    return loaded


def place(profile_dir, cluster_id: str) -> str:
    """"profile 'mpi'" or "profile directory /x", with a cluster id that is not empty."""
    name = name_of(profile_dir)
    text = f"profile {name!r}" if name else f"profile directory {profile_dir}"
    return text + (f" (cluster id {cluster_id!r})" if cluster_id else "")


def stop_hint(profile_dir, cluster_id: str) -> str:
    """The ``dpnb cluster stop`` command line for a cluster."""
    name = name_of(profile_dir)
    command = "dpnb cluster stop " + (f"--profile {name}" if name else
                                      f"--profile-dir {profile_dir}")
    return f"`{command}{f' --cluster-id {cluster_id}' if cluster_id else ''}`"


def attach_hint(profile_dir, cluster_id: str) -> str:
    """The ``Cluster.attach`` call for a cluster."""
    name = name_of(profile_dir)
    where = f"{name!r}" if name else f"profile_dir={str(profile_dir)!r}"
    return f"`dpnb.Cluster.attach({where}{f', cluster_id={cluster_id!r}' if cluster_id else ''})`"


def already_running(left: processes.Footprint) -> str:
    """Why a start is refused, naming the running cluster and how to use or stop it."""
    where = place(left.profile_dir, left.cluster_id)
    stop = stop_hint(left.profile_dir, left.cluster_id)
    if not left.processes:
        starter = f" by process {left.record.starter.pid}" if left.record is not None else ""
        return (f"a cluster is being started in {where}{starter} at the same time; wait for "
                f"it and use it, or stop it with {stop}")
    if left.controller is None:
        return (f"what is left of a cluster in {where} still runs, without its controller: "
                f"{left.describe()}.  Stop it with {stop}, or start another with another "
                "cluster id")
    return (f"a cluster is already running in {where}: {left.describe()}.  Use it with "
            f"{attach_hint(left.profile_dir, left.cluster_id)}, stop it with {stop}, or "
            "start another with another cluster id")


def not_running(left: processes.Footprint) -> str:
    """What is wrong where no controller of a cluster runs, and what to do."""
    where = place(left.profile_dir, left.cluster_id)
    stop = stop_hint(left.profile_dir, left.cluster_id)
    if left.processes:
        return (f"the controller of the cluster in {where} is not running, but "
                f"{len(left.processes)} of its processes are: {left.describe()}; {stop} "
                "ends them")
    start = stop.replace("stop", "start", 1)
    if left.abandoned:
        return (f"no cluster is running in {where}; files of one that ended without "
                f"stopping are left ({', '.join(p.name for p in left.abandoned)}): {start} "
                f"removes them and starts a new one, {stop} only removes them")
    return f"no cluster is running in {where}; start one with {start}"
