"""The watchdog of a cluster its driver owns (``dpnb.start``, ``stop_at_exit=True``):
``python -m dpnb.cluster.watchdog PROFILE_DIR CLUSTER_ID TOKEN DRIVER_PID``.

A driver killed outright (SIGKILL, the OOM killer taking a Jupyter kernel) runs no
``atexit``, and its controller, mpiexec and engines run in sessions of their own, so
they would run on for good.  The driver starts this process as its child (``Cluster.start``);
once its parent is another (the driver died, so it was re-parented), it stops the cluster
as ``dpnb cluster stop`` does, ending whatever is left.  It exits doing nothing once the
cluster's record is gone or names another start: the cluster was stopped."""
from __future__ import annotations

import os
import signal
import sys
import time

from ..errors import DpnbError
from . import processes

POLL = 0.2            # seconds between looks at the parent and the record
STOP_TIMEOUT = 10.0   # seconds the stop waits for the controller's answer


def driver_gone(profile_dir: str, cluster_id: str, token: str, driver: int) -> bool:
    """Wait until the driver is gone (True) or the cluster was stopped (False)."""
    path = processes.record_path(profile_dir, cluster_id)
    while os.getppid() == driver:
        record = processes.Record.load(path)
        if record is None or record.token != token:
            return False
        time.sleep(POLL)
    return True


def main(argv: list[str]) -> None:
    """Watch the driver; once it is gone, stop its cluster."""
    profile_dir, cluster_id, token, driver = argv
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    if not driver_gone(profile_dir, cluster_id, token, int(driver)):
        return
    from .elsewhere import stop_cluster

    try:
        stop_cluster(None, cluster_id, STOP_TIMEOUT, profile_dir=profile_dir)
    except DpnbError:   # nothing left to stop, or processes that refuse SIGKILL
        pass


if __name__ == "__main__":
    main(sys.argv[1:])
