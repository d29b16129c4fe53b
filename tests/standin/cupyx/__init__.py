"""``cupyx`` for the stand-in: ``scatter_add`` (dpnb's ``functions.base.add_at``)."""
import numpy

import cupy


def scatter_add(a, slices, value):
    """``a[slices] += value`` with repeated indices adding up, as ``numpy.add.at``."""
    if not isinstance(a, cupy.ndarray):
        raise TypeError(f"Argument 'a' has incorrect type (expected cupy.ndarray, got "
                        f"{type(a).__name__})")
    from cupy._core import _index, unwrap
    numpy.add.at(a._array, _index(slices), unwrap(value))


def scatter_max(a, slices, value):
    from cupy._core import _index, unwrap
    numpy.maximum.at(a._array, _index(slices), unwrap(value))


def scatter_min(a, slices, value):
    from cupy._core import _index, unwrap
    numpy.minimum.at(a._array, _index(slices), unwrap(value))
