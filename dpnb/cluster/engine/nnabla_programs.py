"""Engines whose programs run the real nnabla (where it is installed, dpnb never stands
in for it): the notebook's helpers read the parameters of whichever of dpnb and nnabla
the program uses, and the real ``nnabla.monitor.MonitorSeries`` feeds the notebook's
progress as dpnb's does.

Both libraries' Variables give their arrays as ``.d`` and ``.g``, and both keep their
parameters in a registry read by ``get_parameters``; the rest of the engine's calls
(``calls``) work on those."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
from collections import OrderedDict

import numpy as np

from ...errors import DpnbError

_log = logging.getLogger(__name__)
MONITOR = "nnabla.monitor"


def real_nnabla():
    """The real nnabla where this process imported it, else None (not installed, not
    imported yet, or dpnb standing in for it under that name)."""
    module = sys.modules.get("nnabla")
    if module is None or getattr(module, "__name__", None) != "nnabla":
        return None
    return module


def is_nnabla_object(value) -> bool:
    """Whether ``value`` is one of the real nnabla's objects (a Variable, an NdArray)."""
    return type(value).__module__.split(".")[0] == "nnabla"


def nnabla_to_host(value):
    """A NumPy copy of a real nnabla Variable's data or NdArray's array; ``value`` itself
    where it is neither."""
    if hasattr(value, "d") and hasattr(value, "need_grad"):  # Variable
        return np.array(value.d, copy=True)
    if hasattr(value, "data") and hasattr(value, "zero"):    # NdArray
        return np.array(value.data, copy=True)
    return value


def parameters(grad_only: bool) -> OrderedDict:
    """The parameters of the engine's program: dpnb's registry, or the real nnabla's
    where the program imported it and made its parameters there. Both holding some is
    an error, since the notebook could not tell which network is meant."""
    from ...parameter import get_parameters

    own = get_parameters(grad_only=grad_only)
    nnabla = real_nnabla()
    theirs = nnabla.get_parameters(grad_only=grad_only) if nnabla is not None else {}
    if own and theirs:
        raise DpnbError(f"both dpnb ({len(own)}) and the real nnabla ({len(theirs)}) hold "
                        f"parameters on this engine, and the helpers read one network; "
                        f"clear one of them (dpnb.clear_parameters() or "
                        f"nnabla.clear_parameters())")
    return OrderedDict(theirs or own)


class _ThenLoader(importlib.abc.Loader):
    """A module's own loader, then ``then(module)`` once the module has run."""

    def __init__(self, loader, then):
        self.loader, self.then = loader, then

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.then(module)

    def __getattr__(self, name):  # get_source, get_code ... as the module's own loader
        return getattr(self.loader, name)


class _MonitorFinder(importlib.abc.MetaPathFinder):
    """Finds ``nnabla.monitor`` as Python would, and has its loader follow it with
    ``then``; any other name is left to the other finders."""

    def __init__(self, then):
        self.then = then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != MONITOR:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _ThenLoader(spec.loader, self.then)
        return spec


def _follow_series(module) -> None:
    """Put a MonitorSeries into ``module`` (the real nnabla.monitor) that does what
    nnabla's does and then tells dpnb's series listeners, as dpnb's MonitorSeries does."""
    from ...monitor import notify_series_listeners

    base = module.MonitorSeries
    if getattr(base, "_dpnb_follows", False):
        return

    class MonitorSeries(base):
        _dpnb_follows = True

        def add(self, index, value):
            super().add(index, value)
            try:
                number = float(np.mean(value))
            except (TypeError, ValueError):  # nnabla took it; the loss curve cannot
                return
            notify_series_listeners(self.name, index, number)

    MonitorSeries.__module__, MonitorSeries.__qualname__ = base.__module__, base.__qualname__
    MonitorSeries.__doc__ = base.__doc__
    module.MonitorSeries = MonitorSeries
    _log.debug("the real nnabla's MonitorSeries feeds dpnb's series listeners")


def follow_nnabla_monitor_series() -> None:
    """Have the real nnabla's ``MonitorSeries.add`` tell dpnb's series listeners (the
    notebook's progress) from the moment the program imports ``nnabla.monitor``; at
    once where it has already. nnabla is not imported here: an engine pays for it only
    where its program uses it."""
    if MONITOR in sys.modules:
        _follow_series(sys.modules[MONITOR])
        return
    if not any(isinstance(f, _MonitorFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MonitorFinder(_follow_series))
