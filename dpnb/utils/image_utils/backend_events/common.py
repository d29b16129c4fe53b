"""Pixel-intensity rescaling and the argument checks of nnabla's image functions,
shared by every back end (nnabla's ``image_utils.backend_events.common``)."""
from __future__ import annotations

import numpy as np

from ....errors import DpnbValueError

READ_CHANNELS = (-1, 0, 1, 3, 4)
"""The ``num_channels`` imread accepts: -1 keeps the file's channels, 0 makes a 2-D
gray image, 1, 3 and 4 make that many channels."""
SAVE_CHANNELS = (1, 2, 3, 4)
"""The channel counts an image to save may have (gray, gray+alpha, RGB, RGBA)."""


def normalize_pixel_intensity(img: np.ndarray, input_low, input_high) -> np.ndarray:
    """Map ``[input_low, input_high]`` to ``[0, 1]``; a constant range maps to 0
    where it is 0 and to 1 elsewhere."""
    span = input_high - input_low
    if span == 0:
        return img if input_low == 0 else img / input_low
    return (img - input_low) / span


def rescale_pixel_intensity(img: np.ndarray, input_low=0, input_high=255, output_low=0,
                            output_high=255, output_type=None) -> np.ndarray:
    """Map the pixel values of ``img`` linearly from ``[input_low, input_high]`` to
    ``[output_low, output_high]`` and cast them to ``output_type`` (default: the
    dtype of ``img``)."""
    if not isinstance(img, np.ndarray):
        raise DpnbValueError(f"rescale_pixel_intensity takes a numpy.ndarray, got "
                             f"{type(img).__name__}; pass numpy.asarray(img)")
    if output_type is None:
        output_type = img.dtype
    if input_low == output_low and output_low == output_high:
        return np.asarray(img, output_type)
    unit = normalize_pixel_intensity(img, input_low, input_high)
    return (unit * (output_high - output_low) + output_low).astype(output_type)


def check_read_arguments(grayscale: bool, num_channels: int) -> None:
    """Refuse a ``num_channels`` imread cannot give, as nnabla does."""
    if num_channels not in READ_CHANNELS:
        raise DpnbValueError(f"num_channels must be one of {list(READ_CHANNELS)}, got "
                             f"{num_channels!r}")
    if not grayscale and num_channels in (0, 1):
        raise DpnbValueError(f"num_channels={num_channels} makes a gray image, but grayscale="
                             "False; pass grayscale=True, or num_channels -1, 3 or 4")


def after_read(img: np.ndarray, size, interpolate: str, channel_first: bool,
               imresize) -> np.ndarray:
    """Resize a read image to ``size`` (width, height) where given, and put the
    channels first where asked."""
    if size is not None:
        img = imresize(img, size, interpolate=interpolate)
    if channel_first and img.ndim == 3:
        img = img.transpose((2, 0, 1))
    return img


def _check_image(img, what: str) -> None:
    if not isinstance(img, np.ndarray):
        raise DpnbValueError(f"the image to {what} must be a numpy.ndarray, got "
                             f"{type(img).__name__}; pass numpy.asarray(img)")
    if img.ndim not in (2, 3):
        raise DpnbValueError(f"the image to {what} must have 2 dimensions (height, width) or 3 "
                             f"(height, width, channel), got shape {img.shape}")


def before_save(img: np.ndarray, channel_first: bool, auto_scale: bool) -> np.ndarray:
    """Check an image to save and bring it to (height, width[, channel]); values
    that are not uint8 or uint16 must lie in [0, 1] and become float32."""
    _check_image(img, "save")
    if img.dtype not in (np.uint8, np.uint16):
        if not auto_scale:
            raise DpnbValueError(f"an image of dtype {img.dtype} is saved by scaling its [0, 1] "
                                 "values up, but auto_scale=False; pass auto_scale=True, or an "
                                 "image of dtype uint8 or uint16")
        if np.any(img < 0) or np.any(img > 1):
            raise DpnbValueError(f"an image of dtype {img.dtype} must hold values in [0, 1], got "
                                 f"[{img.min()}, {img.max()}]; rescale it (image_utils."
                                 "minmax_auto_scale) or cast it to uint8")
        img = np.asarray(img, np.float32)
    if channel_first and img.ndim == 3:
        img = img.transpose((1, 2, 0))
    if img.ndim == 3 and img.shape[-1] not in SAVE_CHANNELS:
        raise DpnbValueError(f"an image to save must have 1 to 4 channels, got shape {img.shape}"
                             f"{' (channel first)' if channel_first else ''}; pass channel_first="
                             f"{not channel_first} if the channels are on the other side")
    return img


def before_resize(img: np.ndarray, size, channel_first: bool, interpolate: str,
                  interpolations) -> np.ndarray:
    """Check an image to resize and bring it to (height, width[, channel]); dtypes
    other than uint8 and uint16 become float32, and a 1x1 image becomes 2x2 (so
    that interpolation has neighbours)."""
    _check_image(img, "resize")
    if not isinstance(size, (list, tuple)):
        raise DpnbValueError(f"size must be a (width, height) list or tuple, got "
                             f"{type(size).__name__}")
    if interpolate not in interpolations:
        raise DpnbValueError(f"unknown interpolation {interpolate!r}; use one of "
                             f"[{', '.join(interpolations)}]")
    if img.dtype not in (np.uint8, np.uint16):
        img = np.asarray(img, np.float32)
    if channel_first and img.ndim == 3:
        img = img.transpose((1, 2, 0))
    if img.ndim == 3 and img.shape[0] * img.shape[1] == 1:
        img = np.repeat(np.repeat(img, 2, axis=0), 2, axis=1)
    return img


def after_resize(img: np.ndarray, channel_first: bool) -> np.ndarray:
    """Put the channels of a resized image first where asked."""
    if channel_first and img.ndim == 3:
        img = img.transpose((2, 0, 1))
    return img
