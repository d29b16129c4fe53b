"""Helpers for testing multi-process dpnb code, as ``numpy.testing`` is for NumPy's:
start a script on n MPI ranks and require each rank's OK (``check_ranks``), check
results and warnings on each rank (``Checks``, ``guarded``, ``rank_data``,
``LoggedWarnings``), time functions across ranks (``time_in_turns``), and make test hosts
on this machine, network namespaces that MPI and clusters run across (``TestHosts``); and ``assert_allclose``, which nnabla's
tests import from ``nnabla.testing``.  Nothing in dpnb itself imports this package."""
from .arrays import assert_allclose
from .checks import Checks, LoggedWarnings, guarded, rank_data, say, this_rank
from .hosts import HostsUnavailable, TestHost, TestHosts, hosts_unavailable, remove_stale_hosts
from .ranks import (ONE_THREAD, Ranks, RanksRun, assert_ranks_ok, check_ranks, mpi_command,
                    run_ranks, run_script)
from .timing import median_seconds, time_in_turns, timings

__all__ = [
    "assert_allclose",
    "Checks", "HostsUnavailable", "LoggedWarnings", "ONE_THREAD", "Ranks", "RanksRun",
    "TestHost", "TestHosts",
    "assert_ranks_ok", "check_ranks", "guarded", "hosts_unavailable", "median_seconds",
    "mpi_command", "rank_data", "remove_stale_hosts", "run_ranks", "run_script", "say",
    "this_rank", "time_in_turns", "timings",
]
