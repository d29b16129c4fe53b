"""Notebook side of dpnb: look at what the engines computed, ``%dpnb`` magics, progress."""
from .inspect import Comparison, PerRank, SyncReport, check_sync, compare, gather, gather_grads
from .magics import load_ipython_extension
from .plot import plot_grads, plot_losses
from .progress import ProgressMonitor, report

__all__ = ["Comparison", "PerRank", "ProgressMonitor", "SyncReport", "check_sync", "compare",
           "gather", "gather_grads", "load_ipython_extension", "plot_grads", "plot_losses",
           "report"]
