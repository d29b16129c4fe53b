"""Notebook side of dpnb: look at what the engines computed and where they are,
``%dpnb`` magics, plots;
``report`` is the call a training loop on an engine makes to show its progress here."""
from ..cluster.engine.calls import report
from .inspect import (
           Comparison,
           PerRank,
           SyncReport,
           check_sync,
           compare,
           gather,
           gather_grads,
)
from .magics import load_ipython_extension
from .plot import plot_grads, plot_losses
from .progress import ProgressMonitor
from .stacks import Stacks, where

__all__ = ["Comparison", "PerRank", "ProgressMonitor", "Stacks", "SyncReport", "check_sync",
           "compare", "gather", "gather_grads", "load_ipython_extension", "plot_grads",
           "plot_losses", "report", "where"]
