"""Fourier transform cases (see functions.py).

STFT and ISTFT are recorded from nnabla's CPU build.  Its FFT and IFFT are CUDA only
(their CPU forward raises "not implemented"), so their cases carry a NumPy reference
instead (``Case.reference``), recorded in nnabla's place: np.fft.fftn / ifftn over the
signal axes, and as gradient the adjoint of that complex-linear map, conj(A conj(g))
(A's matrix is symmetric), which is not how dpnb computes it.

All four are linear, so every case checks first and second derivatives by finite
differences; fft_size is a multiple of stride throughout, as nnabla's graph backward of
STFT (an ISTFT) needs."""
import numpy as np

from . import functions
from .functions import Case

R = np.random.RandomState(0)
SIGNAL = R.randn(2, 48).astype(np.float32)
SHORT = R.randn(1, 20).astype(np.float32)


def spectra(frames: int, bins: int):
    """Random real and imaginary parts (batch 2)."""
    return (R.randn(2, bins, frames).astype(np.float32),
            R.randn(2, bins, frames).astype(np.float32))


def stft(*args, **kw):
    label = " ".join(["stft"] + [str(a) for a in args] + [f"{k}={v}" for k, v in kw.items()])
    return Case(label, lambda lib, x: lib.F.stft(x, *args, **kw), (SIGNAL,))


def istft(inputs, *args, **kw):
    label = " ".join(["istft"] + [str(a) for a in args] + [f"{k}={v}" for k, v in kw.items()])
    return Case(label, lambda lib, a, b: lib.F.istft(a, b, *args, **kw), inputs)


def complex_signals(*shape) -> np.ndarray:
    """Complex values as nnabla's FFT takes them: real and imaginary parts on a last axis."""
    return R.rand(*shape, 2).astype(np.float32)


def numpy_transform(inverse: bool, signal_ndim: int, normalized: bool):
    """NumPy's results of F.fft (F.ifft where ``inverse``): the output and the gradient
    for functions.output_grad(0, ...)."""
    transform = np.fft.ifftn if inverse else np.fft.fftn
    norm = "ortho" if normalized else None

    def reference(x: np.ndarray) -> dict:
        def apply(z):
            return transform(z, axes=tuple(range(z.ndim - signal_ndim, z.ndim)), norm=norm)

        y = apply(x[..., 0].astype(np.float64) + 1j * x[..., 1])
        g = functions.output_grad(0, x.shape)
        gx = np.conj(apply(np.conj(g[..., 0] + 1j * g[..., 1])))
        return {"y0": np.stack([y.real, y.imag], -1).astype(np.float32),
                "g0": np.stack([gx.real, gx.imag], -1).astype(np.float32)}
    return reference


def fourier(inverse: bool, x: np.ndarray, signal_ndim: int, normalized: bool = False):
    name = "ifft" if inverse else "fft"
    label = f"{name} signal_ndim={signal_ndim} normalized={normalized} shape={x.shape}"
    return Case(label, lambda lib, v: getattr(lib.F, name)(v, signal_ndim, normalized), (x,),
                reference=numpy_transform(inverse, signal_ndim, normalized), rtol=1e-4,
                atol=1e-4)


CASES = [
    stft(16, 4, 16),
    stft(16, 8, 32, "hamming", True, "constant"),
    stft(12, 4, 16, "rectangular", False),
    stft(16, 4, 16, None, True, "repeat"),
    stft(16, 8, 16, "hanning", True, "constant", True),
    stft(32, 8, 32, "hamming", False, "constant", as_istft_backward=True),
    Case("stft odd fft_size 17 window 15 stride 1",
         lambda lib, x: lib.F.stft(x, 15, 1, 17, "hanning"), (SHORT,)),
    istft(spectra(9, 9), 16, 4, 16, pad_mode="constant"),
    istft(spectra(5, 17), 16, 8, 32, "hamming", True, "constant"),
    istft(spectra(9, 9), 12, 4, 16, "rectangular", True, "reflect", True),
    istft(spectra(6, 9), 16, 4, 16, "hanning", False, "constant", as_stft_backward=True),
    Case("istft of stft (hanning, stride 4)",
         lambda lib, x: lib.F.istft(*lib.F.stft(x, 16, 4, 16), 16, 4, 16,
                                    pad_mode="constant"), (SIGNAL,)),
    fourier(False, complex_signals(3, 8), 1),
    fourier(False, complex_signals(2, 4, 3), 2, True),
    fourier(False, complex_signals(2, 3, 2), 3),
    fourier(True, complex_signals(8), 1),
    fourier(True, complex_signals(2, 3, 4, 2), 2, True),
    fourier(True, complex_signals(3, 2, 2), 3),
]
