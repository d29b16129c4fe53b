"""Fourier transforms, as nnabla's: the complex DFT of 1 to 3 axes (``fft``, ``ifft``; a
trailing axis of 2 holds the real and imaginary parts) and the short-time transform of
signals (``stft``) with its inverse by overlap-add (``istft``).

All four are linear, so each one's gradient is the adjoint map.  nnabla gives the
adjoints of stft and istft as modes of the other function (``as_stft_backward``,
``as_istft_backward``), which its graph backward calls; dpnb does the same, so that
``nn.grad`` builds the graphs nnabla builds.  The transforms run on the FFT of the
array module (NumPy's pocketfft, cuFFT through CuPy)."""
from __future__ import annotations

import numpy as np

from ..graph import Function, Variable
from .array import _reflected
from .base import argument_error, default_outputs, flag_of, number_of
from .specs import FunctionSpec, attrs, call

__all__ = ["fft", "ifft", "stft", "istft"]


def _fft_module(xp):
    """The FFT functions for ``xp``'s arrays: SciPy's pocketfft for NumPy arrays where SciPy
    is installed (NumPy's rfft of float32 takes twice its time, and ten times where the
    allocator hands its temporaries back to the system each call), else ``xp.fft``
    (NumPy's, or cuFFT through CuPy).  Both give the same transforms."""
    if xp is np:
        try:
            import scipy.fft
        except ImportError:
            return np.fft
        return scipy.fft
    return xp.fft


# -- complex DFT ---------------------------------------------------------------------

class _Fourier(Function):
    """The DFT (or its inverse) over the ``signal_ndim`` axes before the last, which holds
    real and imaginary parts; ``normalized`` scales by 1/sqrt(n) both ways."""

    inverse = False
    grad_depends_on_inputs = False

    def __init__(self, signal_ndim: int, normalized: bool):
        self.signal_ndim, self.normalized = signal_ndim, normalized

    def output_specs(self, inputs):
        (x,) = inputs
        if x.ndim < self.signal_ndim + 1 or x.shape[-1] != 2:
            raise self.error(f"x must have the {self.signal_ndim} signal axes and a last axis "
                             f"of 2 (real and imaginary parts), got shape {x.shape}; stack "
                             f"the parts with F.stack(real, imag, axis=-1)")
        return [(x.shape, x.dtype)]

    def _transform(self, xp, x, inverse: bool, norm: str):
        """The (inverse) DFT of the complex array that ``x`` holds, as real and imaginary
        parts again."""
        complex_type = np.result_type(x.dtype, np.complex64)
        z = (x[..., 0] + 1j * x[..., 1]).astype(complex_type, copy=False)
        axes = tuple(range(-self.signal_ndim, 0))
        fourier = _fft_module(xp)
        z = (fourier.ifftn if inverse else fourier.fftn)(z, axes=axes, norm=norm)
        return xp.stack([z.real, z.imag], axis=-1).astype(x.dtype, copy=False)

    def forward_arrays(self, xp, xs):
        norm = "ortho" if self.normalized else "backward"
        return (self._transform(xp, xs[0], self.inverse, norm),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        """The adjoint: the opposite transform, unitary, or scaled by n (fft) or 1/n (ifft)."""
        norm = "ortho" if self.normalized else "forward"
        return (self._transform(xp, gys[0], not self.inverse, norm),)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """The opposite transform of gy, scaled as ``backward_arrays`` says."""
        opposite = F.fft if self.inverse else F.ifft
        gx = opposite(gys[0], self.signal_ndim, self.normalized)
        if self.normalized:
            return [gx]
        n = int(np.prod(gys[0].shape[-self.signal_ndim - 1:-1]))
        return [gx * (1.0 / n) if self.inverse else gx * float(n)]


class FFT(_Fourier):
    """Complex-to-complex DFT, exp(-2 pi j k n / N) over each signal axis."""

    nnabla_spec = FunctionSpec("FFT", "fft_param", ("signal_ndim", "normalized"),
                               attrs("signal_ndim", "normalized"),
                               call("fft", "signal_ndim", "normalized"))


class IFFT(_Fourier):
    """Complex-to-complex inverse DFT, exp(2 pi j k n / N) / N over each signal axis."""

    nnabla_spec = FunctionSpec("IFFT", "ifft_param", ("signal_ndim", "normalized"),
                               attrs("signal_ndim", "normalized"),
                               call("ifft", "signal_ndim", "normalized"))

    inverse = True


def _fourier_arguments(owner: str, signal_ndim, normalized, n_outputs, outputs):
    default_outputs(owner, n_outputs, outputs)
    signal_ndim = number_of(owner, "signal_ndim", signal_ndim, integer=True)
    if signal_ndim not in (1, 2, 3):
        raise argument_error(owner, f"signal_ndim must be 1, 2 or 3, got {signal_ndim}")
    return signal_ndim, flag_of(owner, "normalized", normalized)


def fft(x: Variable, signal_ndim: int, normalized: bool = False, n_outputs: int = -1,
        outputs=None) -> Variable:
    """The DFT of the complex signals in x (last axis: real, imaginary) over their last
    ``signal_ndim`` axes; unitary where ``normalized``."""
    return FFT(*_fourier_arguments("F.fft", signal_ndim, normalized, n_outputs, outputs))(x)


def ifft(x: Variable, signal_ndim: int, normalized: bool = False, n_outputs: int = -1,
         outputs=None) -> Variable:
    """The inverse DFT of the complex signals in x (last axis: real, imaginary) over their
    last ``signal_ndim`` axes; unitary where ``normalized``."""
    return IFFT(*_fourier_arguments("F.ifft", signal_ndim, normalized, n_outputs, outputs))(x)


# -- short-time transform --------------------------------------------------------------

_WINDOWS = ("hanning", "hamming", "rectangular")
_PAD_MODES = ("constant", "reflect", "repeat")
_NOLA_LEAST = 1e-11  # nnabla's least overlap-added squared window


def _frames(xp, signal, size: int, stride: int, count: int):
    """A view of ``count`` frames of ``size`` samples, ``stride`` apart: (batch, count, size)."""
    signal = xp.ascontiguousarray(signal)
    step0, step1 = signal.strides
    return xp.lib.stride_tricks.as_strided(signal, (signal.shape[0], count, size),
                                           (step0, stride * step1, step1))


def _overlap_add(xp, frames, stride: int, length: int):
    """The frames (batch, count, size) added at ``stride`` apart into signals of ``length``
    samples: as many shifted block additions as a frame spans strides."""
    batch, count, size = frames.shape
    spans = -(-size // stride)
    if spans * stride != size:
        frames = xp.pad(frames, ((0, 0), (0, 0), (0, spans * stride - size)))
    blocks = frames.reshape(batch, count, spans, stride)
    out = xp.zeros((batch, count + spans - 1, stride), frames.dtype)
    for j in range(spans):
        out[:, j:j + count] += blocks[:, :, j]
    out = out.reshape(batch, -1)
    if out.shape[1] < length:
        return xp.pad(out, ((0, 0), (0, length - out.shape[1])))
    return out[:, :length]


class _ShortTime(Function):
    """What STFT and ISTFT share: the window, where frames lie, the padding of ``center``
    and the four linear maps between signals and spectra that both are built from."""

    grad_depends_on_inputs = False

    def __init__(self, window_size: int, stride: int, fft_size: int, window_type: str,
                 center: bool, pad_mode: str, adjoint: bool):
        self.window_size, self.stride, self.fft_size = window_size, stride, fft_size
        self.window_type, self.center, self.pad_mode = window_type, center, pad_mode
        self.adjoint = adjoint
        self.pad = fft_size // 2 if center else 0

    def _window(self) -> np.ndarray:
        """The window, centred in fft_size samples (zeros around), as nnabla makes it:
        periodic Hann or Hamming, or ones."""
        i = np.arange(self.window_size)
        if self.window_type == "hanning":
            w = 0.5 - 0.5 * np.cos(2.0 * np.pi * i / self.window_size)
        elif self.window_type == "hamming":
            w = 0.54 - 0.46 * np.cos(2.0 * np.pi * i / self.window_size)
        else:
            w = np.ones(self.window_size)
        left = (self.fft_size - self.window_size) // 2
        return np.pad(w, (left, self.fft_size - self.window_size - left))

    def check_arguments(self) -> None:
        """nnabla's checks of the arguments both functions share; then the window."""
        if self.window_type not in _WINDOWS:
            raise self.error(f"window_type must be one of {', '.join(_WINDOWS)} (or None: "
                             f"rectangular), got {self.window_type!r}")
        if self.fft_size < self.window_size:
            raise self.error(f"FFT size has to be at least as large as window size: got "
                             f"fft_size={self.fft_size} < window_size={self.window_size}")
        self.window = self._window()

    def check_istft(self) -> None:
        """nnabla's check of ISTFT's stride, which stft's ISTFT mode makes too."""
        if self.fft_size % self.stride:
            raise self.error(f"FFT size needs to be a multiple of stride: got fft_size="
                             f"{self.fft_size}, stride={self.stride}")

    def count(self, length: int) -> int:
        """The number of frames in a (padded) signal of ``length`` samples."""
        return (length - self.fft_size) // self.stride + 1

    def span(self, count: int) -> int:
        """The samples ``count`` frames cover."""
        return (count - 1) * self.stride + self.fft_size

    def inverse_window(self, length: int) -> np.ndarray:
        """The squared window overlap-added over the frames of a signal of ``length``
        samples, which ISTFT divides by."""
        squared = (self.window ** 2)[None, None, :]
        frames = np.broadcast_to(squared, (1, self.count(length), self.fft_size))
        return _overlap_add(np, frames, self.stride, length)[0]

    def check_nola(self, length: int) -> None:
        """nnabla's NOLA check: the overlap-added squared window is nonzero where ISTFT
        divides by it (inside the padding with ``center``)."""
        inverse = self.inverse_window(length).astype(np.float32)
        inside = inverse[self.pad:length - self.pad]
        zero = np.flatnonzero(inside < _NOLA_LEAST)
        if zero.size:
            i = int(zero[0]) + self.pad
            raise self.error(f"NOLA(Nonzero Overlap Add) condition is not met. "
                             f"`inv_window[{i}] == {inverse[i]:f}`: no frame's window covers "
                             f"sample {i}, so overlap-add cannot invert there; use a smaller "
                             f"stride or a window that does not vanish (window_size="
                             f"{self.window_size}, stride={self.stride}, "
                             f"window_type={self.window_type!r})")

    # -- the padding of ``center`` and its adjoint --------------------------------------
    def _pad_index(self, length: int) -> np.ndarray:
        positions = np.arange(-self.pad, length + self.pad)
        if self.pad_mode == "repeat":
            return np.clip(positions, 0, length - 1)
        return _reflected(positions, length, False)

    def padded(self, xp, x, mode: str):
        """x with ``pad`` samples before and after, as F.pad's ``mode`` makes them."""
        if mode == "constant":
            return xp.pad(x, ((0, 0), (self.pad, self.pad)))
        return xp.take(x, xp.asarray(self._pad_index(x.shape[1])), axis=1)

    def unpadded(self, xp, g, length: int, mode: str):
        """The adjoint of ``padded``: each padded sample's value added back to the sample
        it copies (through a one-hot matrix over the few samples the padding copies)."""
        p = self.pad
        gx = g[:, p:p + length]
        if mode == "constant" or p == 0:
            return gx
        gx = gx.copy()
        index = self._pad_index(length)
        for side, source in ((g[:, :p], index[:p]), (g[:, p + length:], index[p + length:])):
            low, high = int(source.min()), int(source.max()) + 1
            hit = (source[:, None] == np.arange(low, high)[None, :]).astype(g.dtype)
            gx[:, low:high] += side @ xp.asarray(hit)
        return gx

    # -- the four linear maps ------------------------------------------------------------
    def _spectra(self, xp, frames, scale=None):
        """The real FFT of the windowed frames (optionally scaled per bin), as real and
        imaginary parts of shape (batch, bins, frames).  The FFT runs on a 2-D array:
        NumPy's takes ten times as long over the same rows of a 3-D one."""
        batch, count, size = frames.shape
        windowed = (frames * xp.asarray(self.window.astype(frames.dtype))).reshape(-1, size)
        spectra = _fft_module(xp).rfft(windowed, axis=-1)
        if scale is not None:
            spectra *= xp.asarray(scale.astype(frames.dtype))
        spectra = spectra.reshape(batch, count, -1).transpose(0, 2, 1)
        return (xp.ascontiguousarray(spectra.real).astype(frames.dtype, copy=False),
                xp.ascontiguousarray(spectra.imag).astype(frames.dtype, copy=False))

    def _signals(self, xp, y_r, y_i, scale, length: int):
        """Frames back from spectra (bins scaled by ``scale``, then the inverse real FFT
        on a 2-D array, as ``_spectra``), windowed and overlap-added into signals of
        ``length`` samples."""
        batch, bins, count = y_r.shape
        scale = xp.asarray(scale.astype(y_r.dtype))
        spectra = xp.empty((batch, count, bins), np.result_type(y_r.dtype, np.complex64))
        spectra.real = y_r.transpose(0, 2, 1) * scale
        spectra.imag = y_i.transpose(0, 2, 1) * scale
        frames = _fft_module(xp).irfft(spectra.reshape(-1, bins), n=self.fft_size, axis=-1)
        frames = frames.astype(y_r.dtype, copy=False).reshape(batch, count, self.fft_size)
        frames *= xp.asarray(self.window.astype(y_r.dtype))
        return _overlap_add(xp, frames, self.stride, length)

    def _bins(self, middle: float, ends: float) -> np.ndarray:
        """Per-bin factors: ``ends`` at bin 0 and bin fft_size // 2, ``middle`` between."""
        scale = np.full(self.fft_size // 2 + 1, middle)
        scale[0] = scale[-1] = ends
        return scale

    def analysis(self, xp, x):
        """STFT: the DFT of the windowed frames of x (padded with ``center``)."""
        if self.center:
            x = self.padded(xp, x, self.pad_mode)
        return self._spectra(xp, _frames(xp, x, self.fft_size, self.stride,
                                         self.count(x.shape[1])))

    def analysis_adjoint(self, xp, g_r, g_i, length: int):
        """The adjoint of ``analysis`` for signals of ``length`` samples: each bin's
        cosine and sine summed back over its frame, windowed and overlap-added.  irfft
        doubles the bins between the ends, so they are halved first; it is scaled by 1/N."""
        scale = self._bins(0.5, 1.0) * self.fft_size
        if self.fft_size % 2:  # odd: the last bin is no Nyquist bin and irfft doubles it
            scale[-1] = 0.5 * self.fft_size
        signals = self._signals(xp, g_r, g_i, scale, length + 2 * self.pad)
        return self.unpadded(xp, signals, length, self.pad_mode) if self.center else signals

    def _divide(self, xp, signals, length: int):
        """The signals divided by the overlap-added squared window, where ISTFT divides
        (inside the padding with ``center``; zero where no window reaches)."""
        inverse = self.inverse_window(length)
        covered = inverse > 0
        factor = np.where(covered, 1.0 / np.where(covered, inverse, 1.0), 0.0)
        factor[:self.pad] = 1.0
        factor[length - self.pad:] = 1.0
        return signals * xp.asarray(factor.astype(signals.dtype))

    def synthesis(self, xp, y_r, y_i, length: int | None = None):
        """ISTFT: each frame's inverse DFT (with nnabla's weights 1/N at bins 0 and
        fft_size // 2, 2/N between) windowed, overlap-added and divided by the squared
        window overlap-added; the padding of ``center`` cut off.  Signals of ``length``
        samples where given (as STFT's gradient): zero where no frame reaches."""
        scale = self._bins(1.0, 1.0)
        if self.fft_size % 2:  # odd: irfft doubles the last bin, nnabla weighs it 1/N
            scale[-1] = 0.5
        total = self.span(y_r.shape[2]) if length is None else length + 2 * self.pad
        signals = self._divide(xp, self._signals(xp, y_r, y_i, scale, total), total)
        return signals[:, self.pad:total - self.pad]

    def synthesis_adjoint(self, xp, g):
        """The adjoint of ``synthesis``: g padded with zeros, divided by the squared window
        overlap-added, and each frame's windowed DFT weighted as ISTFT weighs the bins."""
        if self.center:
            g = self.padded(xp, g, "constant")
        g = self._divide(xp, g, g.shape[1])
        scale = self._bins(2.0, 1.0) / self.fft_size
        return self._spectra(xp, _frames(xp, g, self.fft_size, self.stride,
                                         self.count(g.shape[1])), scale)


class STFT(_ShortTime):
    """Short-time Fourier transform: real and imaginary parts (batch, fft_size // 2 + 1,
    frames) of the windowed frames' DFT.  With ``as_istft_backward`` it is ISTFT's
    adjoint instead, which ISTFT's gradient graph calls."""

    nnabla_spec = FunctionSpec(
        "STFT", "stft_param", ("window_size", "stride", "fft_size", "window_type", "center",
                               "pad_mode", "as_istft_backward"),
        attrs("window_size", "stride", "fft_size", "window_type", "center", "pad_mode",
              as_istft_backward="adjoint"),
        call("stft", "window_size", "stride", "fft_size", "window_type", "center", "pad_mode",
             "as_istft_backward"))

    def output_specs(self, inputs):
        (x,) = inputs
        self.check_arguments()
        if self.pad_mode not in _PAD_MODES:
            raise self.error(f"pad_mode must be one of {', '.join(_PAD_MODES)}, got "
                             f"{self.pad_mode!r}")
        if x.ndim != 2:
            raise self.error(f"x must be signals of shape (batch, samples), got shape {x.shape}")
        self.length = x.shape[1]
        padded = self.length + 2 * self.pad
        if self.length < 1 or padded < self.fft_size:
            raise self.error(f"x's {self.length} samples (padded with center: {padded}) are "
                             f"fewer than fft_size={self.fft_size}; pass longer signals")
        count = self.count(padded)
        if self.adjoint:
            if self.pad_mode != "constant":
                raise self.error('`pad_mode` must be "constant" when `as_istft_backward == '
                                 'True`: ISTFT, whose adjoint this is, cuts off its padding '
                                 f'(pad_mode="constant"), got pad_mode={self.pad_mode!r}')
            self.check_istft()
            self.check_nola(self.span(count))
        bins = (x.shape[0], self.fft_size // 2 + 1, count)
        return [(bins, x.dtype), (bins, x.dtype)]

    def forward_arrays(self, xp, xs):
        (x,) = xs
        return self.synthesis_adjoint(xp, x) if self.adjoint else self.analysis(xp, x)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        g_r, g_i = gys
        if self.adjoint:
            return (self.synthesis(xp, g_r, g_i, self.length),)
        return (self.analysis_adjoint(xp, g_r, g_i, self.length),)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """nnabla's: ISTFT in the opposite mode."""
        return [F.istft(gys[0], gys[1], self.window_size, self.stride, self.fft_size,
                        self.window_type, self.center, self.pad_mode,
                        as_stft_backward=not self.adjoint)]


class ISTFT(_ShortTime):
    """Inverse short-time Fourier transform by overlap-add, divided by the squared window
    overlap-added.  With ``as_stft_backward`` it is STFT's adjoint instead, which STFT's
    gradient graph calls."""

    nnabla_spec = FunctionSpec(
        "ISTFT", "istft_param", ("window_size", "stride", "fft_size", "window_type", "center",
                                 "pad_mode", "as_stft_backward"),
        attrs("window_size", "stride", "fft_size", "window_type", "center", "pad_mode",
              as_stft_backward="adjoint"),
        call("istft", "window_size", "stride", "fft_size", "window_type", "center", "pad_mode",
             "as_stft_backward"))

    def output_specs(self, inputs):
        y_r, y_i = inputs
        self.check_arguments()
        self.check_istft()
        bins = self.fft_size // 2 + 1
        if y_r.shape != y_i.shape or y_r.ndim != 3 or y_r.shape[1] != bins:
            raise self.error(f"y_r and y_i must both have shape (batch, fft_size // 2 + 1 = "
                             f"{bins}, frames), got {y_r.shape} and {y_i.shape}")
        length = self.span(y_r.shape[2])
        if y_r.shape[2] < 1 or length <= 2 * self.pad:
            raise self.error(f"{y_r.shape[2]} frames span {length} samples, no more than "
                             f"center's padding of {self.pad} on each side; give more frames")
        if self.adjoint:
            if self.pad_mode not in _PAD_MODES:
                raise self.error(f"pad_mode must be one of {', '.join(_PAD_MODES)}, got "
                                 f"{self.pad_mode!r}")
        else:
            if self.pad_mode != "constant":
                raise self.error('`pad_mode` should be "constant" for the normal use of ISTFT '
                                 '(`as_stft_backward == false`) since `pad_mode` is ignored '
                                 f'and makes no effects in that case; got {self.pad_mode!r}: '
                                 'pass pad_mode="constant"')
            self.check_nola(length)
        self.length = length - 2 * self.pad
        return [((y_r.shape[0], self.length), y_r.dtype)]

    def forward_arrays(self, xp, xs):
        y_r, y_i = xs
        if self.adjoint:
            return (self.analysis_adjoint(xp, y_r, y_i, self.length),)
        return (self.synthesis(xp, y_r, y_i),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (g,) = gys
        grads = self.analysis(xp, g) if self.adjoint else self.synthesis_adjoint(xp, g)
        return tuple(gx if need else None for gx, need in zip(grads, need_grads))

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """nnabla's: STFT in the opposite mode."""
        grads = F.stft(gys[0], self.window_size, self.stride, self.fft_size, self.window_type,
                       self.center, self.pad_mode, as_istft_backward=not self.adjoint)
        return [gx if need else None for gx, need in zip(grads, need_grads)]


def _short_time_arguments(owner: str, window_size, stride, fft_size, window_type, center,
                          pad_mode, adjoint, adjoint_name: str) -> tuple:
    sizes = [number_of(owner, name, value, integer=True) for name, value in
             (("window_size", window_size), ("stride", stride), ("fft_size", fft_size))]
    for name, value in zip(("window_size", "stride", "fft_size"), sizes):
        if value < 1:
            raise argument_error(owner, f"{name} must be >= 1, got {value}")
    if window_type is None:  # nnabla's shorthand
        window_type = "rectangular"
    return (*sizes, window_type, flag_of(owner, "center", center), pad_mode,
            flag_of(owner, adjoint_name, adjoint))


def stft(x: Variable, window_size: int, stride: int, fft_size: int,
         window_type: str = "hanning", center: bool = True, pad_mode: str = "reflect",
         as_istft_backward: bool = False) -> tuple[Variable, Variable]:
    """The short-time Fourier transform of signals x (batch, samples): real and imaginary
    parts (batch, fft_size // 2 + 1, frames) of the DFT of frames ``stride`` apart,
    windowed (``hanning``, ``hamming`` or ``rectangular``; None is rectangular); with
    ``center`` x is first padded by fft_size // 2 on each side (``pad_mode``)."""
    return STFT(*_short_time_arguments("F.stft", window_size, stride, fft_size, window_type,
                                       center, pad_mode, as_istft_backward,
                                       "as_istft_backward"))(x)


def istft(y_r: Variable, y_i: Variable, window_size: int, stride: int, fft_size: int,
          window_type: str = "hanning", center: bool = True, pad_mode: str = "reflect",
          as_stft_backward: bool = False) -> Variable:
    """The signals (batch, samples) whose STFT is y_r + j y_i, by overlap-add divided by
    the squared window overlap-added.  As nnabla's, it needs pad_mode="constant" (the
    padding of ``center`` is cut off, not read) and fft_size a multiple of stride."""
    return ISTFT(*_short_time_arguments("F.istft", window_size, stride, fft_size, window_type,
                                        center, pad_mode, as_stft_backward,
                                        "as_stft_backward"))(y_r, y_i)
