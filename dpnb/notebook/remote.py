"""Functions the notebook runs on the engines; they read the engine's user namespace
and return host (NumPy) copies, so that nothing device-specific crosses the wire.
Named results travel as lists of (name, value) pairs: ipyparallel's serialisation
does not keep the order of dict keys, and parameter order matters."""
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


def gradients() -> list:
    """Every trainable parameter's gradient: [(name, array), ...]."""
    from ..parameter import get_parameters

    return [(name, to_host(v.grad)) for name, v in get_parameters().items()]


def checksums() -> list:
    """A digest of every parameter's bytes, shape and dtype: [(name, digest), ...]."""
    from ..parameter import get_parameters

    sums = []
    for name, v in get_parameters(grad_only=False).items():
        array = np.ascontiguousarray(to_host(v.data))
        digest = hashlib.blake2b(array.view(np.uint8).reshape(-1), digest_size=16).hexdigest()
        sums.append((name, f"{array.dtype}{array.shape}:{digest}"))
    return sums


def parameter_values(names: list[str]) -> list:
    """The values of the named parameters: [(name, array), ...]."""
    from ..parameter import get_parameters

    params = get_parameters(grad_only=False)
    return [(name, to_host(params[name].data)) for name in names if name in params]
