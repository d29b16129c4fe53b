"""nnabla's ``nnabla.utils.get_file_handle``: open the files of nnabla's network format
(``.nnp`` zips, ``.h5`` parameters, ``.nntxt``/``.prototxt`` text, ``.protobuf``
binary) for reading or writing, from paths, file objects or members of an ``.nnp``."""
from __future__ import annotations

import contextlib
import io
import os
import zipfile
from collections.abc import Iterator

import h5py

from ..errors import DpnbError
from ..formats.files import describe
from ..formats.checked_read import Reading, spooled_member

_TEXT = (".nntxt", ".prototxt")
_KINDS = (".nnp", ".h5", ".protobuf") + _TEXT


class FileHandlerContext:
    """A namespace that the readers and writers of network files fill as they go."""


def _unsupported(ext: str, path) -> DpnbError:
    return DpnbError(f"cannot open {describe(path)} as {ext!r}: nnabla's network files are "
                     f"{', '.join(_KINDS)}; name the file (or pass ext) accordingly")


def _is_file_object(path) -> bool:
    return hasattr(path, "read") or hasattr(path, "write")


@contextlib.contextmanager
def _handle(path, ext: str, mode: str) -> Iterator:
    """``path`` opened as ``ext`` to read (``mode`` "r") or write ("w"): a ZipFile, an h5py
    File (read from a copy in memory where ``path`` is a file object), the file object
    itself, or a text or binary file."""
    if ext not in _KINDS:
        raise _unsupported(ext, path)
    if ext == ".nnp":
        with zipfile.ZipFile(path, mode) as archive:
            yield archive
    elif ext == ".h5":
        source = path
        if mode == "r" and not isinstance(path, (str, os.PathLike)):
            source = io.BytesIO(path.read())
        with h5py.File(source, mode) as h5:
            yield h5
    elif _is_file_object(path):
        yield path
    else:
        with open(path, mode if ext in _TEXT else mode + "b") as f:
            yield f


@contextlib.contextmanager
def get_file_handle_load(nnp: zipfile.ZipFile | None, path, ext: str) -> Iterator:
    """A handle to read ``path`` as ``ext``: a ZipFile for ``.nnp``, an h5py File for
    ``.h5``, else a text or binary file.  With ``nnp`` (an open ``.nnp``), ``path``
    names a member of it.  Handles opened here are closed on leaving; a file object
    given is left open."""
    if nnp is not None:
        info = nnp.getinfo(path)
        Reading(f"member {path!r} of network file {nnp.filename!r}").declare_members([info])
        if ext == ".h5":
            with spooled_member(nnp, info) as member, h5py.File(member, "r") as h5:
                yield h5
        else:
            with nnp.open(info, "r") as member:
                yield member
        return
    with _handle(path, ext, "r") as handle:
        yield handle


@contextlib.contextmanager
def get_file_handle_save(path, ext: str) -> Iterator:
    """A handle to write ``path`` as ``ext`` (as ``get_file_handle_load`` gives them); a
    file object given is left open and rewound afterwards, to be read back at once."""
    try:
        with _handle(path, ext, "w") as handle:
            yield handle
    finally:
        if hasattr(path, "seek"):
            path.seek(0)


def get_buf_type(filename: str) -> str:
    """The kind of a solver-state member named ``<optimizer>_<kind>.<ext>`` inside an
    ``.nnp`` (``optimizer_states.h5`` -> ``"h5"``), lower-cased."""
    last = os.fspath(filename).split("_")[-1]
    if "." not in last:
        raise DpnbError(f"get_buf_type: {filename!r} is not named <name>_<kind>.<ext>, as "
                        "solver-state members of an .nnp are (e.g. optimizer_states.h5)")
    return last.split(".")[1].lower()
