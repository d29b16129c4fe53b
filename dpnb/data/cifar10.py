"""Reader for the official CIFAR-10 python archive (``cifar-10-python.tar.gz``,
or the ``cifar-10-batches-py`` folder it extracts to), and its download.

The batches are Python pickles; they are read with an unpickler that builds
only NumPy arrays, lists, dicts and strings, so a tampered file cannot run code."""
from __future__ import annotations

import codecs
import contextlib
import hashlib
import io
import logging
import os
import pickle
import tarfile
import urllib.error
import urllib.request

import numpy as np

from ..errors import DpnbError
from ..formats.files import atomic_write
from .datasets import Dataset

logger = logging.getLogger(__name__)

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
ARCHIVE = "cifar-10-python.tar.gz"
FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
IMAGE_SHAPE = (3, 32, 32)

# The globals a CIFAR-10 pickle may name: NumPy's array reconstruction, found
# through public objects (NumPy 1 pickles name numpy.core, NumPy 2 numpy._core),
# and the bytes constructor that Python 3 writes into protocol-2 pickles.
_RECONSTRUCT = np.ndarray((0,)).__reduce__()[0]
_SCALAR = np.int64(0).__reduce__()[0]
_ALLOWED = {"_reconstruct": _RECONSTRUCT, "scalar": _SCALAR, "ndarray": np.ndarray,
            "dtype": np.dtype}


class _ArrayUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global except NumPy's array reconstruction."""

    def find_class(self, module: str, name: str):
        if module.split(".")[0] == "numpy" and name in _ALLOWED:
            return _ALLOWED[name]
        if (module, name) == ("_codecs", "encode"):
            return codecs.encode
        raise pickle.UnpicklingError(f"unexpected object {module}.{name} in a CIFAR-10 batch")


def _missing_message(data_dir: str) -> str:
    files = ", ".join(TRAIN_BATCHES + (TEST_BATCH,))
    return (f"no CIFAR-10 data in {data_dir!r}: expected the official python archive "
            f"{ARCHIVE} there, or the folder {FOLDER}/ it extracts to, holding {files}. "
            f"Download it from {CIFAR10_URL} into that folder (or pass download=True / "
            "--download where the machine is online)")


def _parse_batch(raw: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 3, 32, 32) uint8 and labels (N, 1) int32 from one pickled batch."""
    try:
        batch = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
        batch = {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}
        data = np.asarray(batch["data"])
        labels = np.asarray(batch["labels"], dtype=np.int32).reshape(-1, 1)
    except Exception as e:
        raise DpnbError(f"CIFAR-10 batch {where} is corrupt or truncated "
                        f"({type(e).__name__}: {e}); delete it and download the archive "
                        f"again from {CIFAR10_URL}") from e
    size = int(np.prod(IMAGE_SHAPE))
    if (data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != size
            or len(labels) != len(data) or not ((labels >= 0) & (labels < 10)).all()):
        raise DpnbError(f"CIFAR-10 batch {where} has unexpected contents: expected uint8 data "
                        f"(N, {size}) and N labels in 0..9, got data {data.dtype} {data.shape} "
                        f"and {len(labels)} labels; delete it and download the archive again")
    return data.reshape((-1,) + IMAGE_SHAPE), labels


def _read_folder(folder: str) -> dict[str, bytes]:
    missing = [n for n in TRAIN_BATCHES + (TEST_BATCH,)
               if not os.path.isfile(os.path.join(folder, n))]
    if missing:
        raise DpnbError(f"the CIFAR-10 folder {folder!r} lacks {', '.join(missing)}; extract "
                        f"{ARCHIVE} again (from {CIFAR10_URL})")
    raws = {}
    for name in TRAIN_BATCHES + (TEST_BATCH,):
        with open(os.path.join(folder, name), "rb") as f:
            raws[name] = f.read()
    return raws


def _read_archive(path: str) -> dict[str, bytes]:
    raws = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for name in TRAIN_BATCHES + (TEST_BATCH,):
                try:
                    member = tar.extractfile(f"{FOLDER}/{name}")
                except KeyError:
                    member = None
                if member is None:
                    raise DpnbError(f"{path!r} is not the CIFAR-10 python archive: it has no "
                                    f"{FOLDER}/{name}; download it again from {CIFAR10_URL}")
                raws[name] = member.read()
    except (tarfile.TarError, EOFError, OSError) as e:
        raise DpnbError(f"the CIFAR-10 archive {path!r} is corrupt or truncated "
                        f"({type(e).__name__}: {e}); delete it and download it again from "
                        f"{CIFAR10_URL}") from e
    return raws


def cifar10_available(data_dir: str | os.PathLike) -> bool:
    """Whether ``data_dir`` holds the archive or its extracted folder (unchecked)."""
    data_dir = os.fspath(data_dir)
    return (os.path.isdir(os.path.join(data_dir, FOLDER))
            or os.path.isfile(os.path.join(data_dir, ARCHIVE)))


def load_cifar10(data_dir: str | os.PathLike, download: bool = False) -> Dataset:
    """CIFAR-10 from ``data_dir``: the extracted folder if present, else the archive
    (read without extracting it); ``download=True`` fetches the archive first
    when neither is there.  Images stay uint8 (scaled to 0..1 per batch)."""
    data_dir = os.fspath(data_dir)
    folder, archive = os.path.join(data_dir, FOLDER), os.path.join(data_dir, ARCHIVE)
    if not cifar10_available(data_dir):
        if not download:
            raise DpnbError(_missing_message(data_dir))
        download_cifar10(data_dir)
    if os.path.isdir(folder):
        raws, where = _read_folder(folder), folder
    else:
        raws, where = _read_archive(archive), archive
    parts = {name: _parse_batch(raw, f"{name} in {where!r}") for name, raw in raws.items()}
    train_images = np.concatenate([parts[n][0] for n in TRAIN_BATCHES])
    train_labels = np.concatenate([parts[n][1] for n in TRAIN_BATCHES])
    test_images, test_labels = parts[TEST_BATCH]
    return Dataset("cifar10", train_images, train_labels, test_images, test_labels, 10,
                   scale=1 / 255)


def download_cifar10(data_dir: str | os.PathLike, url: str = CIFAR10_URL,
                     md5: str | None = CIFAR10_MD5, timeout: float = 30) -> str:
    """Download the archive into ``data_dir`` (atomically, checked against ``md5``)
    and return its path; fails with a clear error where the machine is offline."""
    data_dir = os.fspath(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, ARCHIVE)
    logger.info("downloading %s to %s", url, path)
    digest = hashlib.md5()
    try:
        with contextlib.closing(urllib.request.urlopen(url, timeout=timeout)) as response, \
                atomic_write(path) as f:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                f.write(chunk)
            if md5 is not None and digest.hexdigest() != md5:
                raise DpnbError(f"the download from {url} has MD5 {digest.hexdigest()}, expected "
                                f"{md5}; it is damaged, try again")
    except (urllib.error.URLError, OSError) as e:
        raise DpnbError(f"could not download CIFAR-10 from {url} ({e}); this machine may be "
                        f"offline: download {ARCHIVE} elsewhere and put it in {data_dir!r}") from e
    return path
