"""nnabla's monitors: series, timers and images written under one folder in nnabla's formats.

``MonitorSeries`` also tells the functions registered with
``add_series_listener`` of every value it is given, so that a display (the
notebook's progress bar) can follow training without this module knowing it."""
from __future__ import annotations

import logging
import math
import os
import time
from typing import Any, Callable

import numpy as np

from .context import array_module_of, to_module
from .errors import DpnbError
from .graph import Variable
from .logger import logger
from .ndarray import NdArray

__all__ = ["Monitor", "MonitorSeries", "MonitorTimeElapsed", "MonitorImage", "MonitorImageTile",
           "tile_images", "plot_series", "plot_time_elapsed", "add_series_listener",
           "remove_series_listener", "notify_series_listeners"]

_log = logging.getLogger(__name__)
SeriesListener = Callable[[str, int, float], Any]  # fn(name, index, value)
_series_listeners: list[SeriesListener] = []


def add_series_listener(fn: SeriesListener) -> None:
    """Call ``fn(name, index, value)`` on every ``MonitorSeries.add``, with the value as given
    (the mean of its elements where it is an array); registering ``fn`` again does nothing."""
    if not callable(fn):
        raise DpnbError(f"add_series_listener expects a function fn(name, index, value); "
                        f"got {type(fn).__name__}. Pass a callable")
    if fn not in _series_listeners:
        _series_listeners.append(fn)


def remove_series_listener(fn: SeriesListener) -> None:
    """Stop calling ``fn``; nothing happens where it is not registered (a listener that
    raised has already been dropped)."""
    if fn in _series_listeners:
        _series_listeners.remove(fn)


def notify_series_listeners(name: str, index: int, value) -> None:
    """Tell every listener of one value added to the series ``name`` (by dpnb's
    ``MonitorSeries``, or by the real nnabla's on dpnb's engines); a listener that raises
    is logged and dropped."""
    if not _series_listeners:
        return
    raw = float(np.mean(value))
    for fn in tuple(_series_listeners):
        try:
            fn(name, index, raw)
        except Exception:
            remove_series_listener(fn)
            _log.warning("the series listener %r raised on MonitorSeries %r at index %s and "
                         "is no longer called", fn, name, index, exc_info=True)


class Monitor:
    """The folder the monitors given this object write their files into (created if missing)."""

    def __init__(self, save_path: str | os.PathLike):
        self._save_path = os.fspath(save_path)
        os.makedirs(self._save_path, exist_ok=True)

    @property
    def save_path(self) -> str:
        """The folder the monitors write into."""
        return self._save_path


def _file_stem(monitor: Monitor, name: str) -> str:
    """The path of a monitor's output under ``monitor``, spaces in ``name`` made dashes."""
    if not isinstance(name, str):
        raise DpnbError(f"a monitor's name must be a str; got {type(name).__name__}. "
                        "Pass a name such as 'training loss'")
    return os.path.join(monitor.save_path, name.replace(" ", "-"))


def _empty_file(path: str) -> str:
    """Create ``path`` empty (truncating an earlier run's file, as nnabla does)."""
    with open(path, "w"):
        pass
    return path


def _check_interval(what: str, value):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not value > 0:
        raise DpnbError(f"{what} must be a positive number of indices; got {value!r}. "
                        "Pass 1 or more")
    return value


def _check_count(what: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise DpnbError(f"{what} must be a positive integer; got {value!r}. Pass 1 or more")
    return int(value)


def _host(value, what: str):
    """``value`` (a number, a NumPy or CuPy array, a Variable or an NdArray) on the host."""
    if isinstance(value, Variable):
        value = value.d
    elif isinstance(value, NdArray):
        value = value.data
    if array_module_of(value) is not np:
        return to_module(value, np)
    kind = np.asarray(value).dtype.kind
    if kind not in "biuf":
        raise DpnbError(f"{what} expects numbers (a number, an array, a Variable); got "
                        f"{type(value).__name__} of kind {kind!r}. Pass numeric data")
    return value


class MonitorSeries:
    """Logs the mean of the values added over each ``interval`` of indices (of all their
    elements, for arrays) and appends ``<index> <mean>`` lines to ``<name>.series.txt``."""

    def __init__(self, name: str, monitor: Monitor | None = None, interval: int = 1,
                 verbose: bool = True):
        self.name = name
        self.interval = _check_interval("MonitorSeries' interval", interval)
        self.verbose = verbose
        self._path = None if monitor is None else _empty_file(
            _file_stem(monitor, name) + ".series.txt")
        self._flushed_at = -1
        self._values: list = []

    def add(self, index: int, value) -> None:
        """Add ``value`` at ``index``; the mean since the last output is written once ``index``
        is ``interval`` past it."""
        value = _host(value, "MonitorSeries.add")
        if isinstance(value, np.ndarray):
            value = value.copy()
        notify_series_listeners(self.name, index, value)
        self._values.append(value)
        if index - self._flushed_at < self.interval:
            return
        mean = np.mean(np.concatenate([np.ravel(v) for v in self._values]))
        if self.verbose:
            logger.info(f"iter={index} {{{self.name}}}={mean}")
        if self._path is not None:
            with open(self._path, "a") as f:
                f.write(f"{index} {mean:g}\n")
        self._flushed_at = index
        self._values = []


class MonitorTimeElapsed:
    """Logs the seconds spent over each ``interval`` of indices and appends
    ``<index> <seconds> <iterations> <total seconds>`` lines to ``<name>.timer.txt``."""

    def __init__(self, name: str, monitor: Monitor | None = None, interval: int = 100,
                 verbose: bool = True):
        self.name = name
        self.interval = _check_interval("MonitorTimeElapsed's interval", interval)
        self.verbose = verbose
        self._path = None if monitor is None else _empty_file(
            _file_stem(monitor, name) + ".timer.txt")
        self._flushed_at = -1
        self._start = time.time()
        self._lap = self._start

    def add(self, index: int) -> None:
        """Measure the time since the last output (or creation) once ``index`` is
        ``interval`` past the last output."""
        if index - self._flushed_at < self.interval:
            return
        now = time.time()
        elapsed, total, iterations = now - self._lap, now - self._start, index - self._flushed_at
        self._lap = now
        if self.verbose:
            logger.info(f"iter={index} {{{self.name}}}={elapsed}[sec/{iterations}iter] "
                        f"{total}[sec]")
        if self._path is not None:
            with open(self._path, "a") as f:
                f.write(f"{index} {elapsed} {iterations} {total}\n")
        self._flushed_at = index


def _pillow_image():
    """PIL.Image, or an error saying how to install Pillow."""
    try:
        from PIL import Image
    except ImportError as e:
        raise DpnbError("saving monitor images needs Pillow, which is not installed "
                        f"({e}); run `pip install pillow`") from e
    return Image


def _save_png(path: str, image: np.ndarray) -> None:
    """Save an (H, W) or (H, W, 3) image of uint8 or of floats in [0, 1] as PNG.

    Floats become ``uint8(float32(v) * 255)``, as nnabla's image saving does;
    NaN becomes 0."""
    if image.dtype == np.uint16:
        raise DpnbError(f"monitor images are saved as 8-bit PNG; got uint16 pixels for {path}. "
                        "Return uint8 or floats in [0, 1] from normalize_method")
    if image.dtype != np.uint8:
        image = np.where(np.isnan(image), 0, image)
        if np.any(image < 0) or np.any(image > 1):
            raise DpnbError(f"monitor image pixels must lie in [0, 1] (or be uint8); got values "
                            f"in [{image.min()}, {image.max()}] for {path}. Pass a "
                            "normalize_method that maps the images into [0, 1]")
        image = (image.astype(np.float32) * np.float32(255)).astype(np.uint8)
    _pillow_image().fromarray(np.ascontiguousarray(image)).save(path, format="PNG")


class MonitorImage:
    """Saves up to ``num_images`` images of an ``(N, ..., C, H, W)`` batch as
    ``<name>/<index:06d>-<image:03d>.png`` at index 0 and every ``interval`` indices."""

    def __init__(self, name: str, monitor: Monitor, interval: int = 1000, verbose: bool = True,
                 num_images: int = 16,
                 normalize_method: Callable[[np.ndarray], np.ndarray] | None = None):
        if not isinstance(monitor, Monitor):
            raise DpnbError(f"{type(self).__name__} needs a Monitor to write into; got "
                            f"{type(monitor).__name__}. Pass Monitor(save_path)")
        self.name = name
        self.interval = _check_interval(f"{type(self).__name__}'s interval", interval)
        self.verbose = verbose
        self.num_images = _check_count(f"{type(self).__name__}'s num_images", num_images)
        self.normalize_method = normalize_method or self.default_normalize_method
        self.save_dir = _file_stem(monitor, name)
        os.makedirs(self.save_dir, exist_ok=True)

    def default_normalize_method(self, x: np.ndarray) -> np.ndarray:
        """Min-max normalisation of the whole batch into [0, 1]; a constant batch gives zeros."""
        if x.dtype.kind != "f":
            x = x.astype(np.float64)
        low, high = x.min(), x.max()
        if high == low:
            return np.zeros_like(x)
        return (x - low) / (high - low)

    def _due(self, index: int) -> bool:
        return index == 0 or (index + 1) % self.interval == 0

    def _batch(self, var) -> np.ndarray:
        """The first ``num_images`` images as (B, 3 or 1, H, W), normalised, 2 channels padded
        with a channel of ones and more than 3 cut to 3."""
        data = np.array(_host(var, f"{type(self).__name__}.add"), copy=True)
        if data.ndim < 3:
            raise DpnbError(f"{type(self).__name__}.add expects images shaped (N, ..., C, H, W); "
                            f"got shape {data.shape}. Pass a batch of images")
        channels = data.shape[-3]
        data = data.reshape(-1, *data.shape[-3:])[:self.num_images]
        if data.shape[0] == 0:
            raise DpnbError(f"{type(self).__name__}.add got an empty batch of shape {data.shape}; "
                            "pass at least one image")
        data = np.asarray(self.normalize_method(data))
        if channels > 3:
            data = data[:, :3]
        elif channels == 2:
            data = np.concatenate([data, np.ones((data.shape[0], 1, *data.shape[-2:]))], axis=1)
        return data

    def add(self, index: int, var) -> None:
        """Save the images of ``var`` (a Variable, an NdArray or an array) if ``index`` is due."""
        if not self._due(index):
            return
        data = self._batch(var)
        pattern = os.path.join(self.save_dir, f"{index:06d}-{{}}.png")
        for j, image in enumerate(data):
            image = image.transpose(1, 2, 0)
            _save_png(pattern.format(f"{j:03d}"), image[..., 0] if image.shape[-1] == 1 else image)
        if self.verbose:
            logger.info(f"iter={index} {{{self.name}}} are written to {pattern.format('*')}.")


class MonitorImageTile(MonitorImage):
    """Saves up to ``num_images`` images of a batch tiled into one square grid,
    ``<name>/<index:06d>.png``, at index 0 and every ``interval`` indices."""

    def add(self, index: int, var) -> None:
        """Save the tiled images of ``var`` (a Variable, an NdArray or an array) if
        ``index`` is due."""
        if not self._due(index):
            return
        path = os.path.join(self.save_dir, f"{index:06d}.png")
        _save_png(path, tile_images(self._batch(var)))
        if self.verbose:
            logger.info(f"iter={index} {{{self.name}}} is written to {path}.")


def tile_images(data: np.ndarray, padsize: int = 1, padval: float = 0) -> np.ndarray:
    """Lay a (B, C, H, W) batch out row by row on an n x n grid (n = ceil(sqrt(B))), each
    tile followed by ``padsize`` rows and columns of ``padval``; (H', W') where C is 1."""
    data = np.asarray(data)
    if data.ndim != 4:
        raise DpnbError(f"tile_images expects an array shaped (B, C, H, W); got shape "
                        f"{data.shape}. Reshape the batch to four dimensions")
    count, channels, height, width = data.shape
    n = math.isqrt(count)
    n += n * n < count
    step_h, step_w = height + padsize, width + padsize
    tile = np.full((n * step_h, n * step_w, channels), padval, dtype=data.dtype)
    for k in range(count):
        row, col = divmod(k, n)
        tile[row * step_h:row * step_h + height, col * step_w:col * step_w + width] = \
            data[k].transpose(1, 2, 0)
    return tile[..., 0] if channels == 1 else tile


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise DpnbError(f"plotting monitor files needs matplotlib, which is not installed ({e}); "
                        "run `pip install matplotlib`") from e
    return plt


def _read_columns(filename: str, value_column: int) -> tuple[np.ndarray, np.ndarray]:
    """The index column (int64) and one value column (float32) of a monitor's text file."""
    index, values = [], []
    with open(filename) as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            try:
                index.append(int(fields[0]))
                values.append(float(fields[value_column]))
            except (IndexError, ValueError) as e:
                raise DpnbError(f"line {number} of {filename} is not a monitor record "
                                f"(index, then numbers): got {line.strip()!r} ({e}). Pass a file "
                                "written by MonitorSeries or MonitorTimeElapsed") from e
    return np.array(index, dtype=np.int64), np.array(values, dtype=np.float32)


def plot_series(filename: str, plot_kwargs: dict | None = None) -> None:
    """Plot the values of a ``.series.txt`` file against their indices with matplotlib."""
    plt = _pyplot()
    index, values = _read_columns(filename, 1)
    plt.plot(index, values, **(plot_kwargs or {}))


_SECONDS_PER = {"s": 1, "m": 60, "h": 3600, "d": 3600 * 24}


def plot_time_elapsed(filename: str, elapsed: bool = False, unit: str = "s",
                      plot_kwargs: dict | None = None) -> None:
    """Plot a ``.timer.txt`` file: the time of each interval, or the total time where
    ``elapsed``, in seconds, minutes, hours or days (``unit`` "s", "m", "h", "d")."""
    if unit not in _SECONDS_PER:
        raise DpnbError(f"plot_time_elapsed's unit must be one of 's', 'm', 'h', 'd'; got "
                        f"{unit!r}. Pass one of them")
    plt = _pyplot()
    index, values = _read_columns(filename, 3 if elapsed else 1)
    plt.plot(index, values / np.float32(_SECONDS_PER[unit]), **(plot_kwargs or {}))
