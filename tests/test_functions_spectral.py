"""Fourier transforms beyond the nnabla cases: ISTFT inverts STFT, STFT's frames against
np.fft.rfft by hand, each mode the adjoint of the other function, and the errors nnabla
raises for bad arguments (the NOLA condition, ISTFT's pad_mode, the window)."""
import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
from dpnb import DpnbError


def _v(a, need_grad=False):
    return nn.Variable.from_numpy_array(np.asarray(a), need_grad=need_grad)


@pytest.mark.parametrize("window_type, center", [
    ("hanning", True), ("hamming", True), ("rectangular", True), ("hamming", False),
    ("rectangular", False)])  # uncentred, Hann's zero first sample cannot be inverted
def test_istft_inverts_stft(rng, window_type, center):
    x = rng.randn(2, 1024)
    with nn.auto_forward():
        y_r, y_i = F.stft(_v(x), 512, 128, 512, window_type, center, "reflect")
        z = F.istft(y_r, y_i, 512, 128, 512, window_type, center, "constant")
    np.testing.assert_allclose(z.d, x, atol=1e-10)


def test_stft_is_the_rfft_of_the_windowed_frames(rng):
    x = rng.randn(1, 100)
    with nn.auto_forward():
        y_r, y_i = F.stft(_v(x), 16, 5, 20, "hamming", center=False)
    window = np.pad(0.54 - 0.46 * np.cos(2 * np.pi * np.arange(16) / 16), 2)
    frames = np.stack([x[0, t:t + 20] for t in range(0, 81, 5)])
    expected = np.fft.rfft(frames * window, axis=1).T
    np.testing.assert_allclose(y_r.d[0], expected.real, atol=1e-12)
    np.testing.assert_allclose(y_i.d[0], expected.imag, atol=1e-12)


@pytest.mark.parametrize("pad_mode", ["reflect", "constant", "repeat"])
def test_the_backward_modes_are_adjoints(rng, pad_mode):
    """<stft(x), y> == <x, istft(y, as_stft_backward)> and <istft(y), x> == <y,
    stft(x, as_istft_backward)>, as nnabla's gradients use them."""
    x, y_r, y_i = rng.randn(2, 60), rng.randn(2, 9, 16), rng.randn(2, 9, 16)
    args = (16, 4, 16, "hanning", True)
    with nn.auto_forward():
        a_r, a_i = F.stft(_v(x), *args, pad_mode)
        back = F.istft(_v(y_r), _v(y_i), *args, pad_mode, as_stft_backward=True)
        z = F.istft(_v(y_r), _v(y_i), *args, "constant")
        w = rng.randn(*z.shape)
        b_r, b_i = F.stft(_v(w), *args, "constant", as_istft_backward=True)
    assert back.shape == x.shape
    np.testing.assert_allclose(np.sum(a_r.d * y_r + a_i.d * y_i), np.sum(x * back.d), rtol=1e-10)
    np.testing.assert_allclose(np.sum(z.d * w), np.sum(y_r * b_r.d + y_i * b_i.d), rtol=1e-10)


def test_fft_then_ifft_gives_the_signal_back(rng):
    x = rng.randn(3, 4, 5, 2)
    with nn.auto_forward():
        for normalized in (False, True):
            z = F.ifft(F.fft(_v(x), 2, normalized), 2, normalized)
            np.testing.assert_allclose(z.d, x, atol=1e-12)


def test_istft_refuses_a_stride_whose_windows_leave_gaps():
    y = _v(np.zeros((1, 9, 5)))
    with pytest.raises(RuntimeError, match=r"NOLA\(Nonzero Overlap Add\) condition is not met"):
        F.istft(y, y, 16, 16, 16, "hanning", pad_mode="constant")
    F.istft(y, y, 16, 16, 16, "hanning", pad_mode="reflect", as_stft_backward=True)


def test_stft_in_istft_backward_mode_checks_as_istft_does():
    x = _v(np.zeros((1, 64)))
    with pytest.raises(DpnbError, match="NOLA"):
        F.stft(x, 16, 16, 16, "hanning", True, "constant", as_istft_backward=True)
    with pytest.raises(DpnbError, match='`pad_mode` must be "constant"'):
        F.stft(x, 16, 4, 16, as_istft_backward=True)
    with pytest.raises(DpnbError, match="multiple of stride"):
        F.stft(x, 16, 5, 16, "hanning", True, "constant", as_istft_backward=True)


def test_istft_needs_the_constant_pad_mode_as_nnabla_s():
    """nnabla's ISTFT refuses its own default pad_mode='reflect' outside the STFT-backward
    mode: the padding is cut off, never read."""
    y = _v(np.zeros((1, 9, 5)))
    with pytest.raises(DpnbError, match='`pad_mode` should be "constant"'):
        F.istft(y, y, 16, 4, 16)


@pytest.mark.parametrize("call, message", [
    (lambda x: F.stft(x, 16, 4, 8), "at least as large as window size"),
    (lambda x: F.stft(x, 16, 4, 16, "blackman"), "window_type must be one of"),
    (lambda x: F.stft(x, 16, 4, 16, pad_mode="edge"), "pad_mode must be one of"),
    (lambda x: F.stft(x, 0, 4, 16), "window_size must be >= 1"),
    (lambda x: F.stft(F.reshape(x, (1, 1, 64)), 16, 4, 16), r"shape \(batch, samples\)"),
    (lambda x: F.stft(x, 16, 4, 128, center=False), "fewer than fft_size"),
    (lambda x: F.istft(x, x, 16, 4, 16, pad_mode="constant"), "must both have shape"),
    (lambda x: F.fft(x, 1), "last axis of 2"),
    (lambda x: F.ifft(F.reshape(x, (1, 32, 2)), 4), "signal_ndim must be 1, 2 or 3"),
])
def test_bad_arguments_are_refused(call, message):
    with pytest.raises(DpnbError, match=message):
        call(_v(np.zeros((1, 64))))


def test_window_none_is_rectangular(rng):
    x = rng.randn(1, 64)
    with nn.auto_forward():
        a = F.stft(_v(x), 16, 4, 16, None)
        b = F.stft(_v(x), 16, 4, 16, "rectangular")
    np.testing.assert_array_equal(a[0].d, b[0].d)
    assert a[0].parent.info.args["window_type"] == "rectangular"


def test_grad_through_one_part_of_stft(rng):
    """nn.grad from the real part alone: the imaginary part's gradient is a float32 zero
    constant, which ISTFT (STFT's graph backward) takes beside a float64 one."""
    x = _v(rng.randn(2, 48), need_grad=True)
    y_r, _ = F.stft(x, 16, 4, 16)
    loss = F.sum(y_r ** 2)
    (g,) = nn.grad([loss], [x])
    g.forward()
    x.grad.zero()
    loss.forward()
    loss.backward()
    np.testing.assert_allclose(g.d, x.g, rtol=1e-10)
