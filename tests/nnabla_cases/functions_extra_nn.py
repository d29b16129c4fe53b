"""Fused convolution and patch correlation cases (see functions.py).  nnabla's CPU
convolution has no channel_last, so fused_convolution's channel_last is checked
against the channel-first form in test_functions_more.py."""
import numpy as np

from .functions import Case

R = np.random.RandomState(18)


def u(*shape, low=-1.0, high=1.0):
    return R.uniform(low, high, shape).astype(np.float32)


X, W, B = u(2, 2, 5, 5), u(3, 2, 3, 3), u(3)
STATS = (u(1, 3, 1, 1), u(1, 3, 1, 1), u(1, 3, 1, 1), u(1, 3, 1, 1, low=0.5, high=1.5))


def fused(**options):
    return lambda lib, x, w, b: lib.F.fused_convolution(x, w, b, **options)


def fused_bn(**options):
    def build(lib, x, w, beta, gamma, mean, var, *z):
        return lib.F.fused_convolution(x, w, None, beta, gamma, mean, var, *z, **options)
    return build


NO_STAT_GRAD = (True, True, True, True, False, False)

CASES = [
    # the relu cases keep the pre-activations away from 0 by the inputs' spread
    Case("fused_convolution bias relu", fused(), (X, W, B)),
    Case("fused_convolution no bias", lambda lib, x, w: lib.F.fused_convolution(x, w), (X, W)),
    Case("fused_convolution batch norm", fused_bn(), (X, W) + STATS, need_grad=NO_STAT_GRAD,
         fd=False),  # the running statistics move on every forward
    Case("fused_convolution batch norm inference", fused_bn(batch_stat=False, nonlinearity="tanh"),
         (X, W) + STATS, need_grad=NO_STAT_GRAD),
    Case("fused_convolution batch norm decay eps z",
         fused_bn(decay_rate=0.5, eps=0.01, nonlinearity="identity"),
         (X, W) + STATS + (u(2, 3, 3, 3),), need_grad=NO_STAT_GRAD + (True,), fd=False),
    Case("fused_convolution residual", lambda lib, x, w, b, z: lib.F.fused_convolution(
        x, w, b, z=z, nonlinearity="sigmoid"), (X, W, B, u(2, 3, 3, 3))),
    Case("fused_convolution conv pad", fused(pad=(1, 2), nonlinearity="tanh"), (X, W, B)),
    Case("fused_convolution pad widths", fused(pad=(1, 0, 2, 1), nonlinearity="identity"),
         (X, W, B)),
    Case("fused_convolution reflect", fused(pad=(1, 1), pad_mode="reflect",
                                            nonlinearity="identity"), (X, W, B)),
    Case("fused_convolution constant_value", fused(pad=(1, 1), constant_value=2.0,
                                                   nonlinearity="sigmoid"), (X, W, B)),
    Case("fused_convolution leaky_relu", fused(nonlinearity="leaky_relu", nonlinearity_args=[0.2]),
         (X, W, B)),
    Case("fused_convolution elu", fused(nonlinearity="elu", nonlinearity_args=[0.5]), (X, W, B)),
    Case("fused_convolution relu6", fused(nonlinearity="relu6"), (X * 8, W, B), fd=False),
    Case("fused_convolution stride dilation group",
         fused(stride=(2, 1), dilation=(1, 2), group=2, nonlinearity="tanh"),
         (u(1, 4, 7, 7), u(2, 2, 3, 3), u(2))),
    Case("fused_convolution base_axis 2", fused(base_axis=2, nonlinearity="identity"),
         (u(2, 1, 2, 4, 4), W, B)),
    Case("patch_correlation", lambda lib, a, b: lib.F.patch_correlation(a, b),
         (u(1, 2, 3, 4), u(1, 2, 3, 4))),
    Case("patch_correlation shift", lambda lib, a, b: lib.F.patch_correlation(a, b, shift=1),
         (u(2, 2, 3, 4), u(2, 2, 3, 4))),
    Case("patch_correlation shift steps",
         lambda lib, a, b: lib.F.patch_correlation(a, b, shift=(1, 2), shift_step=(1, 2)),
         (u(1, 2, 4, 5), u(1, 2, 4, 5))),
    Case("patch_correlation patch steps",
         lambda lib, a, b: lib.F.patch_correlation(a, b, patch=(2, 3), patch_step=(2, 1)),
         (u(1, 2, 4, 5), u(1, 2, 4, 5))),
    Case("patch_correlation padding int", lambda lib, a, b: lib.F.patch_correlation(
        a, b, patch=3, padding=1), (u(1, 1, 3, 4), u(1, 1, 3, 4))),
    Case("patch_correlation padding pair", lambda lib, a, b: lib.F.patch_correlation(
        a, b, padding=(1, 2), shift=(1, 0)), (u(1, 2, 3, 3), u(1, 2, 3, 3))),
    Case("patch_correlation everything", lambda lib, a, b: lib.F.patch_correlation(
        a, b, patch=2, shift=(2, 1), patch_step=(1, 2), shift_step=2, padding=(0, 1, 2, 1)),
        (u(1, 2, 4, 5), u(1, 2, 4, 5))),
    Case("patch_correlation channel_last", lambda lib, a, b: lib.F.patch_correlation(
        a, b, patch=(1, 2), shift=1, channel_last=True), (u(1, 3, 4, 2), u(1, 3, 4, 2))),
]
