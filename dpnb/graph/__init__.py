"""The computation graph: variables, the Function base class, and the forward and
backward passes (one module for now; split by job in the next step)."""
from .variable import (FREED_FOR_RECOMPUTE, ClearFlags, Function, FunctionInfo, Hook, Variable,
                       auto_forward, forward_all, get_auto_forward, get_no_grad,
                       install_arguments, install_reshape, is_recorded, no_grad, recompute,
                       recompute_fn, record_clear_flags, register_recorder, set_auto_forward,
                       set_function_post_hook, set_function_pre_hook, set_global_recompute,
                       unset_function_post_hook, unset_function_pre_hook)

__all__ = [
    "FREED_FOR_RECOMPUTE", "ClearFlags", "Function", "FunctionInfo", "Hook", "Variable",
    "auto_forward", "forward_all", "get_auto_forward", "get_no_grad", "install_arguments",
    "install_reshape", "is_recorded", "no_grad", "recompute", "recompute_fn",
    "record_clear_flags", "register_recorder", "set_auto_forward", "set_function_post_hook",
    "set_function_pre_hook", "set_global_recompute", "unset_function_post_hook",
    "unset_function_pre_hook",
]
