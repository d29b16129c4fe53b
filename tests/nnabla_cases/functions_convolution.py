"""Convolution cases (see functions.py): convolution, deconvolution and their depthwise
forms over 1, 2 and 3 spatial axes, as functions and as parametric functions.

nnabla 1.39's CPU code refuses channel_last for (de)convolution, so those layouts are
checked in tests/test_functions_nn.py against the channel-first results recorded here."""
import numpy as np

from .functions import Case

R = np.random.RandomState(11)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


def conv(**options):
    return lambda lib, x, w, b: lib.F.convolution(x, w, b, **options)


def deconv(**options):
    return lambda lib, x, w, b: lib.F.deconvolution(x, w, b, **options)


CASES = [
    # convolution
    Case("convolution 2d", conv(), (u(1, 2, 5, 5), u(3, 2, 3, 3), u(3))),
    Case("convolution 2d no bias", lambda lib, x, w: lib.F.convolution(x, w),
         (u(2, 2, 4, 4), u(3, 2, 2, 3))),
    Case("convolution 2d pad stride", conv(pad=(1, 2), stride=(2, 1)),
         (u(1, 2, 5, 5), u(3, 2, 3, 3), u(3))),
    Case("convolution 2d dilation pad", conv(pad=(2, 1), dilation=(2, 1)),
         (u(1, 2, 5, 5), u(2, 2, 3, 3), u(2))),
    Case("convolution 2d group", conv(group=2, pad=(1, 1)),
         (u(1, 4, 4, 4), u(4, 2, 3, 3), u(4))),
    Case("convolution 2d group stride dilation", conv(group=2, stride=(2, 2), dilation=(1, 2),
                                                      pad=(1, 1)),
         (u(1, 4, 5, 5), u(6, 2, 2, 2), u(6))),
    Case("convolution 2d pad beyond kernel reach", conv(pad=(3, 0)),
         (u(1, 2, 4, 4), u(2, 2, 3, 2), u(2))),
    Case("convolution 2d pointwise group", conv(group=2), (u(2, 4, 3, 3), u(6, 2, 1, 1), u(6))),
    Case("convolution 2d pointwise stride", conv(stride=(2, 2)),
         (u(1, 2, 5, 5), u(3, 2, 1, 1), u(3))),
    Case("convolution 2d base_axis 2", conv(base_axis=2, pad=(1, 1)),
         (u(2, 2, 2, 4, 4), u(3, 2, 3, 3), u(3))),
    Case("convolution 2d base_axis 0", conv(base_axis=0), (u(2, 4, 4), u(3, 2, 2, 2), u(3))),
    Case("convolution 1d", conv(), (u(2, 2, 7), u(3, 2, 3), u(3))),
    Case("convolution 1d pad stride dilation group", conv(pad=(2,), stride=(2,), dilation=(2,),
                                                          group=2),
         (u(2, 4, 9), u(4, 2, 3), u(4))),
    Case("convolution 3d", conv(), (u(1, 2, 4, 3, 4), u(2, 2, 2, 2, 3), u(2))),
    Case("convolution 3d pad stride dilation", conv(pad=(1, 0, 1), stride=(2, 1, 1),
                                                    dilation=(1, 2, 1)),
         (u(1, 2, 4, 5, 3), u(2, 2, 2, 2, 2), u(2))),
    Case("convolution 3d group", conv(group=2, pad=(1, 1, 1)),
         (u(1, 4, 3, 3, 3), u(2, 2, 2, 2, 2), u(2))),
    # deconvolution
    Case("deconvolution 2d", deconv(), (u(1, 2, 3, 3), u(2, 3, 3, 3), u(3))),
    Case("deconvolution 2d no bias", lambda lib, x, w: lib.F.deconvolution(x, w),
         (u(2, 2, 3, 2), u(2, 2, 2, 3))),
    Case("deconvolution 2d pad stride output_padding", deconv(pad=(1, 1), stride=(2, 3),
                                                              output_padding=(1, 2)),
         (u(1, 2, 3, 3), u(2, 3, 3, 3), u(3))),
    Case("deconvolution 2d dilation", deconv(dilation=(2, 1), pad=(1, 0)),
         (u(1, 2, 3, 3), u(2, 2, 2, 3), u(2))),
    Case("deconvolution 2d group", deconv(group=2, stride=(2, 2)),
         (u(1, 4, 3, 3), u(4, 1, 3, 3), u(2))),
    Case("deconvolution 2d pad beyond kernel reach", deconv(pad=(2, 0)),
         (u(1, 2, 4, 3), u(2, 2, 2, 2), u(2))),
    Case("deconvolution 2d pointwise", deconv(), (u(2, 4, 3, 3), u(4, 3, 1, 1), u(3))),
    Case("deconvolution 2d base_axis 2", deconv(base_axis=2, stride=(2, 1)),
         (u(2, 1, 2, 3, 3), u(2, 2, 2, 2), u(2))),
    Case("deconvolution 1d", deconv(stride=(2,), output_padding=(1,)),
         (u(2, 2, 4), u(2, 3, 3), u(3))),
    Case("deconvolution 1d group dilation pad", deconv(group=2, dilation=(2,), pad=(1,)),
         (u(1, 4, 4), u(4, 2, 3), u(4))),
    Case("deconvolution 3d", deconv(stride=(2, 1, 1), pad=(1, 0, 1), output_padding=(1, 0, 0)),
         (u(1, 2, 3, 2, 3), u(2, 2, 2, 2, 3), u(2))),
    # depthwise
    Case("depthwise_convolution 2d",
         lambda lib, x, w, b: lib.F.depthwise_convolution(x, w, b),
         (u(1, 2, 5, 5), u(2, 3, 3), u(2))),
    Case("depthwise_convolution 2d multiplier pad stride dilation",
         lambda lib, x, w, b: lib.F.depthwise_convolution(x, w, b, pad=(1, 1), stride=(2, 1),
                                                          dilation=(1, 2), multiplier=2),
         (u(1, 2, 5, 5), u(4, 3, 3), u(4))),
    Case("depthwise_convolution 1d no bias base_axis 2",
         lambda lib, x, w: lib.F.depthwise_convolution(x, w, base_axis=2, multiplier=3),
         (u(2, 1, 2, 6), u(6, 3))),
    Case("depthwise_deconvolution 2d",
         lambda lib, x, w, b: lib.F.depthwise_deconvolution(x, w, b),
         (u(1, 2, 3, 3), u(2, 3, 3), u(2))),
    Case("depthwise_deconvolution 2d divisor pad stride dilation",
         lambda lib, x, w, b: lib.F.depthwise_deconvolution(x, w, b, pad=(1, 0), stride=(2, 2),
                                                            dilation=(1, 2), divisor=2),
         (u(1, 4, 3, 3), u(4, 2, 3), u(2))),
    Case("depthwise_deconvolution 1d no bias",
         lambda lib, x, w: lib.F.depthwise_deconvolution(x, w, divisor=3, stride=(2,)),
         (u(2, 3, 4), u(3, 2))),
    # parametric
    Case("PF.convolution 1d", lambda lib, x: lib.PF.convolution(x, 3, (3,), pad=(1,)),
         (u(2, 2, 5),)),
    Case("PF.convolution 2d group stride name",
         lambda lib, x: lib.PF.convolution(x, 4, (2, 2), stride=(2, 1), group=2, name="c1"),
         (u(1, 4, 4, 4),)),
    Case("PF.convolution 3d no bias",
         lambda lib, x: lib.PF.convolution(x, 2, (2, 2, 2), dilation=(1, 2, 1), with_bias=False),
         (u(1, 2, 3, 4, 3),)),
    Case("PF.deconvolution 2d", lambda lib, x: lib.PF.deconvolution(x, 3, (3, 3)),
         (u(1, 2, 3, 3),)),
    Case("PF.deconvolution 2d group stride output_padding",
         lambda lib, x: lib.PF.deconvolution(x, 4, (3, 3), pad=(1, 1), stride=(2, 2), group=2,
                                             output_padding=(1, 0), name="up"),
         (u(1, 4, 3, 3),)),
    Case("PF.deconvolution 1d no bias",
         lambda lib, x: lib.PF.deconvolution(x, 2, (2,), stride=(2,), with_bias=False),
         (u(2, 3, 3),)),
    Case("PF.deconvolution 3d", lambda lib, x: lib.PF.deconvolution(x, 2, (2, 2, 2)),
         (u(1, 2, 2, 3, 2),)),
    Case("PF.depthwise_convolution",
         lambda lib, x: lib.PF.depthwise_convolution(x, (3, 3), pad=(1, 1), multiplier=2),
         (u(1, 2, 4, 4),)),
    Case("PF.depthwise_convolution 1d no bias name",
         lambda lib, x: lib.PF.depthwise_convolution(x, (3,), with_bias=False, name="dw"),
         (u(2, 3, 6),)),
    Case("PF.depthwise_deconvolution",
         lambda lib, x: lib.PF.depthwise_deconvolution(x, (3, 3), stride=(2, 2), divisor=2),
         (u(1, 4, 3, 3),)),
    Case("PF.depthwise_deconvolution 1d",
         lambda lib, x: lib.PF.depthwise_deconvolution(x, (2,), pad=(1,)), (u(2, 2, 5),)),
]
