"""dpnb: data-parallel neural-network training from notebooks, with nnabla's API.

``import dpnb as nn`` gives the core: variables, contexts, parameters."""
from importlib import metadata as _metadata

from .context import Context, context_scope, default_extension, get_current_context, set_default_context
from .errors import DpnbError
from .graph import (Function, Variable, auto_forward, forward_all, get_auto_forward, no_grad,
                    recompute, recompute_fn, set_auto_forward, set_function_post_hook,
                    set_function_pre_hook, set_global_recompute, unset_function_post_hook,
                    unset_function_pre_hook)
from .logger import logger  # the Logger, as nnabla's package attribute is (not the module)
from .ndarray import NdArray, prefer_cached_array
from .parameter import (clear_parameters, get_current_parameter_scope, get_parameter_or_create,
                        get_parameters, load_parameters, parameter_scope, save_parameters,
                        set_parameter)
from .random import seed
from . import functions  # noqa: E402,F401 (variables' operators are functions)
from .formats import function_specs  # noqa: E402,F401 (Function.arguments reads it)
from .grad import grad  # noqa: E402 (after the functions it builds gradients from)

try:
    __version__ = _metadata.version("dpnb")  # dpnb's own release, as `pip show dpnb` gives
except _metadata.PackageNotFoundError:  # a source tree used without installing it
    __version__ = "0+unknown"
nnabla_version = "1.39.0"  # the nnabla release whose API, tests and files dpnb follows

__all__ = [
    "Context", "context_scope", "default_extension", "get_current_context", "set_default_context",
    "DpnbError", "Function", "Variable", "auto_forward", "forward_all", "get_auto_forward",
    "no_grad", "recompute", "recompute_fn", "set_auto_forward", "set_function_post_hook",
    "set_function_pre_hook", "set_global_recompute", "unset_function_post_hook",
    "unset_function_pre_hook", "logger",
    "NdArray", "prefer_cached_array", "clear_parameters", "get_current_parameter_scope", "get_parameter_or_create",
    "get_parameters", "load_parameters", "parameter_scope", "save_parameters", "set_parameter",
    "seed", "grad",
]

# The cluster and notebook helpers load on first use, so that `import dpnb` stays light.
_LAZY = {"start": "dpnb.cluster", "current": "dpnb.cluster", "Cluster": "dpnb.cluster",
         "gather": "dpnb.notebook",
         "gather_grads": "dpnb.notebook", "compare": "dpnb.notebook",
         "check_sync": "dpnb.notebook", "where": "dpnb.notebook",
         "load_ipython_extension": "dpnb.notebook", "set_language": "dpnb.notebook.labels",
         "use_as_nnabla": "dpnb.nnabla_alias", "TrainingState": "dpnb.cluster.engine.training_state",
         "Module": "dpnb.core.module", "Sequential": "dpnb.core.sequential",
         "ProtoVariable": "dpnb.core.graph_def", "graph_def": "dpnb.core",
         **dict.fromkeys(("set_solver_pre_hook", "set_solver_post_hook", "unset_solver_pre_hook",
                          "unset_solver_post_hook"), "dpnb.solvers")}
# Submodules that nnabla programs reach as attributes of the package after a bare
# `import nnabla` (nn.solver.Solver, nn.initializer.NormalInitializer ...), imported on first use.
_SUBMODULES = ("communicators", "ext_utils", "function_bases", "initializer", "monitor",
               "parametric_functions", "solver", "solvers", "utils")


def __getattr__(name: str):
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f"dpnb.{name}")
    if name not in _LAZY:
        raise AttributeError(f"module 'dpnb' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
