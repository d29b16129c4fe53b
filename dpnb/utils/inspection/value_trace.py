"""nnabla's ``NanInfTracer``: function hooks that count NaN and infinity in each
function's outputs (forward) or its inputs' gradients (backward), and a check that
raises ValueError naming the first function where one appeared."""
from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager

from ...context import array_module_of
from ...errors import DpnbValueError
from ...graph import Function
from .base import FunctionHookCallbackBase


def _ordinal(n: int) -> str:
    """1 -> "1st", 2 -> "2nd", 3 -> "3rd", 4 -> "4th" (for n below 11)."""
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def _first_bad(stat: dict) -> int | None:
    """The index of the first array with a NaN count above 0, else of the first with an
    infinity count above 0, else None (an untraced kind has no counts)."""
    for counts in (stat["nan"], stat["inf"]):
        for i, count in enumerate(counts):
            if int(count) > 0:
                return i
    return None


class NanInfTracer(FunctionHookCallbackBase):
    """Trace NaN (``trace_nan``) and infinity (``trace_inf``) through a graph: pass
    ``forward_post_hook`` to ``forward`` and ``backward_post_hook`` to ``backward``, then
    call ``check()`` (or run them inside ``with tracer.trace():``).  ``need_details``
    adds each function's type, shapes and arguments to the error message.

    The counts stay on the arrays' device until ``check`` reads them; the last run of
    each function is what ``check`` looks at."""

    def __init__(self, trace_nan: bool = True, trace_inf: bool = True, need_details: bool = True):
        self.trace_nan = trace_nan
        self.trace_inf = trace_inf
        self.need_details = need_details
        self.key_to_stat_fwd: OrderedDict[Function, dict] = OrderedDict()
        self.key_to_stat_bwd: OrderedDict[Function, dict] = OrderedDict()

    @property
    def pre_hook(self):
        """None: nothing is traced before a function runs."""
        return None

    @property
    def post_hook(self):
        raise NotImplementedError("NanInfTracer has no post_hook: pass forward_post_hook to "
                                  "forward() and backward_post_hook to backward()")

    def _stat(self, f: Function, stats: OrderedDict) -> dict:
        """The record of ``f`` in ``stats``, made on its first run."""
        if f not in stats:
            stats[f] = {"name": f.name, "function_type": None, "function_args": None,
                        "input_shapes": None, "output_shapes": None}
            if self.need_details:
                stats[f].update(function_type=f.info.type_name,
                                function_args=str(f.info.args),
                                input_shapes=[str(x.shape) for x in f.inputs],
                                output_shapes=[str(y.shape) for y in f.outputs])
        return stats[f]

    def _callback(self, stats: OrderedDict, arrays_of):
        """A hook recording, for each array ``arrays_of(f)`` gives, its NaN and
        infinity counts; None where nothing is traced."""
        if not (self.trace_nan or self.trace_inf):
            return None

        def callback(f: Function) -> None:
            arrays = arrays_of(f)
            xps = [array_module_of(a) for a in arrays]
            self._stat(f, stats).update(
                nan=[xp.isnan(a).sum() for xp, a in zip(xps, arrays)] if self.trace_nan else [],
                inf=[xp.isinf(a).sum() for xp, a in zip(xps, arrays)] if self.trace_inf else [],
                rank=f.rank)
        return callback

    @property
    def forward_post_hook(self):
        """The ``function_post_hook`` for ``forward()``: traces each function's outputs."""
        return self._callback(self.key_to_stat_fwd, lambda f: [y.data.data for y in f.outputs])

    @property
    def backward_post_hook(self):
        """The ``function_post_hook`` for ``backward()``: traces the gradients each
        function gives its inputs."""
        return self._callback(self.key_to_stat_bwd, lambda f: [x.grad.data for x in f.inputs])

    @contextmanager
    def trace(self):
        """A context that calls ``check()`` on leaving it."""
        yield self
        self.check()

    def _check(self, stats: OrderedDict, direction: str) -> None:
        history = []
        for f, stat in stats.items():
            history.append(f)
            bad = _first_bad(stat)
            if bad is None:
                continue
            print(f"Error during {direction} propagation")
            for g in history[:-1]:
                print(f"\t{g}")
            print(f"\t{history[-1]} <-- ERROR")
            what = "output" if direction == "forward" else "input gradient"
            message = (f"The {_ordinal(bad + 1)} {what} of the function '{stat['name']}' "
                       f"(rank: {stat['rank']}) has nan or inf as its values.")
            if self.need_details:
                message += (f"\n    Function details:\n        function type: "
                            f"{stat['function_type']}\n        shapes of inputs: "
                            f"{stat['input_shapes']}\n        shapes of outputs: "
                            f"{stat['output_shapes']}\n        function args: "
                            f"{stat['function_args']}")
            raise DpnbValueError(message)

    def check(self) -> None:
        """Raise ValueError if a traced run put NaN or infinity into any output (forward)
        or input gradient (backward); print the functions up to the first such one."""
        self._check(self.key_to_stat_fwd, "forward")
        self._check(self.key_to_stat_bwd, "backward")
