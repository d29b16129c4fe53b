"""nnabla's ``nnabla.utils.load``: read network files into everything nnabla's training
tools need (context, configuration, datasets, networks, optimizers, monitors and
executors); the work is dpnb.formats.contents_reader's."""
from ..formats.contents_reader import (Dataset, Executor, GlobalConfig, Info, LoadedNetwork,
                                       LoadedVariable, Monitor, Optimizer, TrainingConfig, load)

__all__ = ["Dataset", "Executor", "GlobalConfig", "Info", "LoadedNetwork", "LoadedVariable",
           "Monitor", "Optimizer", "TrainingConfig", "load"]
