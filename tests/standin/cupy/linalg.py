"""``cupy.linalg``: NumPy's on stand-in arrays."""
import numpy

from ._core import function

for _name in ("inv", "det", "slogdet", "cholesky", "solve", "norm", "qr", "svd", "eigh",
              "eigvalsh", "pinv", "matrix_power", "matrix_rank", "lstsq", "tensorsolve",
              "tensorinv"):
    globals()[_name] = function(getattr(numpy.linalg, _name))
    globals()[_name].__module__ = "cupy.linalg"
del _name
