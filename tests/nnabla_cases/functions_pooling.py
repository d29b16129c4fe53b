"""Pooling cases (see functions.py): max, average and sum pooling over 2 and 3 axes,
unpooling, global average pooling and interpolation.

nnabla 1.39's CPU code pools 2 or 3 axes only and refuses channel_last for pooling,
unpooling and interpolation; dpnb's 1-D pooling and channel-last layouts are checked in
tests/test_functions_pooling.py against loops and the channel-first results."""
import numpy as np

from .functions import Case

R = np.random.RandomState(12)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


def distinct(*shape):
    """Distinct values at least 0.02 apart (no ties for the maximum, no kinks for finite
    differences), in a random order."""
    n = int(np.prod(shape))
    return (R.permutation(n) * 0.02 - 0.01 * n).reshape(shape).astype(np.float32)


def pool(fn, *args, **options):
    return lambda lib, x: getattr(lib.F, fn)(x, *args, **options)


CASES = [
    # max_pooling
    Case("max_pooling 2d", pool("max_pooling", (2, 2)), (distinct(1, 2, 5, 5),)),
    Case("max_pooling 2d overlapping stride", pool("max_pooling", (3, 2), stride=(1, 2)),
         (distinct(1, 2, 5, 5),)),
    Case("max_pooling 2d pad", pool("max_pooling", (2, 3), pad=(1, 2)),
         (distinct(1, 2, 5, 5),)),
    Case("max_pooling 2d ignore_border False", pool("max_pooling", (3, 3), stride=(2, 2),
                                                    ignore_border=False),
         (distinct(1, 2, 6, 5),)),
    Case("max_pooling 2d ignore_border False pad", pool("max_pooling", (2, 2), pad=(1, 1),
                                                        ignore_border=False),
         (distinct(2, 1, 4, 5),)),
    Case("max_pooling 2d of 3-d input", pool("max_pooling", (2, 2)), (distinct(2, 4, 5),)),
    Case("max_pooling 3d", pool("max_pooling", (2, 2, 2)), (distinct(1, 2, 4, 4, 4),)),
    Case("max_pooling 3d stride pad", pool("max_pooling", (2, 3, 2), stride=(1, 2, 2),
                                          pad=(1, 1, 0)),
         (distinct(1, 1, 3, 4, 4),)),
    # average_pooling
    Case("average_pooling 2d", pool("average_pooling", (2, 2)), (u(1, 2, 5, 5),)),
    Case("average_pooling 2d pad including_pad",
         pool("average_pooling", (3, 3), stride=(2, 2), pad=(1, 2)), (u(1, 2, 5, 5),)),
    Case("average_pooling 2d pad excluding pad",
         pool("average_pooling", (3, 3), stride=(2, 2), pad=(1, 2), including_pad=False),
         (u(1, 2, 5, 5),)),
    Case("average_pooling 2d ignore_border False",
         pool("average_pooling", (3, 2), stride=(2, 2), ignore_border=False), (u(1, 2, 6, 5),)),
    Case("average_pooling 2d ignore_border False pad excluding pad",
         pool("average_pooling", (2, 2), pad=(1, 1), ignore_border=False, including_pad=False),
         (u(1, 2, 4, 5),)),
    Case("average_pooling 3d pad", pool("average_pooling", (2, 2, 2), pad=(1, 0, 1)),
         (u(1, 2, 3, 4, 3),)),
    Case("average_pooling 3d excluding pad overlapping",
         pool("average_pooling", (2, 2, 2), stride=(1, 1, 2), pad=(1, 1, 1),
              including_pad=False), (u(1, 1, 3, 3, 4),)),
    # sum_pooling
    Case("sum_pooling 2d", pool("sum_pooling", (2, 2)), (u(1, 2, 5, 5),)),
    Case("sum_pooling 2d pad stride", pool("sum_pooling", (3, 2), stride=(2, 1), pad=(1, 1)),
         (u(1, 2, 5, 5),)),
    Case("sum_pooling 2d ignore_border False", pool("sum_pooling", (2, 3), ignore_border=False),
         (u(2, 1, 5, 5),)),
    Case("sum_pooling 3d", pool("sum_pooling", (2, 1, 2), pad=(1, 0, 0)),
         (u(1, 2, 3, 3, 4),)),
    # unpooling
    Case("unpooling 2d", pool("unpooling", (2, 3)), (u(1, 2, 3, 3),)),
    Case("unpooling 1d", pool("unpooling", (2,)), (u(1, 2, 3),)),
    Case("unpooling 3d", pool("unpooling", (2, 1, 3)), (u(1, 2, 2, 2, 2),)),
    Case("unpooling 2d of 5-d input", pool("unpooling", (1, 2)), (u(2, 1, 2, 2, 3),)),
    # global_average_pooling
    Case("global_average_pooling 4d", pool("global_average_pooling"), (u(2, 3, 4, 4),)),
    Case("global_average_pooling 3d", pool("global_average_pooling"), (u(2, 3, 4),)),
    Case("global_average_pooling 2d", pool("global_average_pooling"), (u(2, 3),)),
    # nnabla 1.39 averages wrong elements for more than 4 axes; dpnb refuses those.
    # interpolate
    Case("interpolate linear scale", pool("interpolate", scale=(2, 2)), (u(1, 2, 3, 3),)),
    Case("interpolate linear output_size", pool("interpolate", output_size=(5, 2)),
         (u(1, 2, 3, 4),)),
    Case("interpolate linear align_corners", pool("interpolate", output_size=(5, 7),
                                                  align_corners=True), (u(1, 1, 3, 4),)),
    Case("interpolate linear half_pixel", pool("interpolate", output_size=(7, 3),
                                               half_pixel=True), (u(1, 2, 3, 4),)),
    Case("interpolate linear fractional scale", pool("interpolate", scale=(1.5, 0.7)),
         (u(2, 1, 4, 5),)),
    Case("interpolate linear half_pixel_for_nn", pool("interpolate", output_size=(4, 6),
                                                      half_pixel_for_nn=True),
         (u(1, 1, 3, 3),)),
    Case("interpolate linear 1d", pool("interpolate", output_size=(7,)), (u(2, 2, 4),)),
    Case("interpolate linear 1d align_corners", pool("interpolate", output_size=(3,),
                                                     align_corners=True), (u(1, 2, 5),)),
    Case("interpolate linear 3d", pool("interpolate", output_size=(3, 4, 3)),
         (u(1, 1, 2, 3, 2),)),
    Case("interpolate linear 3d half_pixel", pool("interpolate", scale=(2, 1, 1.5),
                                                  half_pixel=True), (u(1, 1, 2, 2, 2),)),
    Case("interpolate linear output size 1", pool("interpolate", output_size=(1, 3),
                                                  half_pixel=True), (u(1, 1, 3, 3),)),
    Case("interpolate nearest scale", pool("interpolate", scale=(2, 2), mode="nearest"),
         (u(1, 2, 3, 3),)),
    Case("interpolate nearest output_size", pool("interpolate", output_size=(5, 7),
                                                 mode="nearest"), (u(1, 1, 4, 3),)),
    Case("interpolate nearest align_corners", pool("interpolate", output_size=(8, 3),
                                                   mode="nearest", align_corners=True),
         (u(1, 1, 4, 4),)),
    Case("interpolate nearest half_pixel", pool("interpolate", output_size=(7, 5),
                                                mode="nearest", half_pixel=True),
         (u(1, 1, 4, 3),)),
    Case("interpolate nearest half_pixel_for_nn", pool("interpolate", output_size=(7, 2),
                                                       mode="nearest", half_pixel_for_nn=True),
         (u(1, 1, 4, 4),)),
    Case("interpolate nearest half_pixel_for_nn align_corners",
         pool("interpolate", output_size=(3, 5), mode="nearest", half_pixel_for_nn=True,
              align_corners=True), (u(1, 1, 4, 3),)),
    Case("interpolate nearest 1d downsample", pool("interpolate", output_size=(3,),
                                                   mode="nearest"), (u(2, 1, 7),)),
    Case("interpolate nearest 3d", pool("interpolate", scale=(2, 1.5, 1), mode="nearest"),
         (u(1, 1, 2, 2, 3),)),
    Case("interpolate nearest output size 1 half_pixel_for_nn",
         pool("interpolate", output_size=(1,), mode="nearest", half_pixel_for_nn=True),
         (u(1, 2, 4),)),
]
