"""Random functions: dropout, image augmentation, samplers of distributions
(rand, randn, ...), random_choice, and random crops, flips, shifts and erasing.

Random numbers are drawn with NumPy on the host (the process-wide
``dpnb.random.prng`` for ``seed=-1``, else a generator of the function's own)
and moved to the device, so CPU and GPU runs with the same seed agree."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import random as _random
from ..context import to_module
from ..errors import DpnbError
from ..graph import Function, Variable
from .base import axes_of, base_axis_of, default_outputs, number_of, shape_of
from .graph_module import linear_backward_graph
from .specs import Export, FunctionSpec, Params, always_false, attrs, call, ints

__all__ = ["dropout", "image_augmentation", "rand", "randn", "randint", "rand_binomial", "rand_beta",
           "rand_gamma", "random_choice", "random_crop", "random_flip", "random_shift",
           "random_erase"]


def _generator(seed: int) -> np.random.RandomState:
    """The default generator for ``seed=-1``, else a new one seeded with ``seed``."""
    return _random.prng if seed == -1 else np.random.RandomState(seed)


class Dropout(Function):
    """Zero each element with probability ``p`` and scale the rest by 1 / (1 - p);
    the gradient uses the same mask."""

    nnabla_spec = FunctionSpec("Dropout", "dropout_param", ("p", "seed"), attrs("p", "seed"),
                               call("dropout", "p", "seed"))

    draws_random_numbers = True
    grad_depends_on_inputs = False

    def __init__(self, p: float, seed: int):
        self.p = float(p)
        self.seed = int(seed)
        self.mask = self._mask_variable = None

    def output_specs(self, inputs):
        (x,) = inputs
        if not 0 <= self.p < 1:
            raise self.error(f"p, the probability of dropping an element, must be in [0, 1), "
                             f"got {self.p}")
        self.rng = _generator(self.seed)
        return [(x.shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        x = xs[0]
        self.mask = xp.asarray(self.rng.random_sample(x.shape) >= self.p)
        if self._mask_variable is not None:
            self._mask_variable.d = self.mask
        y = x * self.mask
        y *= 1 / (1 - self.p)
        return (y,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        gx = gys[0] * self.mask
        gx *= 1 / (1 - self.p)
        return (gx,)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """The output gradient times the mask, scaled: linear in it, constant in x."""
        return [F.mul_scalar(F.mul2(gys[0], self.mask_variable()), 1 / (1 - self.p))]

    def mask_variable(self) -> Variable:
        """The 0/1 mask of this dropout as a leaf variable whose data every forward from
        now on rewrites (nnabla's ``_get_dropout_mask``): a gradient graph reads the draw
        of the forward that ran before it, as nnabla's ``GradEndFunction`` orders them."""
        if self._mask_variable is None:
            x = self.inputs[0]
            self._mask_variable = Variable(x.shape, dtype=x.dtype)
            if self.mask is not None:
                self._mask_variable.d = self.mask
        return self._mask_variable


def dropout_mask(x: Variable) -> Variable:
    """The mask of the newest dropout applied to ``x`` (nnabla's ``_get_dropout_mask``)."""
    of = next((fn for fn in x.function_references if isinstance(fn, Dropout)), None)
    if of is None:
        raise DpnbError("no F.dropout takes this variable as its input, so there is no "
                        "dropout mask to read; apply y = F.dropout(x, p, seed) first")
    return of.mask_variable()


def dropout(x: Variable, p: float = 0.5, seed: int = -1,
            n_outputs: int = -1, outputs=None) -> Variable:
    """Randomly zero elements with probability ``p`` (a new mask at every forward)."""
    default_outputs("F.dropout", n_outputs, outputs)
    return Dropout(p, seed)(x)


def _image_augmentation_params(fn) -> Params:
    names = ("min_scale", "max_scale", "angle", "aspect_ratio", "distortion", "flip_lr",
             "flip_ud", "brightness", "brightness_each", "contrast", "contrast_center",
             "contrast_each", "noise", "seed")
    return {"shape": ints(fn.out_shape[-2:]), "pad": ints(fn.pad),
            **{name: getattr(fn, name) for name in names}}


def _image_augmentation(xs, p, n):
    fields = {k: v for k, v in p.items() if k != "shape"}
    return image_augmentation(xs[0], shape=p["shape"] or None, **fields)


class ImageAugmentation(Function):
    """Random crop, scale, rotation, flips, brightness, contrast, distortion and noise,
    drawn per image; the images are the last two axes, the channels the third-last.

    It follows nnabla's sampling: every output pixel maps back to a point of the
    (implicitly padded) input, read by bilinear interpolation with coordinates
    clamped to the border.  Not differentiable."""

    nnabla_spec = FunctionSpec("ImageAugmentation", "image_augmentation_param",
                               ("shape", "pad", "min_scale", "max_scale", "angle", "aspect_ratio",
                                "distortion", "flip_lr", "flip_ud", "brightness",
                                "brightness_each", "contrast", "contrast_center", "contrast_each",
                                "noise", "seed"), _image_augmentation_params, _image_augmentation)

    draws_random_numbers = True
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

    def output_specs(self, inputs):
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

    def forward_arrays(self, xp, xs):
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
                       contrast_each: bool = False, noise: float = 0.0, seed: int = -1,
                       n_outputs: int = -1, outputs=None) -> Variable:
    """Random data augmentation of images (..., C, H, W), new parameters at every forward.

    ``shape``: output (..., H, W), a random crop of the input padded by ``pad``;
    scale log-uniform in [min_scale, max_scale]; rotation uniform in [-angle, angle]
    radians; flips with probability 0.5; brightness uniform in [-brightness, brightness]
    added, then contrast log-uniform in [1/contrast, contrast] applied around
    ``contrast_center``; Gaussian noise with a standard deviation uniform in [0, noise]."""
    default_outputs("F.image_augmentation", n_outputs, outputs)
    return ImageAugmentation(shape, pad, min_scale, max_scale, angle, aspect_ratio, distortion,
                             flip_lr, flip_ud, brightness, brightness_each, contrast,
                             contrast_center, contrast_each, noise, seed)(x)


def _check_seed(owner: Function, seed: int) -> int:
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < -1:
        raise owner.error(f"seed must be an int >= 0, or -1 for the default generator; got {seed!r}")
    return int(seed)


class _Sampler(Function):
    """Base of the functions that draw an array of ``shape`` from a distribution (no input,
    no gradient); a subclass checks its parameters in ``check`` and draws in ``draw``."""

    draws_random_numbers = True
    differentiable = False
    int_output = False

    def __init__(self, shape: Sequence[int], seed: int):
        self.shape = shape
        self.seed = seed

    def check(self) -> None:
        raise NotImplementedError

    def draw(self, rng: np.random.RandomState, shape: tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError

    def output_specs(self, inputs):
        self.shape = shape_of(self, self.shape)
        self.seed = _check_seed(self, self.seed)
        self.check()
        self.rng = _generator(self.seed)
        self.dtype = np.dtype(np.int32) if self.int_output else self.context.dtype
        return [(self.shape, self.dtype)]

    def forward_arrays(self, xp, xs):
        return (xp.asarray(self.draw(self.rng, self.shape).astype(self.dtype)),)


def _sampler(*names: str) -> Export:
    return attrs(*names, "shape", "seed")


class Rand(_Sampler):
    """Uniform in [low, high)."""

    nnabla_spec = FunctionSpec("Rand", "rand_param", ("low", "high", "shape", "seed"),
                               _sampler("low", "high"),
                               call("rand", "low", "high", "shape", "seed"))

    def __init__(self, low, high, shape, seed):
        super().__init__(shape, seed)
        self.low, self.high = low, high

    def check(self):
        self.low, self.high = number_of(self, "low", self.low), number_of(self, "high", self.high)
        if not self.low < self.high:
            raise self.error(f"expected low < high, got low={self.low}, high={self.high}")

    def draw(self, rng, shape):
        values = (self.low + (self.high - self.low) * rng.random_sample(shape)).astype(self.dtype)
        # Rounding to a narrower float may reach ``high``: keep the interval half-open.
        below = np.nextafter(self.dtype.type(self.high), self.dtype.type(self.low))
        return np.minimum(values, below)


def rand(low: float = 0, high: float = 1, shape: Sequence[int] = (), seed: int = -1,
         n_outputs: int = -1, outputs=None) -> Variable:
    """Samples uniform in [low, high) of ``shape`` (new ones at every forward)."""
    default_outputs("F.rand", n_outputs, outputs)
    return Rand(low, high, shape, seed)()


class Randn(_Sampler):
    """Normal with mean mu and standard deviation sigma."""

    nnabla_spec = FunctionSpec("Randn", "randn_param", ("mu", "sigma", "shape", "seed"),
                               _sampler("mu", "sigma"),
                               call("randn", "mu", "sigma", "shape", "seed"))

    def __init__(self, mu, sigma, shape, seed):
        super().__init__(shape, seed)
        self.mu, self.sigma = mu, sigma

    def check(self):
        self.mu, self.sigma = number_of(self, "mu", self.mu), number_of(self, "sigma", self.sigma)
        if self.sigma == 0:
            raise self.error("sigma must not be 0; give a standard deviation (1 is the usual)")

    def draw(self, rng, shape):
        return self.mu + self.sigma * rng.standard_normal(shape)


def randn(mu: float = 0, sigma: float = 1, shape: Sequence[int] = (), seed: int = -1,
          n_outputs: int = -1, outputs=None) -> Variable:
    """Samples from N(mu, sigma**2) of ``shape`` (new ones at every forward)."""
    default_outputs("F.randn", n_outputs, outputs)
    return Randn(mu, sigma, shape, seed)()


class Randint(_Sampler):
    """Uniform integers in [low, high), as int32."""

    nnabla_spec = FunctionSpec("Randint", "randint_param", ("low", "high", "shape", "seed"),
                               _sampler("low", "high"),
                               call("randint", "low", "high", "shape", "seed"))

    int_output = True

    def __init__(self, low, high, shape, seed):
        super().__init__(shape, seed)
        self.low, self.high = low, high

    def check(self):
        self.low = number_of(self, "low", self.low, integer=True)
        self.high = number_of(self, "high", self.high, integer=True)
        if not self.low < self.high:
            raise self.error(f"expected low < high, got low={self.low}, high={self.high}")
        info = np.iinfo(np.int32)
        if self.low < info.min or self.high - 1 > info.max:
            raise self.error(f"low and high must fit int32, got low={self.low}, high={self.high}")

    def draw(self, rng, shape):
        return rng.randint(self.low, self.high, shape)


def randint(low: int = 0, high: int = 1, shape: Sequence[int] = (), seed: int = -1,
            n_outputs: int = -1, outputs=None) -> Variable:
    """Integer samples uniform in [low, high) of ``shape``, int32 (new ones at every forward)."""
    default_outputs("F.randint", n_outputs, outputs)
    return Randint(low, high, shape, seed)()


class RandBinomial(_Sampler):
    """Binomial counts of n trials with success probability p."""

    nnabla_spec = FunctionSpec("RandBinomial", "rand_binomial_param", ("n", "p", "shape", "seed"),
                               _sampler("n", "p"),
                               call("rand_binomial", "n", "p", "shape", "seed"))

    def __init__(self, n, p, shape, seed):
        super().__init__(shape, seed)
        self.n, self.p = n, p

    def check(self):
        self.n, self.p = number_of(self, "n", self.n, integer=True), number_of(self, "p", self.p)
        if self.n < 1 or not 0 < self.p < 1:
            raise self.error(f"expected n >= 1 trials and a probability 0 < p < 1 (as nnabla), got "
                             f"n={self.n}, p={self.p}")

    def draw(self, rng, shape):
        return rng.binomial(self.n, self.p, shape)


def rand_binomial(n: int = 1, p: float = 0.5, shape: Sequence[int] = (),
                  seed: int = -1, n_outputs: int = -1, outputs=None) -> Variable:
    """Samples from B(n, p) of ``shape``, as floats (new ones at every forward)."""
    default_outputs("F.rand_binomial", n_outputs, outputs)
    return RandBinomial(n, p, shape, seed)()


class RandBeta(_Sampler):
    """Beta(alpha, beta) samples."""

    nnabla_spec = FunctionSpec("RandBeta", "rand_beta_param", ("alpha", "beta", "shape", "seed"),
                               _sampler("alpha", "beta"),
                               call("rand_beta", "alpha", "beta", "shape", "seed"))

    def __init__(self, alpha, beta, shape, seed):
        super().__init__(shape, seed)
        self.alpha, self.beta = alpha, beta

    def check(self):
        self.alpha = number_of(self, "alpha", self.alpha)
        self.beta = number_of(self, "beta", self.beta)
        if self.alpha <= 0 or self.beta <= 0:
            raise self.error(f"alpha and beta must be > 0, got alpha={self.alpha}, beta={self.beta}")

    def draw(self, rng, shape):
        return rng.beta(self.alpha, self.beta, shape)


def rand_beta(alpha: float = 0.5, beta: float = 0.5, shape: Sequence[int] = (),
              seed: int = -1, n_outputs: int = -1, outputs=None) -> Variable:
    """Samples from Beta(alpha, beta) of ``shape`` (new ones at every forward)."""
    default_outputs("F.rand_beta", n_outputs, outputs)
    return RandBeta(alpha, beta, shape, seed)()


class RandGamma(_Sampler):
    """Gamma samples of shape k and scale theta."""

    nnabla_spec = FunctionSpec("RandGamma", "rand_gamma_param", ("k", "theta", "shape", "seed"),
                               _sampler("k", "theta"),
                               call("rand_gamma", "k", "theta", "shape", "seed"))

    def __init__(self, k, theta, shape, seed):
        super().__init__(shape, seed)
        self.k, self.theta = k, theta

    def check(self):
        self.k, self.theta = number_of(self, "k", self.k), number_of(self, "theta", self.theta)
        if self.k <= 0 or self.theta <= 0:
            raise self.error(f"k and theta must be > 0, got k={self.k}, theta={self.theta}")

    def draw(self, rng, shape):
        return rng.gamma(self.k, self.theta, shape)


def rand_gamma(k: float = 0.5, theta: float = 1, shape: Sequence[int] = (),
               seed: int = -1, n_outputs: int = -1, outputs=None) -> Variable:
    """Samples from Gamma(k, theta) (mean k theta) of ``shape`` (new ones at every forward)."""
    default_outputs("F.rand_gamma", n_outputs, outputs)
    return RandGamma(k, theta, shape, seed)()


class RandomChoice(Function):
    """Samples of the populations on x's last axis, drawn with the relative weights ``w``
    (same shape); the gradient of each drawn sample goes to that element of x and of w."""

    nnabla_spec = FunctionSpec("RandomChoice", "random_choice_param", ("shape", "replace", "seed"),
                               attrs("shape", "replace", "seed"),
                               call("random_choice", "shape", "replace", "seed"))

    draws_random_numbers = True

    def __init__(self, shape, replace: bool, seed: int):
        self.shape = shape
        self.replace = bool(replace)
        self.seed = seed

    def output_specs(self, inputs):
        x, w = inputs
        if x.shape != w.shape or x.ndim == 0:
            raise self.error(f"x and w must have one shape of at least one axis (populations on "
                             f"the last), got x {x.shape} and w {w.shape}")
        self.shape = shape_of(self, self.shape)
        self.seed = _check_seed(self, self.seed)
        self.count = int(np.prod(self.shape)) if self.shape else 1
        if not self.replace and self.count > x.shape[-1]:
            raise self.error(f"without replacement at most {x.shape[-1]} samples can be drawn from "
                             f"populations of {x.shape[-1]}, but shape {self.shape} asks for "
                             f"{self.count}; draw fewer or set replace=True")
        self.rng = _generator(self.seed)
        self.x_shape = x.shape
        dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else self.context.dtype
        return [(x.shape[:-1] + (self.shape or (1,)), dtype)]

    def _choose(self, weights: np.ndarray) -> np.ndarray:
        """The drawn indices, one row of ``self.count`` per population."""
        if (weights < 0).any():
            raise self.error("weights must not be negative; got a negative weight in w")
        totals = weights.sum(axis=1)
        if (totals <= 0).any():
            raise self.error("every population needs a weight > 0; got one whose weights are all 0")
        if not self.replace and ((weights > 0).sum(axis=1) < self.count).any():
            raise self.error(f"without replacement every population needs at least {self.count} "
                             "non-zero weights; got fewer")
        size = weights.shape[1]
        return np.stack([self.rng.choice(size, self.count, self.replace, p=row / total)
                         for row, total in zip(weights, totals)])

    def forward_arrays(self, xp, xs):
        x, w = xs
        size = x.shape[-1]
        weights = to_module(w, np).reshape(-1, size).astype(np.float64)
        self.index = xp.asarray(self._choose(weights))
        y = xp.take_along_axis(x.reshape(-1, size), self.index, axis=1)
        return (y.reshape(self.outputs[0].shape).astype(self.outputs[0].dtype),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        size = self.x_shape[-1]
        rows = self.index.shape[0]
        flat = (self.index + xp.arange(rows)[:, None] * size).ravel()
        g = xp.bincount(flat, weights=gys[0].ravel(), minlength=rows * size)
        g = g.reshape(self.x_shape).astype(gys[0].dtype)
        return (g if need_grads[0] else None, g.copy() if need_grads[1] else None)


def random_choice(x: Variable, w: Variable, shape: Sequence[int] = (), replace: bool = True,
                  seed: int = -1, n_outputs: int = -1, outputs=None) -> Variable:
    """Draw samples of ``shape`` (default one) from each population on x's last axis with
    relative weights ``w``; the output is x.shape[:-1] + shape (+ (1,) for no shape)."""
    default_outputs("F.random_choice", n_outputs, outputs)
    return RandomChoice(shape, replace, seed)(x, w)


class _Remap(Function):
    """Base of random_crop, random_flip and random_shift: every output element reads one
    input element, chosen per axis.  As nnabla, what is drawn for axis ``a`` is drawn once
    for each index of the output axes before min(a, base_axis): per sample for the axes
    from ``base_axis`` on, and coarser for the sample axes themselves.  The gradient of
    each output element goes back to the element it read."""

    draws_random_numbers = True
    grad_depends_on_inputs = False
    fill = 0.0  # the value of output positions that read no input (a constant border)

    def __init__(self, base_axis: int, seed: int):
        self.base_axis = base_axis
        self.seed = seed

    def out_shape_of(self, x: Variable) -> tuple[int, ...]:
        """Check the options against the input; the output's shape."""
        raise NotImplementedError

    def source(self, axis: int, group: tuple[int, ...], pos: np.ndarray):
        """Host arrays (source index, valid mask or None) along ``axis``, for output positions
        ``pos``; random values are drawn in shape ``group`` and broadcast against ``pos``."""
        raise NotImplementedError

    def output_specs(self, inputs):
        (x,) = inputs
        if x.ndim == 0:
            raise self.error("expected an input of at least one axis, got a scalar")
        self.base_axis = base_axis_of(self, self.base_axis, x.ndim)
        self.seed = _check_seed(self, self.seed)
        self.in_shape = x.shape
        self.out_shape = self.out_shape_of(x)
        self.rng = _generator(self.seed)
        return [(self.out_shape, x.dtype)]

    def _spread(self, values: np.ndarray) -> np.ndarray:
        """``values`` drawn per group of ``axis``, shaped to broadcast over the output."""
        return values.reshape(values.shape + (1,) * (len(self.out_shape) - values.ndim))

    def forward_arrays(self, xp, xs):
        ndim = len(self.out_shape)
        index, valid = [], None
        for axis in range(ndim):
            pos = np.arange(self.out_shape[axis]).reshape(
                tuple(-1 if a == axis else 1 for a in range(ndim)))
            src, ok = self.source(axis, self.out_shape[:min(axis, self.base_axis)], pos)
            index.append(xp.asarray(src))
            if ok is not None:
                valid = ok if valid is None else valid & ok
        self.index = tuple(index)
        self.valid = None if valid is None else xp.asarray(valid)
        y = xs[0][self.index]
        if self.valid is not None:
            y = xp.where(self.valid, y, xs[0].dtype.type(self.fill))
        return (y,)

    def linear_map(self, xp, xs):
        """The last forward's remap on ``xs`` with zeros where it read no input: the map
        whose adjoint backward is (its graph backward's, for the second order on)."""
        y = xs[0][self.index]
        return (y if self.valid is None else xp.where(self.valid, y, 0),)

    backward_graph = linear_backward_graph  # linear but for the border, the drawn index selects

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        gy = gys[0] if self.valid is None else gys[0] * self.valid
        strides = np.cumprod((1,) + self.in_shape[:0:-1])[::-1]
        flat = sum(i * int(s) for i, s in zip(self.index, strides))
        flat = xp.broadcast_to(flat, self.out_shape).ravel()
        size = int(np.prod(self.in_shape))
        g = xp.bincount(flat, weights=gy.ravel(), minlength=size)
        return (g.reshape(self.in_shape).astype(gys[0].dtype),)


class RandomCrop(_Remap):
    """A window of ``shape`` (over the last len(shape) axes) at a random place."""

    nnabla_spec = FunctionSpec("RandomCrop", "random_crop_param", ("shape", "base_axis", "seed"),
                               attrs("shape", "base_axis", "seed"),
                               call("random_crop", "shape", "base_axis", "seed"))

    def __init__(self, shape, base_axis, seed):
        super().__init__(base_axis, seed)
        self.shape = shape

    def out_shape_of(self, x):
        shape = shape_of(self, x.shape if self.shape is None else self.shape)
        lead = x.ndim - len(shape)
        if lead < 0 or any(s > n for s, n in zip(shape, x.shape[lead:])):
            raise self.error(f"shape must be at most {x.ndim} sizes, each no larger than the "
                             f"input's last axes {x.shape}, got {shape}")
        return x.shape[:lead] + shape

    def source(self, axis, group, pos):
        room = self.in_shape[axis] - self.out_shape[axis]
        if room == 0:
            return pos, None
        return self._spread(self.rng.randint(0, room + 1, group)) + pos, None


def random_crop(x: Variable, shape: Sequence[int] | None = None, base_axis: int = 1,
                seed: int = -1, n_outputs: int = -1, outputs=None) -> Variable:
    """A random window of ``shape`` (the last axes; default: x's shape), placed anew for
    each sample (the axes before ``base_axis``) at every forward."""
    default_outputs("F.random_crop", n_outputs, outputs)
    return RandomCrop(shape, base_axis, seed)(x)


class RandomFlip(_Remap):
    """Reverse each axis of ``axes`` with probability 1/2."""

    nnabla_spec = FunctionSpec("RandomFlip", "random_flip_param", ("axes", "base_axis", "seed"),
                               attrs("axes", "base_axis", "seed"),
                               call("random_flip", "axes", "base_axis", "seed"))

    def __init__(self, axes, base_axis, seed):
        super().__init__(base_axis, seed)
        self.axes = axes

    def out_shape_of(self, x):
        self.axes = axes_of(self, [x.ndim - 1] if self.axes is None else self.axes, x.ndim)
        return x.shape

    def source(self, axis, group, pos):
        if axis not in self.axes:
            return pos, None
        flip = self._spread(self.rng.random_sample(group) < 0.5)
        return np.where(flip, self.out_shape[axis] - 1 - pos, pos), None


def random_flip(x: Variable, axes: Sequence[int] | None = None, base_axis: int = 1,
                seed: int = -1, n_outputs: int = -1, outputs=None) -> Variable:
    """Reverse each of ``axes`` (default: the last) with probability 1/2, drawn anew for
    each sample (the axes before ``base_axis``) at every forward."""
    default_outputs("F.random_flip", n_outputs, outputs)
    return RandomFlip(axes, base_axis, seed)(x)


_BORDERS = ("nearest", "reflect", "constant")


class RandomShift(_Remap):
    """Shift each axis by a random integer in [-shifts[a], shifts[a]]; what comes in from
    beyond the border repeats the edge (nearest), mirrors the array (reflect) or is
    ``constant_value`` (constant)."""

    nnabla_spec = FunctionSpec("RandomShift", "random_shift_param",
                               ("shifts", "border_mode", "constant_value", "base_axis", "seed"),
                               attrs("shifts", "border_mode", "base_axis", "seed",
                                     constant_value="fill"),
                               call("random_shift", "shifts", "border_mode", "constant_value",
                                    "base_axis", "seed"))

    def __init__(self, shifts, border_mode, constant_value, base_axis, seed):
        super().__init__(base_axis, seed)
        self.shifts, self.border_mode = shifts, border_mode
        self.fill = constant_value

    def out_shape_of(self, x):
        shifts = (0,) * x.ndim if self.shifts is None else self.shifts
        given = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
        if len(given) != x.ndim or not all(isinstance(s, (int, np.integer)) and s >= 0
                                           for s in given):
            raise self.error(f"shifts must be {x.ndim} ints >= 0, the largest shift of each axis "
                             f"of the input {x.shape}, got {shifts!r}")
        self.shifts = tuple(int(s) for s in given)
        if self.border_mode not in _BORDERS:
            raise self.error(f"border_mode must be one of {', '.join(_BORDERS)}, got "
                             f"{self.border_mode!r}")
        self.fill = number_of(self, "constant_value", self.fill)
        return x.shape

    def source(self, axis, group, pos):
        limit, size = self.shifts[axis], self.out_shape[axis]
        if limit == 0:
            return pos, None
        src = pos - self._spread(self.rng.randint(-limit, limit + 1, group))
        if self.border_mode == "reflect":
            period = src % (2 * size)
            return np.where(period < size, period, 2 * size - 1 - period), None
        clipped = np.clip(src, 0, size - 1)
        if self.border_mode == "nearest":
            return clipped, None
        return clipped, (src >= 0) & (src < size)


def random_shift(x: Variable, shifts: Sequence[int] | None = None, border_mode: str = "nearest",
                 constant_value: float = 0, base_axis: int = 1, seed: int = -1,
                 n_outputs: int = -1, outputs=None) -> Variable:
    """Shift every axis by a random integer up to ``shifts[axis]`` either way (default: no
    shift), drawn anew for each sample (the axes before ``base_axis``) at every forward."""
    default_outputs("F.random_shift", n_outputs, outputs)
    return RandomShift(shifts, border_mode, constant_value, base_axis, seed)(x)


def _pair(owner: Function, name: str, value, positive: bool) -> tuple[float, float]:
    """A (low, high) range of two numbers, low <= high (and > 0 where ``positive``)."""
    given = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if len(given) != 2:
        raise owner.error(f"{name} must be two numbers (low, high), got {value!r}")
    low, high = (number_of(owner, name, v) for v in given)
    if low > high or (positive and low <= 0):
        raise owner.error(f"{name} must be (low, high) with {'0 < ' if positive else ''}"
                          f"low <= high, got {value!r}")
    return low, high


class RandomErase(Function):
    """Random rectangles of each image replaced by values uniform in ``replacements``.

    Per sample (the axes before ``base_axis``) and per patch (``n``; per channel too
    unless ``share``), with probability ``prob``: an area uniform in ``area_ratios`` of
    the image and an aspect ratio uniform in ``aspect_ratios`` give the integer height
    int(sqrt(area * ratio)) and width int(sqrt(area / ratio)); the top-left corner is a
    uniform integer position, and the rows and columns from it up to and including
    corner + height and corner + width (clipped to the image) are replaced, the geometry
    nnabla 1.39 produces."""

    nnabla_spec = FunctionSpec("RandomErase", "random_erase_param",
                               ("prob", "area_ratios", "aspect_ratios", "replacements", "n",
                                "share", "inplace", "base_axis", "seed", "channel_last",
                                "ste_fine_grained"),
                               attrs("prob", "area_ratios", "aspect_ratios", "replacements", "n",
                                     "share", "base_axis", "seed", "channel_last",
                                     "ste_fine_grained", inplace=always_false),
                               call("random_erase", "prob", "area_ratios", "aspect_ratios",
                                    "replacements", "n", "share", "base_axis", "seed",
                                    "channel_last", "ste_fine_grained"))

    draws_random_numbers = True
    grad_depends_on_inputs = False

    def __init__(self, prob, area_ratios, aspect_ratios, replacements, n, share, base_axis,
                 seed, channel_last, ste_fine_grained):
        self.prob, self.n = prob, n
        self.area_ratios, self.aspect_ratios = area_ratios, aspect_ratios
        self.replacements = replacements
        self.share, self.channel_last = bool(share), bool(channel_last)
        self.ste_fine_grained = bool(ste_fine_grained)
        self.base_axis, self.seed = base_axis, seed

    def output_specs(self, inputs):
        (x,) = inputs
        self.base_axis = base_axis_of(self, self.base_axis, max(x.ndim, 1))
        if x.ndim - self.base_axis != 3:
            layout = "(H, W, C)" if self.channel_last else "(C, H, W)"
            raise self.error(f"expected images {layout} after the sample axes: 3 axes from "
                             f"base_axis={self.base_axis} on, got shape {x.shape}; set base_axis "
                             "to the number of sample axes")
        self.prob = number_of(self, "prob", self.prob)
        if not 0 <= self.prob <= 1:
            raise self.error(f"prob must be in [0, 1], got {self.prob}")
        self.n = number_of(self, "n", 1 if self.n is None else self.n, integer=True)
        if self.n < 1:
            raise self.error(f"n, the most patches per image, must be >= 1, got {self.n}")
        self.area_ratios = _pair(self, "area_ratios", self.area_ratios, positive=True)
        self.aspect_ratios = _pair(self, "aspect_ratios", self.aspect_ratios, positive=True)
        self.replacements = _pair(self, "replacements", self.replacements, positive=False)
        self.seed = _check_seed(self, self.seed)
        self.rng = _generator(self.seed)
        return [(x.shape, x.dtype)]

    def _mask(self, samples: int, channels: int, h: int, w: int) -> np.ndarray:
        """Where to erase, (samples, channels or 1, h, w), drawn on the host."""
        boxes = (samples, channels if not self.share else 1, self.n, 1, 1)
        erase = self.rng.random_sample(boxes) < self.prob
        area = self.rng.uniform(*self.area_ratios, boxes) * (h * w)
        ratio = self.rng.uniform(*self.aspect_ratios, boxes)
        height = np.sqrt(area * ratio).astype(np.int64)
        width = np.sqrt(area / ratio).astype(np.int64)
        top = (self.rng.random_sample(boxes) * (np.maximum(h - height, 0) + 1)).astype(np.int64)
        left = (self.rng.random_sample(boxes) * (np.maximum(w - width, 0) + 1)).astype(np.int64)
        rows = np.arange(h).reshape(h, 1)
        cols = np.arange(w).reshape(1, w)
        inside = ((rows >= top) & (rows <= top + height) & (cols >= left)
                  & (cols <= left + width))
        return (erase & inside).any(axis=2)

    def forward_arrays(self, xp, xs):
        x = xs[0]
        images = x.shape[self.base_axis:]
        if self.channel_last:
            (h, w, channels) = images
        else:
            (channels, h, w) = images
        samples = int(np.prod(x.shape[:self.base_axis]))
        mask = self._mask(samples, channels, h, w)
        if self.channel_last:
            mask = mask.transpose(0, 2, 3, 1)
        mask = mask.reshape(x.shape[:self.base_axis] + mask.shape[1:])
        values = self.rng.uniform(*self.replacements, x.shape)
        self.mask = xp.asarray(mask)
        return (xp.where(self.mask, xp.asarray(values).astype(x.dtype), x),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        if not self.ste_fine_grained:
            return (gys[0],)
        return (gys[0] * ~self.mask,)

    def linear_map(self, xp, xs):
        """The map whose adjoint backward is: the last forward's unerased pixels (all of
        them, straight through, without ``ste_fine_grained``)."""
        return ((xs[0] * ~self.mask) if self.ste_fine_grained else xs[0].copy(),)

    backward_graph = linear_backward_graph  # its gradient is linear, the drawn mask selects


def random_erase(x: Variable, prob: float = 0.5, area_ratios: Sequence[float] = (0.02, 0.4),
                 aspect_ratios: Sequence[float] = (0.3, 3.3333),
                 replacements: Sequence[float] = (0.0, 255.0), n: int | None = None,
                 share: bool = True, inplace: bool = False, base_axis: int = 1, seed: int = -1,
                 channel_last: bool = False, ste_fine_grained: bool = True,
                 n_outputs: int = -1, outputs=None) -> Variable:
    """Random erasing of images (C, H, W), or (H, W, C) with ``channel_last``, after the
    sample axes: up to ``n`` (default 1) patches per image filled with uniform values.
    The gradient skips the erased pixels (passes everywhere without ``ste_fine_grained``);
    ``inplace`` is ignored, as in nnabla: the output never shares the input's memory."""
    default_outputs("F.random_erase", n_outputs, outputs)
    return RandomErase(prob, area_ratios, aspect_ratios, replacements, n, share, base_axis,
                       seed, channel_last, ste_fine_grained)(x)
