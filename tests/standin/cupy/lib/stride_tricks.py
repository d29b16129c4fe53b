"""``cupy.lib.stride_tricks``: ``as_strided`` as CuPy has it (no ``subok`` / ``writeable``)."""
import inspect

import numpy.lib.stride_tricks as _np_tricks

from .._core import function

as_strided = function(_np_tricks.as_strided, "as_strided", signature=inspect.Signature([
    inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d)
    for n, d in (("x", inspect.Parameter.empty), ("shape", None), ("strides", None))]))
as_strided.__module__ = "cupy.lib.stride_tricks"
