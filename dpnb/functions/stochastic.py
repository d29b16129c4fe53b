"""Random functions: dropout and image augmentation.

Random numbers are drawn with NumPy on the host (the process-wide
``dpnb.random.prng`` for ``seed=-1``, else a generator of the function's own)
and moved to the device, so CPU and GPU runs with the same seed agree."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import random as _random
from ..graph import Function, Variable

__all__ = ["dropout", "image_augmentation"]


def _generator(seed: int) -> np.random.RandomState:
    """The default generator for ``seed=-1``, else a new one seeded with ``seed``."""
    return _random.prng if seed == -1 else np.random.RandomState(seed)


class Dropout(Function):
    """Zero each element with probability ``p`` and scale the rest by 1 / (1 - p);
    the gradient uses the same mask."""

    grad_depends_on_inputs = False

    def __init__(self, p: float, seed: int):
        self.p = float(p)
        self.seed = int(seed)

    def setup(self, inputs):
        (x,) = inputs
        if not 0 <= self.p < 1:
            raise self.error(f"p, the probability of dropping an element, must be in [0, 1), "
                             f"got {self.p}")
        self.rng = _generator(self.seed)
        return [(x.shape, x.dtype)]

    def forward(self, xp, xs):
        x = xs[0]
        self.mask = xp.asarray(self.rng.random_sample(x.shape) >= self.p)
        y = x * self.mask
        y *= 1 / (1 - self.p)
        return (y,)

    def backward(self, xp, xs, ys, gys, need_grads):
        gx = gys[0] * self.mask
        gx *= 1 / (1 - self.p)
        return (gx,)


def dropout(x: Variable, p: float = 0.5, seed: int = -1) -> Variable:
    """Randomly zero elements with probability ``p`` (a new mask at every forward)."""
    return Dropout(p, seed)(x)


class ImageAugmentation(Function):
    """Random crop, scale, rotation, flips, brightness, contrast, distortion and noise,
    drawn per image; the images are the last two axes, the channels the third-last.

    It follows nnabla's sampling: every output pixel maps back to a point of the
    (implicitly padded) input, read by bilinear interpolation with coordinates
    clamped to the border.  Not differentiable."""

    differentiable = False

    def __init__(self, shape, pad, min_scale, max_scale, angle, aspect_ratio, distortion, flip_lr,
                 flip_ud, brightness, brightness_each, contrast, contrast_center, contrast_each,
                 noise, seed):
        self.shape = shape
        self.pad = tuple(int(p) for p in pad)
        self.min_scale, self.max_scale = float(min_scale), float(max_scale)
        self.angle = float(angle)
        self.aspect_ratio = float(aspect_ratio)
        self.distortion = float(distortion)
        self.flip_lr, self.flip_ud = bool(flip_lr), bool(flip_ud)
        self.brightness, self.brightness_each = float(brightness), bool(brightness_each)
        self.contrast, self.contrast_center = float(contrast), float(contrast_center)
        self.contrast_each = bool(contrast_each)
        self.noise = float(noise)
        self.seed = int(seed)

    def setup(self, inputs):
        (x,) = inputs
        if x.ndim < 2:
            raise self.error(f"expected images with at least 2 axes (..., H, W), "
                             f"got shape {x.shape}")
        shape = x.shape if self.shape is None else tuple(int(s) for s in self.shape)
        if (not 2 <= len(shape) <= x.ndim or min(shape) < 1
                or shape[:-2] != x.shape[x.ndim - len(shape):-2]):
            raise self.error(f"shape is the output's (..., H, W): 2 to {x.ndim} positive sizes "
                             f"whose leading entries match the input shape {x.shape}, "
                             f"got {shape}")
        if len(self.pad) != 2 or min(self.pad) < 0:
            raise self.error(f"pad must be two sizes >= 0 (height, width), got {self.pad}")
        if not 0 < self.min_scale <= self.max_scale:
            raise self.error(f"expected 0 < min_scale <= max_scale, got "
                             f"min_scale={self.min_scale}, max_scale={self.max_scale}")
        if self.aspect_ratio <= 0 or self.contrast <= 0 or self.noise < 0:
            raise self.error(f"aspect_ratio and contrast must be > 0 and noise >= 0, got "
                             f"aspect_ratio={self.aspect_ratio}, contrast={self.contrast}, "
                             f"noise={self.noise}")
        self.rng = _generator(self.seed)
        self.out_shape = x.shape[:x.ndim - 2] + shape[-2:]
        return [(self.out_shape, x.dtype)]

    def _draw(self, n_images: int, channels: int) -> dict:
        """The random parameters of each image (host arrays), in a fixed order of draws."""
        u = self.rng.random_sample((9, n_images))
        ratio = np.log(self.aspect_ratio)
        params = dict(
            scale=self.min_scale * np.exp(u[0] * np.log(self.max_scale / self.min_scale)),
            scale_x=np.exp((u[1] - 0.5) * ratio),
            angle=(2 * u[2] - 1) * self.angle,
            corner_x=u[3], corner_y=u[4],
            mirror_x=np.where(self.flip_lr & (u[5] < 0.5), -1.0, 1.0),
            mirror_y=np.where(self.flip_ud & (u[6] < 0.5), -1.0, 1.0),
            distortion=np.exp((2 * u[7] - 1) * self.distortion) - 1,
            noise=u[8] * self.noise)
        params["brightness"] = (2 * self.rng.random_sample(
            (n_images, channels if self.brightness_each else 1)) - 1) * self.brightness
        params["contrast"] = self.contrast ** (2 * self.rng.random_sample(
            (n_images, channels if self.contrast_each else 1)) - 1)
        return params

    def _source_points(self, xp, p: dict, in_hw, out_hw):
        """For each image and output pixel, the (row, column) of the input it samples."""
        (h, w), (ho, wo) = in_hw, out_hw
        column = xp.arange(wo, dtype=np.float64)[None, None, :]
        row = xp.arange(ho, dtype=np.float64)[None, :, None]
        if self.distortion:
            # Radial lens distortion around the output's centre, as nnabla applies it.
            distortion = p["distortion"][:, None, None]
            u, v = column / (wo / 2) - 1, row / (ho / 2) - 1
            bend = (1 + distortion * (u * u + v * v)) / (1 + distortion)
            column, row = (u * bend + 1) * (wo / 2), (v * bend + 1) * (ho / 2)
        dx, dy = column - (wo - 1) / 2, row - (ho - 1) / 2
        scale_x = (p["scale"] * p["scale_x"])[:, None, None]
        scale_y = (p["scale"] / p["scale_x"])[:, None, None]
        cos, sin = xp.cos(p["angle"])[:, None, None], xp.sin(p["angle"])[:, None, None]
        # The output window's centre, placed at random inside the scaled, padded input.
        room_x = (w + 2 * self.pad[1]) * scale_x - wo
        room_y = (h + 2 * self.pad[0]) * scale_y - ho
        centre_x = p["corner_x"][:, None, None] * room_x + (wo - 1) / 2
        centre_y = p["corner_y"][:, None, None] * room_y + (ho - 1) / 2
        src_x = centre_x / scale_x - self.pad[1] + p["mirror_x"][:, None, None] * (
            cos * dx / scale_x - sin * dy / scale_y)
        src_y = centre_y / scale_y - self.pad[0] + p["mirror_y"][:, None, None] * (
            sin * dx / scale_x + cos * dy / scale_y)
        return xp.clip(src_y, 0, h - 1), xp.clip(src_x, 0, w - 1)

    def forward(self, xp, xs):
        x = xs[0]
        h, w = x.shape[-2:]
        ho, wo = self.out_shape[-2:]
        channels = x.shape[-3] if x.ndim >= 3 else 1
        n_images = x.size // (channels * h * w)
        params = {k: xp.asarray(v) for k, v in self._draw(n_images, channels).items()}
        src_y, src_x = self._source_points(xp, params, (h, w), (ho, wo))
        top, left = src_y.astype(np.int64), src_x.astype(np.int64)
        down, right = src_y - top, src_x - left
        bottom, right_col = xp.minimum(top + 1, h - 1), xp.minimum(left + 1, w - 1)
        images = x.reshape(n_images, channels, h * w)
        image_index = xp.arange(n_images)[:, None, None]
        channel_index = xp.arange(channels)[None, :, None]

        def read(rows, cols, weight):
            pixels = (rows * w + cols).reshape(n_images, 1, -1)
            weight = weight.reshape(n_images, 1, -1).astype(x.dtype)
            return images[image_index, channel_index, pixels] * weight

        y = read(top, left, (1 - down) * (1 - right))
        y += read(top, right_col, (1 - down) * right)
        y += read(bottom, left, down * (1 - right))
        y += read(bottom, right_col, down * right)
        brightness = (params["brightness"] - self.contrast_center)[:, :, None].astype(x.dtype)
        y += brightness
        y *= params["contrast"][:, :, None].astype(x.dtype)
        y += x.dtype.type(self.contrast_center)
        if self.noise:
            gauss = xp.asarray(self.rng.standard_normal(y.shape))
            y += (gauss * params["noise"][:, None, None]).astype(x.dtype)
        return (y.reshape(self.out_shape),)


def image_augmentation(x: Variable, shape: Sequence[int] | None = None,
                       pad: Sequence[int] = (0, 0), min_scale: float = 1.0,
                       max_scale: float = 1.0, angle: float = 0.0, aspect_ratio: float = 1.0,
                       distortion: float = 0.0, flip_lr: bool = False, flip_ud: bool = False,
                       brightness: float = 0.0, brightness_each: bool = False,
                       contrast: float = 1.0, contrast_center: float = 0.0,
                       contrast_each: bool = False, noise: float = 0.0, seed: int = -1) -> Variable:
    """Random data augmentation of images (..., C, H, W), new parameters at every forward.

    ``shape``: output (..., H, W), a random crop of the input padded by ``pad``;
    scale log-uniform in [min_scale, max_scale]; rotation uniform in [-angle, angle]
    radians; flips with probability 0.5; brightness uniform in [-brightness, brightness]
    added, then contrast log-uniform in [1/contrast, contrast] applied around
    ``contrast_center``; Gaussian noise with a standard deviation uniform in [0, noise]."""
    return ImageAugmentation(shape, pad, min_scale, max_scale, angle, aspect_ratio, distortion,
                             flip_lr, flip_ud, brightness, brightness_each, contrast,
                             contrast_center, contrast_each, noise, seed)(x)
