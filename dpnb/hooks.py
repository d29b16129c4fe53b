"""Callbacks set globally under a key and called in the order they were set: nnabla's
function hooks (``nn.set_function_pre_hook``) and solver hooks (``nn.set_solver_pre_hook``)."""
from __future__ import annotations

from collections.abc import Callable

from .errors import DpnbError


class HookRegistry:
    """The hooks one ``set_<name>`` / ``unset_<name>`` pair of nnabla's manages."""

    def __init__(self, name: str):
        self.name = name  # "function_pre_hook" ...
        self._hooks: dict[str, Callable] = {}

    def set(self, key: str, hook: Callable) -> None:
        if not callable(hook):
            raise DpnbError(f"set_{self.name}: the hook must be callable, got {hook!r}")
        self._hooks[key] = hook

    def unset(self, key: str) -> None:
        if key not in self._hooks:
            raise DpnbError(f"unset_{self.name}: no hook is set under {key!r}; set ones: "
                            f"{sorted(self._hooks) or 'none'}")
        del self._hooks[key]

    def chained(self, hook: Callable | None) -> Callable | None:
        """These hooks, then ``hook`` (a call's own), as one callable; None if none."""
        if not self._hooks:
            return hook
        hooks = [*self._hooks.values(), *([hook] if hook is not None else [])]
        if len(hooks) == 1:
            return hooks[0]

        def call_all(*args) -> None:
            for h in hooks:
                h(*args)
        return call_all
