"""nnabla's ``nn.Sequential``: modules called one after the other."""
from __future__ import annotations

from ..errors import DpnbError
from .module import Module


class Sequential(Module):
    """Calls its modules in order, each on the previous one's result(s); given as
    modules (named ``<name>_<index>``) or ``(name, module)`` pairs."""

    def __init__(self, *args, **kwargs):
        for idx, item in enumerate(args):
            name, module = item if isinstance(item, tuple) else (None, item)
            if not isinstance(module, Module):
                raise DpnbError(f"the layer {self.name}/{type(module).__name__} of Sequential "
                                "must be an nn.Module")
            self.submodules[f"{module.name}_{idx}" if name is None else name] = module

    def call(self, *args, **kwargs):
        result = None
        for module in self.submodules.values():
            result = module(*args, **kwargs)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        return result
