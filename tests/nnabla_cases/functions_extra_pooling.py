"""Cases of max pooling's gradient as a function and of ONNX's Resize (see functions.py).
nnabla's CPU build runs neither max pooling over one axis or with channel_last nor
onnx_resize's backward nor more than 3 resized axes, so those are checked in
test_functions_more.py (against dpnb's own max pooling and by finite differences)."""
import numpy as np

from .functions import Case

R = np.random.RandomState(17)


def distinct(*shape):
    """Values at least 0.05 apart, so every window has one clear maximum."""
    size = int(np.prod(shape))
    return (R.permutation(size) * 0.05 - size * 0.025).reshape(shape).astype(np.float32)


def u(*shape):
    return R.uniform(-1, 1, shape).astype(np.float32)


def mpb(**options):
    def build(lib, dy, x):
        return lib.F.max_pooling_backward(dy, x, **options)
    return build


RAMP = np.arange(1, 7, dtype=np.float32).reshape(1, 1, 1, 6)
IMAGE = u(1, 2, 3, 4)
TRANSFORMS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
              "tf_half_pixel_for_nn", "tf_crop_and_resize")
ROI = (0, 0, 0.1, 0.2, 1, 1, 0.8, 0.9)


def resize(**options):
    if options.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        options.setdefault("roi", ROI)
    return lambda lib, x: lib.F.onnx_resize(x, **options)


CASES = [
    Case("max_pooling_backward", mpb(kernel=(2, 2)), (u(1, 2, 2, 2), distinct(1, 2, 4, 4))),
    Case("max_pooling_backward overlapping stride", mpb(kernel=(3, 3), stride=(2, 2)),
         (u(1, 1, 2, 2), distinct(1, 1, 5, 5))),
    Case("max_pooling_backward ignore_border False", mpb(kernel=(2, 2), ignore_border=False),
         (u(2, 1, 3, 2), distinct(2, 1, 5, 4))),
    Case("max_pooling_backward pad", mpb(kernel=(3, 2), stride=(1, 2), pad=(1, 1)),
         (u(1, 2, 4, 3), distinct(1, 2, 4, 4))),
    Case("max_pooling_backward 3d", mpb(kernel=(2, 1, 2)),
         (u(1, 1, 1, 3, 1), distinct(1, 1, 2, 3, 2))),
]
for mode in ("nearest", "linear", "cubic"):
    for transform in TRANSFORMS:
        CASES.append(Case(f"onnx_resize {mode} {transform}",
                          resize(scales=(1, 1, 1.5, 1.75), mode=mode,
                                 coordinate_transformation_mode=transform),
                          (IMAGE,), grad=False))
for nearest_mode in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
    CASES.append(Case(f"onnx_resize nearest {nearest_mode}",
                      resize(scales=(1, 1, 1, 2), nearest_mode=nearest_mode,
                             coordinate_transformation_mode="asymmetric"), (RAMP,), grad=False))
CASES += [
    Case("onnx_resize default", resize(scales=(1, 1, 2, 2)), (IMAGE,), grad=False),
    Case("onnx_resize sizes", resize(sizes=(1, 2, 5, 3), mode="linear"), (IMAGE,), grad=False),
    Case("onnx_resize down linear", resize(scales=(1, 1, 0.5, 0.5), mode="linear"),
         (u(1, 1, 4, 6),), grad=False),
    Case("onnx_resize channels", resize(scales=(1, 2, 1.5, 1)), (IMAGE,), grad=False),
    Case("onnx_resize channels unscaled trailing axes",
         resize(scales=(1, 2, 1, 1), mode="linear",
                coordinate_transformation_mode="tf_half_pixel_for_nn"), (IMAGE,), grad=False),
    Case("onnx_resize cubic_coeff_a", resize(scales=(1, 1, 1, 1.5), mode="cubic",
                                             cubic_coeff_a=-0.5), (RAMP,), grad=False),
    Case("onnx_resize exclude_outside", resize(scales=(1, 1, 2, 1.5), mode="cubic",
                                               exclude_outside=1), (IMAGE,), grad=False),
    Case("onnx_resize extrapolation_value",
         resize(scales=(1, 1, 1, 1.5), mode="linear",
                coordinate_transformation_mode="tf_crop_and_resize",
                roi=(0, 0, 0, -0.2, 1, 1, 1, 1.2), extrapolation_value=-9.0), (RAMP,), grad=False),
    Case("onnx_resize crop nearest extrapolation",
         resize(sizes=(1, 2, 4, 5), coordinate_transformation_mode="tf_crop_and_resize",
                roi=(0, 0, -0.3, 0.1, 1, 1, 0.7, 1.4), extrapolation_value=2.0), (IMAGE,),
         grad=False),
    Case("onnx_resize crop of a scaled axis only",
         resize(scales=(1, 1, 2, 1), mode="linear",
                coordinate_transformation_mode="tf_crop_and_resize",
                roi=(0, 0, 0.1, 0.2, 1, 1, 0.9, 0.6)), (IMAGE,), grad=False),
    Case("onnx_resize 1d sizes cubic", resize(sizes=(7,), mode="cubic"), (u(4),), grad=False),
]
