"""nnabla's ``nnabla.utils.inspection``: function-hook callbacks that look into a graph
while it runs (printing it, timing its functions, tracing NaN and infinity)."""
from .base import FunctionHookCallbackBase
from .pretty_print import PrettyPrinter, pprint
from .profile import CpuTimerCallback, TimeProfiler
from .value_trace import NanInfTracer

__all__ = ["FunctionHookCallbackBase", "PrettyPrinter", "pprint", "CpuTimerCallback",
           "TimeProfiler", "NanInfTracer"]
