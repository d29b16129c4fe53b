"""nnabla's network files as containers: which kinds there are, and the bytes of each.

``.nnp`` is a zip of ``nnp_version.txt``, ``network.nntxt`` (protobuf text) and
``parameter.h5`` / ``parameter.protobuf``; ``.nntxt``/``.prototxt`` (text) and
``.protobuf`` (binary) hold the NNablaProtoBuf message alone.  Reading merges every
definition and parameter file a network file holds, as nnabla does."""
from __future__ import annotations

import io
import os
import zipfile
from typing import BinaryIO

from google.protobuf import text_format

from ..errors import DpnbError
from . import nnabla_pb2, parameter_files
from .files import atomic_write, describe

NETWORK_EXTENSIONS = (".nnp", ".nntxt", ".prototxt", ".protobuf")


def network_extension(filename, extension: str) -> str:
    """The network-file kind to write: ``filename``'s extension (``extension`` for a file
    object or a name without one), refused unless nnabla writes networks as it."""
    ext = extension
    if isinstance(filename, (str, os.PathLike)):
        ext = os.path.splitext(os.fspath(filename))[1] or extension
    if ext not in NETWORK_EXTENSIONS:
        raise DpnbError(f"cannot save a network as {ext!r} ({filename!r}): nnabla's network "
                        f"files are {', '.join(NETWORK_EXTENSIONS)}; name the file so")
    return ext


def nnp_bytes(proto: nnabla_pb2.NNablaProtoBuf, params: dict, parameter_format: str) -> bytes:
    """The .nnp archive: version, network text, and ``params`` (name -> nn.Variable) in
    ``parameter_format`` (.h5 or .protobuf)."""
    entries = parameter_files.parameter_entries(params)
    if parameter_format == ".protobuf":
        parameter_bytes = parameter_files.to_proto(entries).SerializeToString()
    else:
        parameter_file = io.BytesIO()
        parameter_files.save(parameter_file, parameter_format, entries)
        parameter_bytes = parameter_file.getvalue()
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as nnp:
        nnp.writestr("nnp_version.txt", f"{parameter_files.NNP_VERSION}\n")
        nnp.writestr("network.nntxt", text_format.MessageToString(proto))
        nnp.writestr(f"parameter{parameter_format}", parameter_bytes)
    return archive.getvalue()


def _write(filename, data: bytes, text: bool) -> None:
    """``data`` to a path (atomically) or into a file object (text or binary as it takes)."""
    if isinstance(filename, (str, os.PathLike)):
        with atomic_write(filename) as f:
            f.write(data)
        return
    target: BinaryIO = filename
    target.write(data.decode("utf-8") if text and isinstance(target, io.TextIOBase) else data)


def write_network(filename, ext: str, proto: nnabla_pb2.NNablaProtoBuf, params: dict,
                  parameter_format: str = ".h5") -> None:
    """Write ``proto`` as the network file kind ``ext`` (from ``network_extension``) to a
    path (atomically) or a file object; an .nnp holds ``params`` beside it."""
    if ext == ".nnp":
        _write(filename, nnp_bytes(proto, params, parameter_format), text=False)
    elif ext == ".protobuf":
        _write(filename, proto.SerializeToString(), text=False)
    else:
        _write(filename, text_format.MessageToString(proto).encode("utf-8"), text=True)


def read_network_file(source, extension: str, expected=None
                      ) -> tuple[nnabla_pb2.NNablaProtoBuf, list[parameter_files.Entry]]:
    """(every definition merged, every parameter decoded and checked) of a network file:
    a path (its extension names the format), or a file object (``extension`` does),
    read from its start where it can seek; ``expected`` gives the destination's
    shapes, so that misfits are not read."""
    ext = extension
    if isinstance(source, (str, os.PathLike)):
        ext = os.path.splitext(os.fspath(source))[1]
        if not os.path.exists(source):
            raise DpnbError(f"network file {describe(source)} does not exist; check the path")
    elif getattr(source, "seekable", lambda: False)():
        source.seek(0)
    if ext not in NETWORK_EXTENSIONS:
        raise DpnbError(f"cannot read {describe(source)} as a network file: the formats are "
                        f"{', '.join(NETWORK_EXTENSIONS)}, got {ext!r}")
    proto = nnabla_pb2.NNablaProtoBuf()
    entries = parameter_files.read(source, ext, proto, expected, what="network")
    return proto, entries
