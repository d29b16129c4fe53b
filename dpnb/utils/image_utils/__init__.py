"""nnabla's ``image_utils``: read, save and resize images as NumPy arrays.

dpnb has one back end, nnabla's Pillow one (``"PilBackend"``), imported on first
use: importing this module works without Pillow, and a call without it raises a
``DpnbError`` saying to ``pip install pillow``.  As under nnabla with only Pillow
installed, 16-bit images (``as_uint16=True``, uint16 arrays) are refused with a
``ValueError``."""
from __future__ import annotations

import numpy as np

from ...errors import DpnbValueError
from .backend_events import pil_backend
from .backend_events.common import rescale_pixel_intensity

__all__ = ["set_backend", "get_backend", "get_available_backends", "minmax_auto_scale",
           "imread", "imsave", "imresize", "imwrite", "imload"]


def get_available_backends() -> list[str]:
    """Names of the back ends this machine can use: ``["PilBackend"]`` where Pillow
    is installed, else none."""
    return [pil_backend.NAME] if pil_backend.available() else []


def set_backend(backend: str) -> None:
    """Select the back end by name; dpnb has only ``"PilBackend"``, and refuses
    other names and a back end that is not installed, as nnabla does."""
    if backend != pil_backend.NAME:
        raise DpnbValueError(f"unknown image_utils back end {backend!r}; dpnb has only "
                             f"{pil_backend.NAME!r}")
    pil_backend._image_module()


def get_backend() -> str:
    """Name of the back end in use: ``"PilBackend"``, or ``""`` without Pillow."""
    return pil_backend.NAME if pil_backend.available() else ""


def minmax_auto_scale(img: np.ndarray, as_uint16: bool) -> np.ndarray:
    """Rescale ``img`` so that its minimum becomes 0 and its maximum 255 (uint8),
    or 65535 (uint16) with ``as_uint16``."""
    high, dtype = (65535, np.uint16) if as_uint16 else (255, np.uint8)
    return rescale_pixel_intensity(img, input_low=img.min(), input_high=img.max(),
                                   output_low=0, output_high=high, output_type=dtype)


def imread(path, grayscale: bool = False, size=None, interpolate: str = "bilinear",
           channel_first: bool = False, as_uint16: bool = False, num_channels: int = -1,
           **kwargs) -> np.ndarray:
    """Read the image at ``path`` (a path or a binary file object) as a uint8 array
    of shape (height, width, channel), or (height, width) for gray images.

    ``grayscale`` converts to gray; ``size`` (width, height) resizes with
    ``interpolate`` (nearest, box, bilinear, hamming, bicubic, lanczos);
    ``channel_first`` gives (channel, height, width); ``num_channels`` (-1 keeps
    the file's, 0, 1, 3 or 4) sets the channels; ``return_palette_indices=True``
    returns a palette image's indices rather than its colours."""
    return pil_backend.imread(path, grayscale=grayscale, size=size, interpolate=interpolate,
                              channel_first=channel_first, as_uint16=as_uint16,
                              num_channels=num_channels, **kwargs)


def imsave(path, img: np.ndarray, channel_first: bool = False, as_uint16: bool = False,
           auto_scale: bool = True, **kwargs) -> None:
    """Save ``img`` (height, width[, channel]; (channel, height, width) with
    ``channel_first``) to ``path`` in the format its extension names.

    uint8 images are saved as they are; float images must hold values in [0, 1]
    and are scaled to [0, 255], which needs ``auto_scale=True``."""
    pil_backend.imsave(path, img, channel_first=channel_first, as_uint16=as_uint16,
                       auto_scale=auto_scale, **kwargs)


def imresize(img: np.ndarray, size, interpolate: str = "bilinear", channel_first: bool = False,
             **kwargs) -> np.ndarray:
    """Resize ``img`` to ``size`` (width, height) with ``interpolate``, keeping its
    dtype and channel layout."""
    return pil_backend.imresize(img, size, interpolate=interpolate, channel_first=channel_first,
                                **kwargs)


imwrite = imsave
imload = imread
