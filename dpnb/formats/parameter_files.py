"""Parameter files in every format nnabla reads (.h5, .protobuf, .nntxt/.prototxt, .nnp)
and dpnb's own .npz, laid out as nnabla 1.39 lays them out.

A parameter travels as ``(name, array, need_grad)``; writers take them as an
iterable, read lazily, so that a value failing mid-write leaves the file unwritten."""
from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

import h5py
import numpy as np
from google.protobuf import text_format

from ..context import to_module
from ..errors import DpnbError
from .files import describe, file_format, is_path, require_readable, write_target
from . import nnabla_pb2
from .checked_read import (NUMERIC, Reading, decoding, h5_array, h5_attribute, h5_datasets,
                           npz_arrays, proto_array, read_whole, spooled_member, zip_members)

Entry = tuple[str, np.ndarray, bool]

FORMATS = (".h5", ".protobuf", ".nntxt", ".prototxt", ".nnp", ".npz")
TEXT_FORMATS = (".nntxt", ".prototxt")
PROTO_FORMATS = (".protobuf",) + TEXT_FORMATS  # whose parameters load_parameters returns in its proto
NNP_VERSION = "0.1"  # what nnabla 1.39 writes into nnp_version.txt
NNP_PARAMETER_FILE = "parameter.h5"  # nnabla's default parameter file inside .nnp
NEED_GRAD_KEY = "__need_grad__"  # dpnb's .npz: the names of the parameters that need grad
WHAT = "parameter"


def parameter_entries(params: dict) -> Iterator[Entry]:
    """The entries of named parameters (nn.Variables), their data as host arrays, read
    lazily as the writers want them."""
    return ((name, to_module(v.d, np), v.need_grad) for name, v in params.items())


def _write_h5(f: BinaryIO, entries: Iterable[Entry]) -> None:
    """One dataset per parameter (nested groups by '/'), attributes need_grad and index."""
    with h5py.File(f, "w") as h5:
        for index, (name, array, need_grad) in enumerate(entries):
            h5[name] = array
            h5[name].attrs["need_grad"] = bool(need_grad)
            h5[name].attrs["index"] = index


def _read_h5(f, reading: Reading) -> list[Entry]:
    """The datasets of an .h5 parameter file, in the order of their ``index``."""
    entries = []
    with h5py.File(f, "r") as h5:
        found = []
        for seen, (name, dataset) in enumerate(h5_datasets(h5)):
            index = h5_attribute(reading, dataset, "index")
            found.append((seen if index is None else int(index), seen, name, dataset))
        for _, _, name, dataset in sorted(found, key=lambda e: e[:2]):
            array = h5_array(reading, name, dataset)
            need_grad = h5_attribute(reading, dataset, "need_grad")
            if array is not None:
                entries.append((name, array, True if need_grad is None else bool(need_grad)))
    return entries


def to_proto(entries: Iterable[Entry], proto: nnabla_pb2.NNablaProtoBuf | None = None
             ) -> nnabla_pb2.NNablaProtoBuf:
    """``entries`` as ``parameter`` messages (data as float32, as nnabla's format keeps
    it), added to ``proto`` or to a new NNablaProtoBuf."""
    proto = nnabla_pb2.NNablaProtoBuf() if proto is None else proto
    for name, array, need_grad in entries:
        p = proto.parameter.add()
        p.variable_name = name
        p.shape.dim.extend(int(d) for d in np.shape(array))
        p.data.extend(np.asarray(array, dtype=np.float32).ravel().tolist())
        p.need_grad = bool(need_grad)
    return proto


def from_proto(proto: nnabla_pb2.NNablaProtoBuf, reading: Reading) -> list[Entry]:
    """The ``parameter`` messages of ``proto`` as entries (float32), each shape checked
    before its array is made; those not fitting the destination are left out (and noted
    in ``reading``)."""
    entries = []
    for p in proto.parameter:
        array = proto_array(reading, p.variable_name, p.shape.dim, p.data)
        if array is not None:
            entries.append((p.variable_name, array, p.need_grad))
    return entries


def _write_text(target, entries: Iterable[Entry]) -> None:
    """The protobuf text format, to a path or to a text or binary file object."""
    text = text_format.MessageToString(to_proto(entries))
    if isinstance(target, io.TextIOBase):
        target.write(text)
        target.seek(0)
        return
    write_target(target, lambda f: f.write(text.encode("utf-8")))


def _write_nnp(f: BinaryIO, entries: Iterable[Entry]) -> None:
    """A zip of nnp_version.txt and parameter.h5, as in an .nnp that nnabla saves."""
    h5 = io.BytesIO()
    _write_h5(h5, entries)
    with zipfile.ZipFile(f, "w") as nnp:
        nnp.writestr("nnp_version.txt", f"{NNP_VERSION}\n")
        nnp.writestr(NNP_PARAMETER_FILE, h5.getvalue())


def _write_npz(f: BinaryIO, entries: Iterable[Entry]) -> None:
    """dpnb's .npz: one array per parameter, and the names of those that need grad."""
    arrays: dict[str, np.ndarray] = {}
    trainable = []
    for name, array, need_grad in entries:
        arrays[name] = array
        if need_grad:
            trainable.append(name)
    arrays[NEED_GRAD_KEY] = np.array(trainable, dtype=str)
    np.savez(f, **arrays)


def _read_npz(f, reading: Reading) -> list[Entry]:
    """The parameters of dpnb's .npz."""
    with zipfile.ZipFile(f, "r") as archive:
        arrays = dict(npz_arrays(reading, archive, NUMERIC + "U"))
    if NEED_GRAD_KEY not in arrays:
        raise DpnbError(f"{reading.label} has no {NEED_GRAD_KEY!r} entry: "
                        "it was not written by dpnb.save_parameters")
    names = arrays.pop(NEED_GRAD_KEY)
    if names is None or names.dtype.kind != "U":
        raise reading.refuse(f"has a {NEED_GRAD_KEY!r} entry that is not a list of names")
    strings = [name for name, array in arrays.items()
               if array is not None and array.dtype.kind not in NUMERIC]
    if strings:
        raise reading.refuse(f"has parameters {strings} that are not numeric")
    need_grad = set(names.reshape(-1).tolist())
    return [(name, array, name in need_grad) for name, array in arrays.items()
            if array is not None]


def _read_nnp(f, reading: Reading, proto: nnabla_pb2.NNablaProtoBuf) -> list[Entry]:
    """The parameters in an .nnp's .h5, .protobuf and .nntxt members, in zip order."""
    entries: list[Entry] = []
    with zipfile.ZipFile(f, "r") as nnp:
        for info in zip_members(reading, nnp):
            ext = os.path.splitext(info.filename)[1]
            if ext == ".h5":
                with spooled_member(nnp, info) as member:
                    entries += _read_h5(member, reading)
            elif ext == ".protobuf" or ext in TEXT_FORMATS:
                part = parse_message(nnp.read(info), ext)
                entries += from_proto(part, reading)
                part.ClearField("parameter")
                proto.MergeFrom(part)
    return entries


def parse_message(data: bytes, ext: str) -> nnabla_pb2.NNablaProtoBuf:
    """An NNablaProtoBuf from binary (.protobuf) or text (.nntxt, .prototxt) bytes."""
    message = nnabla_pb2.NNablaProtoBuf()
    if ext == ".protobuf":
        message.MergeFromString(data)
    else:
        text_format.Merge(data.decode("utf-8") if isinstance(data, bytes) else data, message)
    return message


def save(target, fmt: str, entries: Iterable[Entry]) -> None:
    """Write ``entries`` to a path (atomically) or file object in format ``fmt``."""
    if fmt in TEXT_FORMATS:
        _write_text(target, entries)
    elif fmt == ".protobuf":
        write_target(target, lambda f: f.write(to_proto(entries).SerializeToString()))
    else:
        writer = {".h5": _write_h5, ".nnp": _write_nnp, ".npz": _write_npz}[fmt]
        write_target(target, lambda f: writer(f, entries))


def _open_binary(source):
    """A path (as a str) or a binary file object, as readers want it."""
    return os.fspath(source) if is_path(source) else source


def load(source, fmt: str, proto: nnabla_pb2.NNablaProtoBuf,
         expected: Callable[[str], tuple[int, ...] | None] | None = None) -> list[Entry]:
    """The parameters of a path or file object in format ``fmt``, as ``read`` gives
    them, refusing a file that holds none."""
    require_readable(source, WHAT)
    entries = read(source, fmt, proto, expected)
    if not entries and fmt != ".npz":
        raise DpnbError(f"{WHAT} file {describe(source)} ({fmt}) holds no parameters: it is "
                        "empty, damaged, or not a parameter file; check the file")
    return entries


def read(source, fmt: str, proto: nnabla_pb2.NNablaProtoBuf,
         expected: Callable[[str], tuple[int, ...] | None] | None = None,
         what: str = WHAT) -> list[Entry]:
    """The parameters of a path or file object in format ``fmt``, all decoded and checked
    (``expected``: name -> the destination's shape, or None); what else a .protobuf,
    .nntxt or .nnp holds (networks, executors, ...) is merged into ``proto``; ``what``
    the file is named in errors."""
    reading = Reading(f"{what} file {describe(source)}", expected)
    with decoding(reading, fmt, what):
        if fmt == ".npz":
            entries = _read_npz(_open_binary(source), reading)
        elif fmt == ".h5":
            entries = _read_h5(_open_binary(source), reading)
        elif fmt == ".nnp":
            entries = _read_nnp(_open_binary(source), reading, proto)
        else:
            entries = _read_proto(source, fmt, reading, proto)
    reading.finish()
    return entries


def _read_proto(source, fmt: str, reading: Reading,
                proto: nnabla_pb2.NNablaProtoBuf) -> list[Entry]:
    """The parameters of a .protobuf or text-format file; the rest goes into ``proto``."""
    data = read_whole(source, reading)
    if not data:
        raise DpnbError(f"{reading.label} ({fmt}) is empty: nothing could be read; save it "
                        "again or rewind the file object")
    part = parse_message(data, fmt)
    entries = from_proto(part, reading)
    part.ClearField("parameter")  # the caller adds them back, once, as load_parameters decides
    proto.MergeFrom(part)
    return entries


def write_parameters(target, params: dict, extension: str | None = None) -> None:
    """Write named parameters in the format the path's extension (for a file object,
    ``extension``) names; a path is replaced atomically.  ``nn.save_parameters``."""
    fmt = file_format(target, extension, FORMATS, "save", "parameters")
    save(target, fmt, parameter_entries(params))


def read_parameters(source, extension: str, needs_proto: bool,
                    expected: Callable[[str], tuple[int, ...] | None] | None = None
                    ) -> tuple[list[Entry], nnabla_pb2.NNablaProtoBuf]:
    """(the parameters, all decoded and checked; what the file holds besides them) of a
    parameter file in the format its extension (for a file object, ``extension``) names.
    The message holds the parameters too for .protobuf and .nntxt files, or with
    ``needs_proto``, as nnabla's ``load_parameters`` returns them.  ``nn.load_parameters``."""
    fmt = file_format(source, extension, FORMATS, "load", "parameters")
    rest = nnabla_pb2.NNablaProtoBuf()
    entries = load(source, fmt, rest, expected)
    if needs_proto or fmt in PROTO_FORMATS:
        to_proto(entries, rest)
    return entries, rest
