"""nnabla's ``data_source_loader``: the download helpers ``get_data_home()``
(``~/nnabla_data``) and ``download(url)``, which uses a file already there without
the network, or else downloads it atomically, and fails offline with the path to
put the file at; and the readers of a data set's files (``FileReader``) and their
contents (``load_image``, ``load_csv``, ``load_npy``, ``load_audio``, by extension
through ``load(ext)``)."""
from __future__ import annotations

import contextlib
import csv
import io
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
import wave
from collections.abc import Callable, Iterator
from typing import IO, Any, BinaryIO

import numpy as np

from ..errors import DpnbError, DpnbValueError
from ..formats.files import atomic_write
from .image_utils import imread, imresize

logger = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT_S = 60
"""Seconds a download may wait for the server on one read before it fails."""
_CHUNK = 1 << 20


def get_data_home() -> str:
    """nnabla's data directory, ``~/nnabla_data`` (``./nnabla_data`` where the home
    directory is ``/``), created if missing."""
    home = os.path.expanduser("~/nnabla_data")
    if home == "/nnabla_data":
        home = "./nnabla_data"
    os.makedirs(home, exist_ok=True)
    return home


def _fetch(url: str, path: str) -> None:
    """Stream ``url`` into ``path`` through a temporary file renamed at the end."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    logger.info("downloading %s to %s", url, path)
    received = 0
    try:
        with contextlib.closing(urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S)) as r, \
                atomic_write(path) as f:
            while chunk := r.read(_CHUNK):
                f.write(chunk)
                received += len(chunk)
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise DpnbError(f"could not download {url} ({e}); where this machine is offline, get the "
                        f"file elsewhere and put it at {path!r}, then run again") from e
    logger.info("downloaded %d bytes to %s", received, path)


def download(url: str, output_file: str | os.PathLike | None = None, open_file: bool = True,
             allow_overwrite: bool = False) -> BinaryIO | None:
    """Make ``url``'s file present at ``output_file`` (default: the data home and
    the URL's file name), downloading it only where it is missing or
    ``allow_overwrite``; returns it opened for binary reading if ``open_file``."""
    if output_file is None:
        name = url.split("/")[-1]
        if not name:
            raise DpnbError(f"the URL {url!r} ends with '/', so it names no file; pass "
                            "output_file= to say where to save it")
        path = os.path.join(get_data_home(), name)
    else:
        path = os.fspath(output_file)
    if os.path.exists(path) and not allow_overwrite:
        logger.info("%s already exists and is used; remove it to download it again", path)
    else:
        _fetch(url, path)
    if not open_file:
        return None
    return open(path, "rb")


class FileReader:
    """Opens the files of a data set: the file at ``base_uri`` (a local path or an
    http(s) URL) and files named relative to it, as a CSV data set names its
    images.  nnabla's S3 URIs need boto3 and AWS credentials, which dpnb does not
    use: they are refused."""

    def __init__(self, base_uri: str | os.PathLike):
        self._base_uri = os.fspath(base_uri)
        self.base_ext = os.path.splitext(self._base_uri)[1].lower()
        scheme = self._base_uri.split("://", 1)[0].lower() if "://" in self._base_uri else ""
        if scheme == "s3":
            raise DpnbError(f"{self._base_uri!r} is on S3, which dpnb does not read; download "
                            "the data set and pass its local path")
        self._file_type = "http" if scheme in ("http", "https") else "file"

    def _resolve(self, filename: str | None) -> str:
        if filename is None:
            return self._base_uri
        filename = filename.replace("\\", "/")
        if self._file_type == "http":
            return urllib.parse.urljoin(self._base_uri, filename)
        base_dir = os.path.dirname(self._base_uri.replace("\\", "/"))
        return os.path.abspath(os.path.join(base_dir, filename))

    @contextlib.contextmanager
    def open(self, filename: str | None = None, textmode: bool = False,
             encoding: str = "utf-8-sig") -> Iterator[IO]:
        """The file ``filename`` (relative to the base URI's folder; default the
        base URI itself), open for reading, with its extension as ``f.ext``."""
        path = self._resolve(filename)
        if self._file_type == "http":
            try:
                response = urllib.request.urlopen(path, timeout=DOWNLOAD_TIMEOUT_S)
                with contextlib.closing(response):
                    data = response.read()
            except (urllib.error.URLError, OSError, ValueError) as e:
                raise DpnbError(f"could not read {path} ({e}); where this machine is offline, "
                                "download the data set and pass its local path") from e
            f: Any = io.StringIO(data.decode(encoding)) if textmode else io.BytesIO(data)
        elif textmode:
            f = open(path, "rt", encoding=encoding)
        else:
            f = open(path, "rb")
        f.ext = os.path.splitext(path)[1].lower()
        with f:
            yield f


_SIGNATURES = (
    (".bmp", 0, (b"BM",)),
    (".pgm", 0, (b"P5\n",)),
    (".jpg", 0, (b"\xff\xd8\xff",)),
    (".png", 0, (b"\x89PNG\r\n\x1a\n",)),
    (".tif", 0, (b"I I",)),
    (".eps", 0, (b"\xc5\xd0\xd3\xc6",)),
    (".gif", 0, (b"GIF87a", b"GIF89a")),
    (".ico", 0, (b"\x00\x00\x01\x00",)),
    (".dcm", 0x80, (b"DICM",)),
    (".wav", 0, (b"RIFF",)),
)
"""Magic bytes of the formats nnabla recognises in a file object without a name."""


def get_file_extension(source: Any) -> str:
    """The lower-case extension of ``source``: of its name for a path or a named
    file object, else guessed from the leading bytes of a file object ("" if
    unknown)."""
    if isinstance(source, (str, os.PathLike)):
        return os.path.splitext(os.fspath(source))[1].lower()
    if not hasattr(source, "read"):
        return ""
    if isinstance(getattr(source, "name", None), str):
        return os.path.splitext(source.name)[1].lower()
    start = source.tell()
    head = source.read(0x80 + 4)
    source.seek(start)
    for ext, offset, magics in _SIGNATURES:
        if any(head[offset:offset + len(m)] == m for m in magics):
            return ext
    return ""


class ResourceFileReader:
    """One resource given as a path (or URL) or as a seekable binary file object,
    with its extension (``ext``, from the name or guessed from the contents), to
    be opened for reading as binary."""

    def __init__(self, source: Any):
        self._source = source
        if isinstance(source, (str, os.PathLike)):
            self.handler: Any = FileReader(source)
            self.ext = self.handler.base_ext
            if not self.ext:
                with self.handler.open() as f:
                    self.ext = get_file_extension(f)
        elif hasattr(source, "read") and self._is_binary_seekable(source):
            self.handler = source
            self.ext = get_file_extension(source)
        else:
            raise DpnbValueError(f"ResourceFileReader takes a path, or a seekable binary file "
                                 f"object (open(path, 'rb'), io.BytesIO), got "
                                 f"{type(source).__name__}")

    @staticmethod
    def _is_binary_seekable(source: Any) -> bool:
        try:
            source.seek(0)
            first = source.read(1)
            source.seek(0)
        except Exception:
            return False
        return isinstance(first, bytes)

    @contextlib.contextmanager
    def open(self) -> Iterator[IO]:
        """The resource, open for binary reading from its start, with ``f.ext``."""
        if isinstance(self.handler, FileReader):
            with self.handler.open() as f:
                f.ext = f.ext or self.ext
                yield f
        else:
            self.handler.seek(0)
            self.handler.ext = self.ext
            yield self.handler
            self.handler.seek(0)


def load_image_imread(file: Any, shape: tuple[int, int, int] | None = None,
                      max_range: float = 1.0) -> np.ndarray:
    """An image file as a (channel, height, width) array, resized to ``shape``
    (channel, height, width) where given, its [0, 255] values scaled to
    [0, ``max_range``] (as float), or left as uint8 where ``max_range`` < 0."""
    img = imread(file)
    gray = img.ndim == 2
    height, width = img.shape[:2]
    channels = 1 if gray else img.shape[2]
    if shape is not None:
        if len(shape) != 3:
            raise DpnbValueError(f"shape must be (channel, height, width), got {shape!r}")
        if shape[0] != channels:
            raise DpnbValueError(f"the image has {channels} channel(s), but shape {tuple(shape)} "
                                 f"asks for {shape[0]}; give shape[0]={channels}")
        if (shape[1], shape[2]) != (height, width):
            img = imresize(img, (shape[2], shape[1]))
            height, width = shape[1], shape[2]
    img = img.reshape(1, height, width) if gray else img.transpose(2, 0, 1)
    if max_range < 0:
        return img
    full = 65535.0 if img.dtype == np.uint16 else 255.0
    return img if max_range == full else img * (max_range / full)


def load_image(file: Any, shape: tuple[int, int, int] | None = None,
               normalize: bool = False) -> np.ndarray:
    """An image file as a (channel, height, width) array: uint8, or float in
    [0, 1] with ``normalize``."""
    return load_image_imread(file, shape, 1.0 if normalize else -1)


def _reshaped(array: np.ndarray, shape: Any, source: Any) -> np.ndarray:
    if shape is None:
        return array
    try:
        return array.reshape(shape)
    except ValueError as e:
        raise DpnbValueError(f"the {array.shape} array of {getattr(source, 'name', source)!r} "
                             f"cannot take shape {shape!r} ({e})") from e


def load_csv(file: Any, shape: Any = None, normalize: bool = False) -> np.ndarray:
    """A CSV file of numbers (a binary file object) as a float array of its rows,
    reshaped to ``shape`` where given; empty rows are skipped."""
    lines = [line.decode("utf-8") if isinstance(line, bytes) else line
             for line in file.readlines()]
    try:
        rows = [[float(v) for v in row] for row in csv.reader(lines) if row]
    except ValueError as e:
        raise DpnbValueError(f"{getattr(file, 'name', 'the CSV file')!r} holds a value that is "
                             f"not a number ({e}); a CSV data file holds numbers only") from e
    return _reshaped(np.array(rows), shape, file)


def load_npy(path: Any, shape: Any = None, normalize: bool = False) -> np.ndarray:
    """A .npy file (a path or a file object) as its array, reshaped to ``shape``
    where given."""
    return _reshaped(np.load(path, allow_pickle=True), shape, path)


_WAV_DTYPES = {1: np.uint8, 2: np.int16, 4: np.int32}


def load_wav(path: Any, shape: Any = None, normalize: bool = False) -> np.ndarray:
    """A PCM .wav file as its (samples, channels) integer array (uint8, int16 or
    int32 by sample width), reshaped to ``shape`` where given."""
    with wave.open(path, "rb") as w:
        width, channels = w.getsampwidth(), w.getnchannels()
        frames = w.readframes(w.getnframes())
    if width not in _WAV_DTYPES:
        raise DpnbValueError(f"the .wav file has {8 * width}-bit samples; dpnb reads 8-, 16- and "
                             "32-bit PCM: convert it to 16-bit")
    samples = np.frombuffer(frames, dtype=np.dtype(_WAV_DTYPES[width]).newbyteorder("<"))
    return _reshaped(samples.astype(_WAV_DTYPES[width]).reshape(-1, channels), shape, path)


def load_audio(file: Any, shape: Any = None, normalize: bool = False) -> np.ndarray:
    """An audio file as its (samples, channels) array: nnabla reads it with pydub
    where installed, else as a PCM .wav file, which is what dpnb does."""
    return load_wav(file, shape, normalize)


LoadFunction = Callable[..., np.ndarray]
_LOAD_FUNCTIONS: dict[str, LoadFunction] = {
    ".bmp": load_image, ".jpg": load_image, ".jpeg": load_image, ".png": load_image,
    ".gif": load_image, ".tif": load_image, ".tiff": load_image,
    ".csv": load_csv, ".npy": load_npy, ".wav": load_audio,
}


def load(ext: str) -> LoadFunction:
    """The function that loads a file of extension ``ext`` (".png", ".csv", ...):
    called as ``f(file, shape=None, normalize=False)``."""
    try:
        return _LOAD_FUNCTIONS[ext.lower()]
    except KeyError:
        raise DpnbValueError(f"files of extension {ext!r} are not supported; use one of "
                             f"{sorted(_LOAD_FUNCTIONS)}") from None
