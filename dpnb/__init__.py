"""dpnb: data-parallel neural-network training from notebooks, with nnabla's API.

``import dpnb as nn`` gives the core: variables, contexts, parameters."""
from .context import Context, context_scope, default_extension, get_current_context, set_default_context
from .errors import DpnbError
from .graph import Function, Variable, auto_forward, get_auto_forward, set_auto_forward
from .ndarray import NdArray
from .parameter import (clear_parameters, get_current_parameter_scope, get_parameter_or_create,
                        get_parameters, load_parameters, parameter_scope, save_parameters,
                        set_parameter)
from .random import seed

__all__ = [
    "Context", "context_scope", "default_extension", "get_current_context", "set_default_context",
    "DpnbError", "Function", "Variable", "auto_forward", "get_auto_forward", "set_auto_forward",
    "NdArray", "clear_parameters", "get_current_parameter_scope", "get_parameter_or_create",
    "get_parameters", "load_parameters", "parameter_scope", "save_parameters", "set_parameter",
    "seed",
]

# The cluster and notebook helpers load on first use, so that `import dpnb` stays light.
_LAZY = {"start": "dpnb.cluster", "Cluster": "dpnb.cluster", "gather": "dpnb.notebook",
         "gather_grads": "dpnb.notebook", "compare": "dpnb.notebook",
         "check_sync": "dpnb.notebook", "load_ipython_extension": "dpnb.notebook"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'dpnb' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
