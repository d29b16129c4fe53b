"""Files of parameters and solver states: which format a path or file object is in,
atomic writes (a crash while saving leaves the previous file intact), and clear
errors for missing, empty or broken files."""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
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


def is_path(target) -> bool:
    """Whether ``target`` is a path (else it is a file object)."""
    return isinstance(target, (str, os.PathLike))


def describe(path) -> str:
    """A path or file object as error messages show it."""
    return repr(os.fspath(path)) if is_path(path) else repr(path)


def file_format(target, extension: str | None, supported: Sequence[str], action: str,
                what: str) -> str:
    """The format of ``target``, as nnabla tells it: a path's extension, or for a file
    object ``extension``; one of ``supported``, or a DpnbError naming them."""
    ext = os.path.splitext(os.fspath(target))[1] if is_path(target) else (extension or "")
    if ext not in supported:
        names = ", ".join(supported)
        hint = ("name the file with one of these extensions" if is_path(target)
                else "pass extension= one of them with a file object")
        raise DpnbError(f"cannot {action} {what} in the {ext or 'extensionless'!r} format "
                        f"({describe(target)}): {what} can be in {names}; {hint}")
    return ext


def write_target(target, write: Callable[[BinaryIO], None]) -> None:
    """Run ``write`` on a binary file: atomically replacing a path, or on a file object,
    which is rewound afterwards as nnabla does, so that it can be read back at once."""
    if not is_path(target):
        write(target)
        if hasattr(target, "seek"):
            target.seek(0)
        return
    with atomic_write(target) as f:
        write(f)


def require_readable(source, what: str) -> None:
    """Refuse a path that does not exist or is empty before any format reads it."""
    if not is_path(source):
        return
    if not os.path.exists(source):
        raise DpnbError(f"{what} file {describe(source)} does not exist; check the path")
    if os.path.getsize(source) == 0:
        raise DpnbError(f"{what} file {describe(source)} is empty (0 bytes): it was not saved "
                        "completely; save it again")


def broken_file(source, fmt: str, what: str, error: BaseException) -> DpnbError:
    """The error for a file that cannot be read in format ``fmt``."""
    return DpnbError(f"{what} file {describe(source)} is truncated or not a {fmt} {what} file "
                     f"({type(error).__name__}: {error}); save it again")


def save_arrays(target, arrays: dict[str, np.ndarray]) -> None:
    """Save named arrays as an .npz archive: atomically to a path, or into a file object."""
    write_target(target, lambda f: np.savez(f, **arrays))


def load_arrays(source, what: str) -> dict[str, np.ndarray]:
    """Read an archive written by ``save_arrays`` from a path or a file object;
    ``what`` names it in errors."""
    require_readable(source, what)
    try:
        with np.load(source, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except Exception as e:
        raise DpnbError(f"{what} file {describe(source)} is truncated or not a dpnb {what} file "
                        f"({type(e).__name__}: {e}); save it again") from e
