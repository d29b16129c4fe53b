"""Code that runs on the engines: what the notebook asks of them, and the progress
reports they send back.

The functions the notebook runs there read the engine's user namespace and return
host (NumPy) copies, so that nothing device-specific crosses the wire.  Named
results travel as lists of (name, value) pairs: ipyparallel's serialisation
does not keep the order of dict keys, and parameter order matters.  Named arrays
travel packed (``pack`` / ``unpack``): ipyparallel sends only the arrays at the
top level of a result as zero-copy buffers and pickles the rest, so the arrays
go as one buffer per run of adjacent arrays beside a small table of names and
places.

A training loop on an engine calls ``report(step, total, loss)``; reports travel
over ipyparallel's data channel (``publish_data``) under ``KEY`` while the
``%%px`` cell still runs, and the notebook's ``ProgressMonitor`` shows them."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import sys
import time

import numpy as np

from .nnabla_programs import is_nnabla_object, nnabla_to_host, parameters

KEY = "dpnb_progress"


def identity() -> dict:
    """Rank, host, process id and device of the engine that runs this."""
    return {
        "rank": int(os.environ.get("DPNB_RANK", -1)),
        "local_rank": int(os.environ.get("DPNB_LOCAL_RANK", -1)),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "device": os.environ.get("DPNB_DEVICE", "cpu"),
    }


def to_host(value):
    """``value`` with NdArrays, Variables (their data) and CuPy arrays replaced by NumPy
    arrays: dpnb's, and the real nnabla's where the engine's program uses it."""
    from ...graph import Variable
    from ...ndarray import NdArray

    if is_nnabla_object(value):
        return nnabla_to_host(value)
    if isinstance(value, Variable):
        value = value.data
    if isinstance(value, NdArray):
        value = value.data
    if isinstance(value, dict):
        return {k: to_host(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_host(v) for v in value)
    if type(value).__module__.split(".")[0] == "cupy":
        return value.get()
    return value


def user_namespace() -> dict:
    """The namespace of the engine's IPython shell, where ``%%px`` cells define names."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("dpnb.cluster.engine.calls runs on IPython engines only")
    return shell.user_ns


def evaluate(expression: str):
    """``expression`` evaluated in the engine's namespace, as host arrays."""
    return to_host(eval(expression, user_namespace()))


def pack(named: list, gradients: bool = False) -> tuple:
    """The data (or gradients) of named variables ``[(name, Variable), ...]`` as
    ``(layout, buffer, ...)``: one flat host buffer per run of adjacent arrays (in
    flat storage a view of it, so no copy is made), and ``layout`` giving each
    name its buffer, offset and shape."""
    from ...storage import contiguous_runs

    names = iter([name for name, _ in named])
    layout, buffers = [], []
    if any(is_nnabla_object(v) for _, v in named):  # the real nnabla's: an array each
        for name, v in named:
            buffers.append(np.array(v.g if gradients else v.d, copy=True).reshape(-1))
            layout.append((name, len(buffers) - 1, 0, tuple(v.shape)))
        return (layout, *buffers)
    for run in contiguous_runs([v for _, v in named]):
        buffers.append(to_host(run.grad() if gradients else run.data()))
        layout += [(next(names), len(buffers) - 1, offset, v.shape)
                   for v, offset in zip(run.variables, run.offsets)]
    return (layout, *buffers)


def unpack(packed) -> list:
    """The ``[(name, array), ...]`` that ``pack`` made ``packed`` from (views of its buffers)."""
    layout, *buffers = packed
    return [(name, buffers[index][offset:offset + int(np.prod(shape, dtype=np.int64))]
             .reshape(shape)) for name, index, offset, shape in layout]


def gradients() -> tuple:
    """Every trainable parameter's gradient, packed: ``unpack`` gives [(name, array), ...]."""
    return pack(list(parameters(grad_only=True).items()), gradients=True)


def checksums() -> list:
    """A digest of every parameter's bytes, shape and dtype: [(name, digest), ...]."""
    sums = []
    for name, v in parameters(grad_only=False).items():
        array = np.ascontiguousarray(to_host(v))
        digest = hashlib.blake2b(array.view(np.uint8).reshape(-1), digest_size=16).hexdigest()
        sums.append((name, f"{array.dtype}{array.shape}:{digest}"))
    return sums


def parameter_values(names: list[str]) -> tuple:
    """The values of the named parameters, packed: ``unpack`` gives [(name, array), ...]."""
    params = parameters(grad_only=False)
    return pack([(name, params[name]) for name in names if name in params])

@dataclasses.dataclass
class _EngineRun:
    """An engine's side of one run: its last step and total, its losses, the step and
    time of the current cell's first report, when it last published, and whether the
    last report is still unsent."""

    step: int = 0
    total: int | None = None
    losses: list = dataclasses.field(default_factory=list)
    cell_first: int = 0
    cell_since: float | None = None
    published: float = 0.0
    unsent: bool = False


_run = _EngineRun()
_flush_registered = False


def _shell():
    """The engine's IPython shell where this runs on an engine, else None."""
    app = sys.modules.get("ipyparallel.engine.app")
    if app is None or not app.IPEngine.initialized():
        return None
    from IPython import get_ipython

    return get_ipython()


def _publish(shell) -> None:
    _run.published, _run.unsent = time.monotonic(), False
    shell.data_pub.publish_data({KEY: {"rank": int(os.environ.get("DPNB_RANK", 0)),
                                       "step": _run.step, "total": _run.total,
                                       "losses": list(_run.losses), "first": _run.cell_first,
                                       "elapsed": _run.published - _run.cell_since}})


def _flush() -> None:
    """Send the report the interval held back, at the end of the cell (IPython's
    post_execute), so the notebook sees the last step of a run without a total; the
    next cell's reports time themselves afresh."""
    shell = _shell()
    if _run.unsent and shell is not None:
        _publish(shell)
    _run.cell_since = None


def report(step: int, total: int | None = None, loss: float | None = None,
           interval: float = 0.25) -> None:
    """Report ``step`` of ``total`` (and a loss) from an engine to the notebook.

    Sent at most every ``interval`` seconds, and always at the last step and
    at the end of the cell; a step not after the previous one starts a new
    run.  Outside engines this does nothing, so the same loop runs in a plain
    script."""
    global _run, _flush_registered
    if step <= _run.step:
        _run = _EngineRun()
    _run.step, _run.total, _run.unsent = step, total, True
    if _run.cell_since is None:
        _run.cell_first, _run.cell_since = step, time.monotonic()
    if loss is not None:
        _run.losses.append((step, float(loss)))
    shell = _shell()
    if shell is None or getattr(shell, "data_pub", None) is None:
        return
    if not _flush_registered:
        shell.events.register("post_execute", _flush)
        _flush_registered = True
    last = total is not None and step >= total
    if last or time.monotonic() - _run.published >= interval:
        _publish(shell)


class SeriesFeed:
    """Feeds nnabla's ``MonitorSeries`` to ``report`` on an engine, so nnabla programs
    show their loss curve in the notebook: the first series named like a loss
    ("Training loss") is followed, others (errors, validation) are not."""

    def __init__(self):
        self.followed: str | None = None

    def __call__(self, name: str, index: int, value: float) -> None:
        if self.followed is None and "loss" in name.lower():
            self.followed = name
        if name == self.followed:
            report(index, None, value)
