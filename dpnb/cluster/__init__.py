"""Clusters of MPI engines for notebooks: ``dpnb.start()`` / ``dpnb.Cluster``."""
from .checks import Check, all_checks, require_mpi
from .launcher import ENGINE_CMD, Cluster, default_n, start
from .registry import current

__all__ = ["Check", "Cluster", "ENGINE_CMD", "all_checks", "current", "default_n", "require_mpi",
           "start"]
