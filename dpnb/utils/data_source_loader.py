"""nnabla's download helpers: ``get_data_home()`` (``~/nnabla_data``) and
``download(url)``, which uses a file already there without the network, or else
downloads it atomically, and fails offline with the path to put the file at."""
from __future__ import annotations

import contextlib
import logging
import os
import urllib.error
import urllib.request
from typing import BinaryIO

from ..errors import DpnbError
from ..fileio import atomic_write

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
