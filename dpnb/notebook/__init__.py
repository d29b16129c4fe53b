"""Notebook side of dpnb: look at what the engines computed and where they are,
``%dpnb`` magics, plots;
``report`` is the call a training loop on an engine makes to show its progress here."""
from ..cluster.engine_side import report
from ..cluster.plot import plot_grads, plot_losses
from ..cluster.progress import ProgressMonitor
from .inspect import Comparison, PerRank, SyncReport, check_sync, compare, gather, gather_grads
from .magics import load_ipython_extension
from .stacks import Stacks, where

__all__ = ["Comparison", "PerRank", "ProgressMonitor", "Stacks", "SyncReport", "check_sync",
           "compare", "gather", "gather_grads", "load_ipython_extension", "plot_grads",
           "plot_losses", "report", "where"]
