"""Deformable convolution (DCN, and DCNv2 with a mask) and adaptive separable convolution
cases (see functions.py), as functions and as the parametric function.

Offsets keep at least 0.1 from whole numbers: the bilinear sampling has kinks there,
where float32 and float64 or finite differences would part.  Every float input takes a
gradient: nnabla 1.39 leaves the mask out of the other inputs' gradients when the mask
takes none, and gives the offset a gradient only when x takes one (its CPU kernel's
shortcuts, not the derivative), which dpnb does not copy."""
import numpy as np

from .functions import Case

R = np.random.RandomState(5)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


def offsets(*shape, reach=1.9):
    """Offsets in [-reach, reach], none within 0.1 of a whole number."""
    o = R.uniform(-reach, reach, shape)
    near = np.abs(o - np.round(o)) < 0.1
    return np.where(near, o + 0.5, o).astype(np.float32)


def deform(**options):
    return lambda lib, x, w, o, *b: lib.F.deformable_convolution(x, w, o, None, *b, **options)


def deform_mask(**options):
    return lambda lib, x, w, o, m, *b: lib.F.deformable_convolution(x, w, o, m, *b, **options)


def separable(lib, x, kv, kh):
    return lib.F.adaptive_separable_convolution(x, kv, kh)


CASES = [
    Case("deformable_convolution 3x3", deform_mask(),
         (u(1, 2, 5, 5), u(2, 2, 3, 3), offsets(1, 18, 5, 5), u(1, 9, 5, 5, low=0.0))),
    Case("deformable_convolution no mask bias", deform(),
         (u(2, 2, 4, 5), u(3, 2, 2, 2), offsets(2, 8, 4, 5), u(3))),
    Case("deformable_convolution mask bias pad", deform_mask(pad=(1, 1)),
         (u(1, 2, 4, 4), u(2, 2, 3, 3), offsets(1, 18, 4, 4), u(1, 9, 4, 4, low=0.0), u(2))),
    Case("deformable_convolution group deformable_group",
         deform_mask(group=2, deformable_group=2),
         (u(1, 4, 5, 5), u(4, 2, 3, 2), offsets(1, 24, 5, 5), u(1, 12, 5, 5, low=0.0), u(4))),
    Case("deformable_convolution pad stride dilation",
         deform_mask(pad=(1, 1), stride=(1, 2), dilation=(2, 1)),
         (u(2, 2, 5, 7), u(2, 2, 3, 3), offsets(2, 18, 5, 7), u(2, 9, 5, 7, low=0.0), u(2))),
    Case("deformable_convolution deformable_group 2 no mask stride",
         deform(pad=(1, 1), stride=(2, 2), deformable_group=2),
         (u(1, 4, 5, 6), u(2, 4, 3, 3), offsets(1, 36, 5, 6, reach=2.6))),
    # nnabla's defaults of pad, stride and dilation count axes wrongly for a negative base_axis
    Case("deformable_convolution group 2 base_axis -3",
         deform_mask(group=2, base_axis=-3, pad=(0, 0), stride=(1, 1), dilation=(1, 1)),
         (u(2, 2, 4, 4), u(2, 1, 2, 2), offsets(2, 8, 4, 4), u(2, 4, 4, 4, low=0.0))),
    Case("deformable_convolution samples far outside", deform_mask(),
         (u(1, 1, 4, 4), u(1, 1, 2, 2), offsets(1, 8, 4, 4, reach=4.6),
          u(1, 4, 4, 4, low=0.0))),
    Case("PF.deformable_convolution",
         lambda lib, x, o, m: lib.PF.deformable_convolution(x, 3, (3, 3), o, m, pad=(1, 1)),
         (u(1, 2, 4, 4), offsets(1, 18, 4, 4), u(1, 9, 4, 4, low=0.0))),
    Case("PF.deformable_convolution no bias group named",
         lambda lib, x, o: lib.PF.deformable_convolution(x, 4, (2, 2), o, group=2,
                                                         with_bias=False, name="dcn"),
         (u(1, 2, 4, 4), offsets(1, 8, 4, 4))),
    Case("adaptive_separable_convolution", separable,
         (u(1, 2, 6, 5), u(1, 3, 4, 4), u(1, 2, 4, 4))),
    # nnabla leaves the kernels' gradients past the output's size unwritten (memory as it
    # was): only x's gradient is compared
    Case("adaptive_separable_convolution kernels larger than the output", separable,
         (u(2, 2, 6, 5), u(2, 3, 5, 5), u(2, 2, 4, 5)), need_grad=(True, False, False)),
]
