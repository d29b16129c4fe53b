"""Binary network cases (see functions.py): the binary activations and the binary
connect / weight affine and convolution, as functions and as parametric functions.

Their gradients are straight-through estimates, not derivatives of the forward, so every
case skips the finite-difference check (fd=False); tests/test_grad.py checks their
gradient graphs against their backward instead.  binary_weight and alpha are written by
forward, so the results hold them too."""
import numpy as np

from .functions import Case

R = np.random.RandomState(12)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


def with_zeros(*shape):
    """Weights with some exact zeros, where quantize_zero_to decides the sign."""
    w = u(*shape)
    w.reshape(-1)[::5] = 0
    return w


def away(*shape):
    """Inputs of the activations away from their kinks at 0 and +-1, and two zeros."""
    x = R.uniform(-2, 2, shape).astype(np.float32)
    x[np.abs(np.abs(x) - 1) < 0.05] += 0.1
    x[np.abs(x) < 0.05] = 0.3
    x.reshape(-1)[:2] = 0
    return x


NO_GRAD = (True, True, False, True)  # binary_weight gets no gradient
NO_GRAD_SCALED = (True, True, False, False, True)  # nor does alpha

CASES = [
    Case("binary_sigmoid", lambda lib, x: lib.F.binary_sigmoid(x), (away(3, 4),), fd=False),
    Case("binary_tanh", lambda lib, x: lib.F.binary_tanh(x), (away(3, 4),), fd=False),
    Case("binary_connect_affine",
         lambda lib, x, w, wb, b: lib.F.binary_connect_affine(x, w, wb, b),
         (u(2, 3), with_zeros(3, 4), np.zeros((3, 4), np.float32), u(4)),
         fd=False, need_grad=NO_GRAD),
    Case("binary_connect_affine base_axis 2 zero to 0",
         lambda lib, x, w, wb: lib.F.binary_connect_affine(x, w, wb, base_axis=2,
                                                          quantize_zero_to=0.0),
         (u(2, 2, 3), with_zeros(3, 2, 2), np.zeros((3, 2, 2), np.float32)),
         fd=False, need_grad=(True, True, False)),
    Case("binary_weight_affine",
         lambda lib, x, w, wb, a, b: lib.F.binary_weight_affine(x, w, wb, a, b),
         (u(2, 3), with_zeros(3, 4), np.zeros((3, 4), np.float32), np.zeros(4, np.float32),
          u(4)), fd=False, need_grad=NO_GRAD_SCALED),
    Case("binary_weight_affine outputs (2, 3) alpha flat zero to -1",
         lambda lib, x, w, wb, a: lib.F.binary_weight_affine(x, w, wb, a,
                                                             quantize_zero_to=-1.0),
         (u(2, 4), with_zeros(4, 2, 3), np.zeros((4, 2, 3), np.float32),
          np.zeros(6, np.float32)), fd=False, need_grad=(True, True, False, False)),
    Case("binary_connect_convolution",
         lambda lib, x, w, wb, b: lib.F.binary_connect_convolution(x, w, wb, b, pad=(1, 0),
                                                                   stride=(1, 2)),
         (u(2, 2, 4, 5), with_zeros(3, 2, 2, 3), np.zeros((3, 2, 2, 3), np.float32), u(3)),
         fd=False, need_grad=NO_GRAD),
    Case("binary_weight_convolution group dilation",
         lambda lib, x, w, wb, a, b: lib.F.binary_weight_convolution(
             x, w, wb, a, b, dilation=(2, 1), group=2, quantize_zero_to=0.0),
         (u(1, 4, 5, 4), with_zeros(2, 2, 2, 2), np.zeros((2, 2, 2, 2), np.float32),
          np.zeros(2, np.float32), u(2)), fd=False, need_grad=NO_GRAD_SCALED),
    Case("PF.binary_connect_affine", lambda lib, x: lib.PF.binary_connect_affine(x, 3),
         (u(2, 4),), fd=False),
    Case("PF.binary_weight_affine n_outmaps tuple named",
         lambda lib, x: lib.PF.binary_weight_affine(x, (2, 3), name="bw"), (u(2, 2, 2),),
         fd=False),
    Case("PF.binary_connect_convolution",
         lambda lib, x: lib.PF.binary_connect_convolution(x, 3, (2, 2), pad=(1, 1)),
         (u(2, 2, 4, 4),), fd=False),
    Case("PF.binary_weight_convolution no bias",
         lambda lib, x: lib.PF.binary_weight_convolution(x, 2, (3, 3), with_bias=False),
         (u(1, 3, 4, 4),), fd=False),
]
