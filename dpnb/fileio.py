"""Atomic files: a crash while saving leaves the previous file intact."""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np

from .errors import DpnbError


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Write to a temporary file beside ``path``, then rename it over ``path``."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def describe(path) -> str:
    """A path or file object as error messages show it."""
    return repr(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else repr(path)


def require_npz(path, action: str, what: str, extension: str | None = None) -> None:
    """Refuse a file of another format than dpnb's .npz: by the path's extension, or
    for a file object by ``extension``, so that no other format is written or
    read as .npz without a word."""
    is_path = isinstance(path, (str, os.PathLike))
    ext = os.path.splitext(os.fspath(path))[1] if is_path else (extension or "")
    if ext != ".npz":
        hint = "name the file *.npz" if is_path else "pass extension='.npz' with a file object"
        raise DpnbError(f"cannot {action} {what} in the {ext or 'extensionless'!r} format "
                        f"({describe(path)}): dpnb's {what} files are .npz; {hint}")


def save_arrays(target, arrays: dict[str, np.ndarray]) -> None:
    """Save named arrays as an .npz archive: atomically to a path, or into a file object."""
    if not isinstance(target, (str, os.PathLike)):
        np.savez(target, **arrays)
        return
    with atomic_write(target) as f:
        np.savez(f, **arrays)


def load_arrays(source, what: str) -> dict[str, np.ndarray]:
    """Read an archive written by ``save_arrays`` from a path or a file object;
    ``what`` names it in errors."""
    if isinstance(source, (str, os.PathLike)) and not os.path.exists(source):
        raise DpnbError(f"{what} file {describe(source)} does not exist; check the path")
    try:
        with np.load(source, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except Exception as e:
        raise DpnbError(f"{what} file {describe(source)} is truncated or not a dpnb {what} file "
                        f"({type(e).__name__}: {e}); save it again") from e
