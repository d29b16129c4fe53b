"""The clusters of this process: the current one (which ``%%px``, ``dpnb.gather`` and
the ``%dpnb`` magics use), those to stop at interpreter exit, and the views they
activated for ``%%px``.  One process drives one cluster at a time."""
from __future__ import annotations

import atexit
import logging
import weakref

from ..errors import DpnbError
from . import files

log = logging.getLogger(__name__)

NO_CLUSTER = ("no cluster is running in this process; start one with `cluster = dpnb.start(n=2)` "
              "or `%dpnb start -n 2`, or attach one started elsewhere (`dpnb cluster start`, "
              "the IPython Clusters panel) with `cluster = dpnb.Cluster.attach('mpi')`")

_running = weakref.WeakSet()     # clusters with processes, which exit may have to stop
_activated = weakref.WeakSet()   # the views clusters of this process activated for %%px
_current = None                  # the cluster started or attached last


def starting(cluster) -> None:
    """``cluster`` is starting processes: interpreter exit stops it (``stop_at_exit``)."""
    _running.add(cluster)


def make_current(cluster) -> None:
    """``cluster`` is now the one this process's notebook helpers use."""
    global _current
    _current = cluster


def stopped(cluster) -> None:
    """``cluster`` has stopped: not stopped at exit, and no longer current."""
    global _current
    _running.discard(cluster)
    if _current is cluster:
        _current = None


def activated(view) -> None:
    """``view`` was activated for ``%%px`` by a cluster of this process."""
    _activated.add(view)


def active():
    """The cluster started or attached last in this process if it is running, else None."""
    return _current if _current is not None and _current.running else None


def current():
    """The cluster started or attached last in this process, or an error that says how to
    start or attach one."""
    if _current is not None and _current.ipp is not None and not _current.running:
        where = files.place(_current.ipp.profile_dir, _current.ipp.cluster_id)
        raise DpnbError(f"the current cluster of this process (in {where}) has no engines: "
                        "they died or were stopped.  `cluster.restart()` starts fresh ones, "
                        "`cluster.stop()` ends it")
    if active() is None:
        raise DpnbError(NO_CLUSTER)
    return _current


def stopped_view(view) -> bool:
    """Whether ``view`` was activated for ``%%px`` by a cluster of this process that no
    longer runs it (stopped, or given another view by a restart)."""
    running = active()
    return view in _activated and (running is None or running.view is not view)


def stop_current() -> None:
    """Stop the current cluster, if there is one."""
    if _current is not None:
        _current.stop()


@atexit.register
def _stop_all() -> None:
    """Interpreter exit stops every cluster started here that asked for it."""
    for cluster in list(_running):
        if cluster.stop_at_exit:
            try:
                cluster.stop()
            except Exception as e:  # exiting anyway: note it and go on to the next cluster
                log.warning("stopping %r at exit failed: %s", cluster, e)
