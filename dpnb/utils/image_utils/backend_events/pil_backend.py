"""nnabla's Pillow image back end: reads 8-bit images, saves 8-bit images, and
resizes uint8 images as Pillow images and other dtypes channel by channel as
32-bit float images.  Pillow is imported on first use, so that importing
``image_utils`` works without it."""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from ....errors import DpnbError, DpnbValueError
from .common import after_read, after_resize, before_resize, before_save, check_read_arguments

NAME = "PilBackend"
"""nnabla's name of this back end, as ``image_utils.get_backend()`` gives it."""
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "hamming", "box", "lanczos")
"""The ``interpolate`` names Pillow resizes with."""
WIDE_MODES = ("I", "I;16", "I;16L", "I;16B", "I;16N", "F")
"""Pillow modes of 16- and 32-bit pixels, which this 8-bit back end refuses."""


def available() -> bool:
    """Whether Pillow can be imported."""
    try:
        _image_module()
    except DpnbError:
        return False
    return True


def _image_module() -> Any:
    try:
        from PIL import Image
    except ImportError as e:
        raise DpnbError(f"image_utils reads, saves and resizes images with Pillow, which is not "
                        f"installed ({e}); run `pip install pillow`") from e
    return Image


def _to_array(image: Any, grayscale: bool, num_channels: int,
              return_palette_indices: bool) -> np.ndarray:
    """The uint8 pixels of a Pillow image in the channels asked for."""
    if image.mode in WIDE_MODES:
        raise DpnbValueError(f"the image has Pillow mode {image.mode!r} (16- or 32-bit pixels), "
                             "but the Pillow back end reads 8-bit images only; convert the file "
                             "to 8 bits, or read it with another library")
    if image.mode == "P" and not return_palette_indices:
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    if grayscale:
        gray = np.asarray(image.convert("L"))
        if num_channels > 0:
            gray = np.broadcast_to(gray[..., np.newaxis], gray.shape + (num_channels,))
        return np.array(gray, dtype=np.uint8)
    if num_channels == 3:
        image = image.convert("RGB")
    elif num_channels == 4:
        image = image.convert("RGBA")
    return np.asarray(image).astype(np.uint8)


def imread(path, grayscale: bool = False, size=None, interpolate: str = "bilinear",
           channel_first: bool = False, as_uint16: bool = False, num_channels: int = -1,
           return_palette_indices: bool = False) -> np.ndarray:
    """Read an 8-bit image file (a path or a binary file object) as a uint8 array
    of shape (height, width[, channel]); see ``image_utils.imread``."""
    if as_uint16:
        raise DpnbValueError("imread(as_uint16=True) needs a 16-bit image reader, but dpnb "
                             "reads images with Pillow, which gives uint8 pixels only; pass "
                             "as_uint16=False")
    check_read_arguments(grayscale, num_channels)
    image_module = _image_module()
    with image_module.open(os.fspath(path) if isinstance(path, os.PathLike) else path) as image:
        img = _to_array(image, grayscale, num_channels, return_palette_indices)
    return after_read(img, size, interpolate, channel_first, imresize)


def imsave(path, img: np.ndarray, channel_first: bool = False, as_uint16: bool = False,
           auto_scale: bool = True) -> None:
    """Save a uint8 image, or a float one in [0, 1] scaled to [0, 255], to ``path``
    in the format its extension names; see ``image_utils.imsave``."""
    img = before_save(img, channel_first, auto_scale)
    if img.dtype == np.uint16 or as_uint16:
        raise DpnbValueError(f"saving an image as uint16 (dtype {img.dtype}, as_uint16="
                             f"{as_uint16}) needs a 16-bit image writer, but dpnb saves images "
                             "with Pillow, which writes uint8 pixels only; pass as_uint16=False "
                             "and an image of dtype uint8 or float in [0, 1]")
    if auto_scale and img.dtype != np.uint8:
        img = (img * 255).astype(np.uint8)
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    _image_module().fromarray(img).save(os.fspath(path))


def _resize_plane(image_module: Any, plane: np.ndarray, size, resample: Any) -> np.ndarray:
    resized = image_module.fromarray(np.ascontiguousarray(plane)).resize(tuple(size), resample)
    return np.array(resized)


def imresize(img: np.ndarray, size, interpolate: str = "bilinear",
             channel_first: bool = False) -> np.ndarray:
    """Resize an image to ``size`` (width, height), keeping its dtype; see
    ``image_utils.imresize``.  Integer images other than uint8 are resized as
    float, and values that overshoot their dtype's range are clipped to it
    (nnabla's cast wraps them around)."""
    img = before_resize(img, size, channel_first, interpolate, INTERPOLATIONS)
    image_module = _image_module()
    resample = getattr(image_module.Resampling, interpolate.upper())
    single = img.ndim == 3 and img.shape[-1] == 1
    if single:
        img = img[..., 0]
    if img.dtype == np.uint8 and (img.ndim == 2 or img.shape[-1] in (2, 3, 4)):
        resized = _resize_plane(image_module, img, size, resample)
    else:
        planes = img.astype(np.float32)
        if planes.ndim == 2:
            resized = _resize_plane(image_module, planes, size, resample)
        else:
            resized = np.stack([_resize_plane(image_module, planes[..., c], size, resample)
                                for c in range(planes.shape[-1])], axis=2)
        if img.dtype != np.float32:
            info = np.iinfo(img.dtype)
            resized = np.clip(resized, info.min, info.max)
        resized = resized.astype(img.dtype)
    if single:
        resized = resized[..., np.newaxis]
    return after_resize(resized, channel_first)
