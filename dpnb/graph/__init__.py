"""The computation graph, defined once and re-run (define-and-run) or computed as it is
built (``auto_forward``).  One module per job, lowest first:

- ``modes``: the global modes and hooks (auto_forward, no_grad, recompute, function
  hooks, recorders, what the layers above install);
- ``schedule``: the order of a graph's functions and the forward and backward passes
  run from it, planned once and reused;
- ``variable``: ``Variable``, and the passes started from variables;
- ``function``: ``Function``, the base class of every operation.

The variables, functions and schedules share their underscore attributes (a variable's
``_data`` and ``_parent``, a function's ``_in_handles`` ...): they are the engine's
internals, kept off nnabla's surface and read directly on the hot path."""
from .function import Function, FunctionInfo
from .modes import (auto_forward, get_auto_forward, get_no_grad, install_arguments,
                    install_reshape, is_recorded, no_grad, recompute, recompute_fn,
                    register_recorder, set_auto_forward, set_function_post_hook,
                    set_function_pre_hook, set_global_recompute, unset_function_post_hook,
                    unset_function_pre_hook)
from .schedule import FREED_FOR_RECOMPUTE, ClearFlags, functions_in_order, record_clear_flags
from .variable import Hook, Variable, forward_all

__all__ = [
    "Function", "FunctionInfo", "auto_forward", "get_auto_forward", "get_no_grad",
    "install_arguments", "install_reshape", "is_recorded", "no_grad", "recompute",
    "recompute_fn", "register_recorder", "set_auto_forward", "set_function_post_hook",
    "set_function_pre_hook", "set_global_recompute", "unset_function_post_hook",
    "unset_function_pre_hook", "FREED_FOR_RECOMPUTE", "ClearFlags", "functions_in_order",
    "record_clear_flags",
    "Hook", "Variable", "forward_all",
]
