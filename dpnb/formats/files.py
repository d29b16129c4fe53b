"""Files of parameters and solver states: which format a path or file object is in,
atomic writes (a crash while saving leaves the previous file intact), and clear
errors for missing, empty or broken files."""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO

import numpy as np

from ..errors import DpnbError
from .checked_read import NUMERIC, Reading, decoding, npz_arrays


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Write to a temporary file beside ``path``, then rename it over ``path``; the
    temporaries of earlier writes of ``path`` that were killed are removed first.

    The writer holds a lock on its temporary until it is renamed, so that a sweep
    (``sweep_temporaries``) never removes the temporary of a write still going on."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    sweep_temporaries(directory, _temporary_pattern(os.path.basename(path)))
    fd, tmp = _locked_temporary(directory, os.path.basename(path))
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)  # releases the lock
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _temporary_pattern(basename: str) -> re.Pattern:
    """The names ``atomic_write`` gives the temporaries of a file named ``basename``."""
    return re.compile(rf"\.{re.escape(basename)}\.[^.]+\.tmp")


def _locked_temporary(directory: str, basename: str) -> tuple[int, str]:
    """A new temporary file for ``basename`` in ``directory``, locked (fd, path).  A sweep
    can take the lock in the moment between creating and locking, and remove the file:
    then it is made again."""
    while True:
        fd, tmp = tempfile.mkstemp(prefix=f".{basename}.", suffix=".tmp", dir=directory)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _same_file(fd, tmp):
            return fd, tmp
        os.close(fd)


def _same_file(fd: int, path: str) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def sweep_temporaries(directory: str, pattern: re.Pattern) -> list[str]:
    """Remove the temporaries in ``directory`` whose names match ``pattern`` and that no
    live writer holds (a write that was killed left them); the paths removed."""
    removed = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if pattern.fullmatch(name) and _remove_if_abandoned(path):
            removed.append(path)
    return removed


def _remove_if_abandoned(path: str) -> bool:
    """Remove ``path`` if no process holds its lock; whether it was removed."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, IsADirectoryError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    try:
        if not _same_file(fd, path):  # renamed into place by its writer meanwhile
            return False
        os.unlink(path)
        return True
    finally:
        os.close(fd)


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


def save_arrays(target, arrays: dict[str, np.ndarray]) -> None:
    """Save named arrays as an .npz archive: atomically to a path, or into a file object."""
    write_target(target, lambda f: np.savez(f, **arrays))


def load_arrays(source, what: str) -> dict[str, np.ndarray]:
    """Read an archive written by ``save_arrays`` from a path or a file object, each
    array's header checked before its data is read; ``what`` names it in errors."""
    require_readable(source, what)
    reading = Reading(f"{what} file {describe(source)}")
    with decoding(reading, ".npz", f"dpnb {what}"), zipfile.ZipFile(source, "r") as archive:
        return dict(npz_arrays(reading, archive, NUMERIC + "U"))
