"""``cupy.fft``: NumPy's transforms on stand-in arrays."""
import numpy

from ._core import function

for _name in ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2",
              "irfft2", "rfftn", "irfftn", "hfft", "ihfft", "fftfreq", "rfftfreq",
              "fftshift", "ifftshift"):
    globals()[_name] = function(getattr(numpy.fft, _name))
    globals()[_name].__module__ = "cupy.fft"
del _name
