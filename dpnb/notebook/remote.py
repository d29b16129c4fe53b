"""Functions the notebook runs on the engines; they read the engine's user namespace
and return host (NumPy) copies, so that nothing device-specific crosses the wire.
Named results travel as lists of (name, value) pairs: ipyparallel's serialisation
does not keep the order of dict keys, and parameter order matters.  Named arrays
travel packed (``pack`` / ``unpack``): ipyparallel sends only the arrays at the
top level of a result as zero-copy buffers and pickles the rest, so the arrays
go as one buffer per run of adjacent arrays beside a small table of names and
places."""
from __future__ import annotations

import hashlib

import numpy as np


def to_host(value):
    """``value`` with NdArrays, Variables (their data) and CuPy arrays replaced by NumPy arrays."""
    from ..graph import Variable
    from ..ndarray import NdArray

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
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("dpnb.notebook.remote runs on IPython engines only")
    return shell.user_ns


def evaluate(expression: str):
    """``expression`` evaluated in the engine's namespace, as host arrays."""
    return to_host(eval(expression, user_namespace()))


def pack(named: list, gradients: bool = False) -> tuple:
    """The data (or gradients) of named variables ``[(name, Variable), ...]`` as
    ``(layout, buffer, ...)``: one flat host buffer per run of adjacent arrays (in
    flat storage a view of it, so no copy is made), and ``layout`` giving each
    name its buffer, offset and shape."""
    from ..storage import contiguous_runs

    names = iter([name for name, _ in named])
    layout, buffers = [], []
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
    from ..parameter import get_parameters

    return pack(list(get_parameters().items()), gradients=True)


def checksums() -> list:
    """A digest of every parameter's bytes, shape and dtype: [(name, digest), ...]."""
    from ..parameter import get_parameters

    sums = []
    for name, v in get_parameters(grad_only=False).items():
        array = np.ascontiguousarray(to_host(v.data))
        digest = hashlib.blake2b(array.view(np.uint8).reshape(-1), digest_size=16).hexdigest()
        sums.append((name, f"{array.dtype}{array.shape}:{digest}"))
    return sums


def parameter_values(names: list[str]) -> tuple:
    """The values of the named parameters, packed: ``unpack`` gives [(name, array), ...]."""
    from ..parameter import get_parameters

    params = get_parameters(grad_only=False)
    return pack([(name, params[name]) for name in names if name in params])
