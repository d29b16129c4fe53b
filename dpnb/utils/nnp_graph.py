"""nnabla's ``nnabla.utils.nnp_graph``: read a network file written by nnabla (or by
``dpnb.utils.save``) and build its graph in dpnb, with its parameters, to run it.

``.nnp`` archives, ``.nntxt``/``.prototxt`` and ``.protobuf`` files are read as nnabla
reads them: every network definition and parameter file in them is merged."""
from __future__ import annotations

import io
import os
import zipfile
from collections import OrderedDict

import h5py
import numpy as np
from google.protobuf import text_format
from google.protobuf.message import DecodeError

from ..errors import DpnbError
from ..fileio import describe
from ..graph import Variable
from ..parameter import (get_current_parameter_scope, get_parameter, get_parameter_or_create,
                         load_parameters, parameter_scope, set_parameter)
from ..proto import nnabla_pb2
from .function_specs import spec_of_type

_TEXT = (".nntxt", ".prototxt")
_EXTENSIONS = (".nnp", ".protobuf") + _TEXT


def _message_to_dict(message) -> dict:
    """A ``*_param`` message as a dict of plain values (Shape as a list of ints)."""
    values = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.name == "Shape":
            values[field.name] = [int(d) for d in value.dim]
        elif field.message_type is not None:
            values[field.name] = _message_to_dict(value)
        elif field.is_repeated:
            values[field.name] = list(value)
        else:
            values[field.name] = value
    return values


class NnpNetwork:
    """A network of an nnabla file built as a dpnb graph: ``inputs`` (the data
    variables to fill), ``outputs`` (to forward) and ``variables`` (all of them,
    parameters included), each by its name in the file."""

    def __init__(self, proto, params: dict, batch_size: int | None, source: str):
        self.name = proto.name
        batch = int(batch_size) if batch_size is not None else int(proto.batch_size)
        declared = {v.name: v for v in proto.variable}
        produced = {o for f in proto.function for o in f.output}
        consumed = {i for f in proto.function for i in f.input}
        self._variables: dict[str, Variable] = {}
        parameters = OrderedDict()
        for v in proto.variable:
            if v.type == "Parameter":
                param = _find(params, v.name)
                if param is None:
                    raise DpnbError(f"network {self.name!r} of {source} needs parameter "
                                    f"{v.name!r}, which the file does not hold; save the "
                                    "network with its parameters (an .nnp), or load them "
                                    "with nn.load_parameters first")
                parameters[v.name] = self._variables[v.name] = param
            elif v.name not in produced:
                shape = [batch if d < 0 else int(d) for d in v.shape.dim]
                if any(d < 0 for d in shape):
                    raise DpnbError(f"network {self.name!r} of {source} has a variable batch "
                                    "size and no batch size of its own; pass batch_size= to "
                                    "get_network")
                self._variables[v.name] = Variable(shape).apply(name=v.name)
        self._build(proto, source)
        self._inputs = OrderedDict((k, self._variables[k]) for k in declared
                                   if k in consumed and k not in produced
                                   and k not in parameters)
        self._outputs = OrderedDict((k, self._variables[k]) for k in declared
                                    if k in produced and k not in consumed)
        scope = get_current_parameter_scope()
        with parameter_scope("", scope):
            for name, param in parameters.items():
                set_parameter(name, param)

    def _build(self, proto, source: str) -> None:
        """Add the functions in an order that runs them (the file's, where it does)."""
        pending = list(proto.function)
        while pending:
            waiting = []
            for f in pending:
                if all(name in self._variables for name in f.input):
                    self._add(f)
                else:
                    waiting.append(f)
            if len(waiting) == len(pending):
                missing = sorted({n for f in waiting for n in f.input
                                  if n not in self._variables})
                raise DpnbError(f"network {self.name!r} of {source}: functions "
                                f"{[f.name for f in waiting]} read variables {missing} that "
                                "nothing declares or computes; the file is inconsistent")
            pending = waiting

    def _add(self, f) -> None:
        spec = spec_of_type(f.type)
        params = {}
        if spec.param_field is not None:
            params = _message_to_dict(getattr(f, spec.param_field))
        inputs = [self._variables[name] for name in f.input]
        try:
            built = spec.build(inputs, params, len(f.output))
        except DpnbError as e:
            raise DpnbError(f"network {self.name!r}, function {f.name!r}: {e}") from e
        outputs = built if isinstance(built, tuple) else (built,)
        if len(outputs) != len(f.output):
            raise DpnbError(f"network {self.name!r}, function {f.name!r} ({f.type}) has "
                            f"{len(f.output)} outputs in the file, but dpnb's has "
                            f"{len(outputs)}; the file is inconsistent")
        for name, y in zip(f.output, outputs):
            self._variables[name] = y.apply(name=name)

    @property
    def inputs(self) -> OrderedDict[str, Variable]:
        return self._inputs

    @property
    def outputs(self) -> OrderedDict[str, Variable]:
        return self._outputs

    @property
    def variables(self) -> dict[str, Variable]:
        return self._variables


def _find(params: dict, name: str) -> Variable | None:
    with parameter_scope("", params):
        return get_parameter(name)


class NnpLoader:
    """Read an nnabla network file (path or file object; ``extension`` names the format
    of a file object): its parameters go into ``scope`` (a new dict when None), and
    each ``get_network`` builds a graph and registers the parameters in the current
    parameter scope, as nnabla does."""

    def __init__(self, filepath, scope: dict | None = None, extension: str = ".nntxt"):
        self._params = scope if scope is not None else OrderedDict()
        self._source = describe(filepath)
        self.proto = nnabla_pb2.NNablaProtoBuf()
        ext = extension
        if isinstance(filepath, (str, os.PathLike)):
            ext = os.path.splitext(os.fspath(filepath))[1]
            if not os.path.exists(filepath):
                raise DpnbError(f"network file {self._source} does not exist; check the path")
        if ext not in _EXTENSIONS:
            raise DpnbError(f"cannot read {self._source} as a network file: the formats are "
                            f"{', '.join(_EXTENSIONS)}, got {ext!r}")
        data = _read_bytes(filepath)
        if ext == ".nnp":
            self._read_archive(data)
        else:
            self._read_member(data, ext)
        self.network_dict = OrderedDict((n.name, n) for n in self.proto.network)

    def _read_archive(self, data: bytes) -> None:
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as nnp:
                for member in nnp.namelist():
                    ext = os.path.splitext(member)[1]
                    if ext in _TEXT + (".protobuf", ".h5"):
                        self._read_member(nnp.read(member), ext)
        except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile) as e:
            raise DpnbError(f"{self._source} is truncated or not an .nnp archive ({e}); save it "
                            "again") from e

    def _read_member(self, data: bytes, ext: str) -> None:
        """Merge one definition or parameter file into what was read so far."""
        if ext == ".h5":
            if _h5_holds_data(data):
                with parameter_scope("", self._params):
                    load_parameters(io.BytesIO(data), extension=".h5")
            return
        message = nnabla_pb2.NNablaProtoBuf()
        try:
            if ext == ".protobuf":
                message.ParseFromString(data)
            else:
                text_format.Merge(data.decode("utf-8"), message)
        except (DecodeError, text_format.ParseError, UnicodeDecodeError) as e:
            raise DpnbError(f"{self._source} holds a {ext} part that is not nnabla's network "
                            f"format ({type(e).__name__}: {e}); save it again") from e
        self._store_parameters(message)
        del message.parameter[:]
        self.proto.MergeFrom(message)

    def _store_parameters(self, message) -> None:
        with parameter_scope("", self._params):
            for p in message.parameter:
                value = np.asarray(p.data, np.float32).reshape([int(d) for d in p.shape.dim])
                param = get_parameter_or_create(p.variable_name, value.shape, value,
                                                need_grad=p.need_grad)
                param.d = value

    def get_network_names(self) -> list[str]:
        """The names of the networks in the file."""
        return list(self.network_dict)

    def get_network(self, name: str, batch_size: int | None = None,
                    callback=None) -> NnpNetwork:
        """Build network ``name``; ``batch_size`` replaces the variable batch axis (-1),
        by default the batch size saved with the network."""
        if callback is not None:
            raise DpnbError("get_network(callback=...) takes an nnabla NnpNetworkPass, which "
                            "dpnb does not implement; build the graph without it and edit "
                            "the dpnb graph instead")
        if name not in self.network_dict:
            raise DpnbError(f"{self._source} has no network {name!r}; its networks are "
                            f"{self.get_network_names()}")
        return NnpNetwork(self.network_dict[name], self._params, batch_size, self._source)


def _h5_holds_data(data: bytes) -> bool:
    """Whether an .h5 part holds any array: nnabla writes an empty one for a network
    without parameters, which is no error inside an .nnp."""
    found = []
    try:
        with h5py.File(io.BytesIO(data), "r") as h5:
            h5.visititems(lambda name, obj: found.append(name)
                          if isinstance(obj, h5py.Dataset) else None)
    except OSError:
        return True  # damaged: let the parameter reader say so
    return bool(found)


def _read_bytes(source) -> bytes:
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            return f.read()
    data = source.read()
    return data.encode("utf-8") if isinstance(data, str) else data
