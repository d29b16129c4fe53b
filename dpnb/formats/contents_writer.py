"""nnabla's ``nnabla.utils.save``: write networks (and their parameters) as nnabla's
network files, so that nnabla, its tools and dpnb's ``NnpLoader`` can run them.

``.nnp`` is a zip of ``nnp_version.txt``, ``network.nntxt`` (protobuf text) and
``parameter.h5`` / ``parameter.protobuf``; ``.nntxt`` and ``.protobuf`` hold the
network definition alone (with the parameters inside where ``include_params``)."""
from __future__ import annotations

import io
import logging
import os
import zipfile
from collections import OrderedDict
from typing import BinaryIO

import numpy as np
from google.protobuf import text_format

from ..context import to_module
from ..errors import DpnbError
from ..formats.files import atomic_write
from ..graph import Function, Variable
from ..parameter import get_parameters, save_parameters
from ..formats import nnabla_pb2
from .function_specs import spec_of_function
from .nnp_format import nnp_version

logger = logging.getLogger(__name__)

_NETWORK_EXTENSIONS = (".nnp", ".nntxt", ".prototxt", ".protobuf")
_CONTENT_KEYS = ("networks", "executors", "global_config", "training_config", "datasets",
                 "optimizers", "monitors")


def _unique(counts: dict[str, int], prefix: str) -> str:
    """``prefix`` the first time, then ``prefix_1``, ``prefix_2`` ... as nnabla names things."""
    if prefix not in counts:
        counts[prefix] = 1
        return prefix
    name = f"{prefix}_{counts[prefix]}"
    counts[prefix] += 1
    return name


def _functions_of(outputs: list[Variable]) -> list[Function]:
    """The functions the outputs depend on, each once, in an order that runs them."""
    order: list[Function] = []
    seen: set[int] = set()

    def add(fn: Function) -> None:
        if id(fn) not in seen:
            seen.add(id(fn))
            order.append(fn)

    for y in outputs:
        y.visit(add)
    return order


class _ProtoVariable:
    """A variable of the network being written: its name, kind and shape."""

    def __init__(self, name: str, kind: str, shape: tuple[int, ...]):
        self.name, self.kind, self.shape = name, kind, list(shape)


class _ProtoFunction:
    """A function of the network being written: nnabla's type, names and parameter values."""

    def __init__(self, fn: Function, name: str):
        spec = spec_of_function(fn)
        self.type, self.param_field = spec.type_name, spec.param_field
        self.params = spec.export(fn)
        self.name = name
        self.inputs: list[str] = []
        self.outputs: list[str] = []


class _NetworkWriter:
    """One entry of ``contents['networks']`` as nnabla's Network message, named as nnabla
    names things: functions ``@net/Type``, unnamed results ``@net/Type_out``, unnamed
    inputs ``@net/Type_in`` (no ``@net/`` for a network called ``model``)."""

    def __init__(self, net: dict, parameter_names: dict[int, str], variable_batch_size: bool):
        for key in ("name", "outputs"):
            if key not in net:
                raise DpnbError(f"each entry of contents['networks'] needs {key!r}; got keys "
                                f"{sorted(net)}: give 'name', 'batch_size', 'outputs' "
                                "(name -> variable) and optionally 'names'")
        self.name = str(net["name"])
        self.batch_size = int(net.get("batch_size", 0) or 0)
        outputs = dict(net["outputs"])
        names = dict(net.get("names", {}))
        names.update(outputs)
        self.given = {}
        for key, v in names.items():
            if not isinstance(v, Variable):
                raise DpnbError(f"network {self.name!r}: {key!r} must name an nn.Variable, "
                                f"got {type(v).__name__}")
            self.given[id(v)] = key
        self.prefix = "" if self.name == "model" else f"@{self.name}/"
        self.parameter_names = parameter_names
        self.variables: OrderedDict[str, _ProtoVariable] = OrderedDict()
        self.parameters: OrderedDict[str, _ProtoVariable] = OrderedDict()
        self.functions: list[_ProtoFunction] = []
        self.produced: dict[str, _ProtoFunction] = {}
        self.required: set[str] = set()
        self._names_of: dict[int, str] = {}
        self._var_counts: dict[str, int] = {}
        self._fn_counts: dict[str, int] = {}
        graph = _functions_of(list(outputs.values()))
        if not graph:
            raise DpnbError(f"network {self.name!r}: its outputs {sorted(outputs)} are computed "
                            "by no function; give variables that a graph computes")
        for fn in graph:
            self._add(fn)
        if variable_batch_size:
            self._mark_batch_axis()

    def _leaf_name(self, x: Variable, fn_type: str) -> str:
        key = id(x.data)
        if key in self.parameter_names:
            name = self.parameter_names[key]
            if name not in self.parameters:
                self.parameters[name] = _ProtoVariable(name, "Parameter", x.shape)
            return name
        if id(x) not in self._names_of:
            name = self.given.get(id(x)) or _unique(self._var_counts,
                                                    f"{self.prefix}{fn_type}_in")
            self._names_of[id(x)] = name
            self.variables[name] = _ProtoVariable(name, "Buffer", x.shape)
        return self._names_of[id(x)]

    def _add(self, fn: Function) -> None:
        pf = _ProtoFunction(fn, "")
        pf.name = _unique(self._fn_counts, f"{self.prefix}{pf.type}")
        for x in fn.inputs:
            name = self._leaf_name(x, pf.type) if x.parent is None else self._names_of[id(x)]
            pf.inputs.append(name)
            self.required.add(name)
        for y in fn.outputs:
            name = self.given.get(id(y)) or _unique(self._var_counts,
                                                    f"{self.prefix}{pf.type}_out")
            if name in self.variables:
                raise DpnbError(f"network {self.name!r}: the name {name!r} is given to two "
                                "variables; give each variable its own name")
            self._names_of[id(y)] = name
            self.variables[name] = _ProtoVariable(name, "Buffer", y.shape)
            self.produced[name] = pf
            pf.outputs.append(name)
        self.functions.append(pf)

    @property
    def inputs(self) -> list[str]:
        """Variables no function of the network computes (the data), as nnabla lists them."""
        return [k for k in self.variables if k not in self.produced and k in self.required]

    @property
    def outputs(self) -> list[str]:
        return [k for k in self.variables if k in self.produced and k not in self.required]

    def _mark_batch_axis(self) -> None:
        """Write the batch axis as -1, as nnabla does: the batch size is the size of the
        sample axes of the last input of a function with a base_axis, and every variable
        (and every Reshape's and Broadcast's target) starting with that size gets -1 there,
        except results of parameters alone."""
        batch = None
        for pf in self.functions:
            base_axis = pf.params.get("base_axis")
            if base_axis:
                data = [v for v in pf.inputs if v in self.variables]
                if data:
                    batch = int(np.prod(self.variables[data[0]].shape[:base_axis]))
        if batch is None:
            return
        constant: set[str] = set()
        for pf in self.functions:
            if not any(v in self.variables and v not in constant for v in pf.inputs):
                constant.update(pf.outputs)
                continue
            if pf.type in ("Reshape", "Broadcast"):
                shape = pf.params["shape"]
                first = self.variables[pf.inputs[0]].shape
                if (not shape or shape[0] != batch
                        or pf.type == "Broadcast" and len(first) != len(shape)):
                    raise DpnbError(f"network {self.name!r}: {pf.name} gives shape {shape} "
                                    f"to an input of shape {first}, whose first axis is not "
                                    f"kept as the batch axis (size {batch}); keep the batch "
                                    "axis first in reshapes and broadcasts, or save with "
                                    "variable_batch_size=False")
                pf.params["shape"] = [-1] + shape[1:]
        for name, v in self.variables.items():
            if name not in constant and v.shape and v.shape[0] == batch:
                v.shape[0] = -1
        self.batch_size = batch

    def to_proto(self, message) -> None:
        message.name = self.name
        if self.batch_size:
            message.batch_size = self.batch_size
        for v in list(self.variables.values()) + list(self.parameters.values()):
            pv = message.variable.add()
            pv.name, pv.type = v.name, v.kind
            pv.shape.dim.extend(v.shape)
        for pf in self.functions:
            f = message.function.add()
            f.name, f.type = pf.name, pf.type
            f.input.extend(pf.inputs)
            f.output.extend(pf.outputs)
            if pf.param_field is not None:
                _fill_message(getattr(f, pf.param_field), pf.params)


def _fill_message(message, values: dict) -> None:
    """Set the fields of a ``*_param`` message from a dict (lists go to Shape.dim or to
    repeated fields; dicts to sub-messages)."""
    message.SetInParent()
    for name, value in values.items():
        field = message.DESCRIPTOR.fields_by_name[name]
        if field.message_type is not None and isinstance(value, dict):
            _fill_message(getattr(message, name), value)
        elif field.message_type is not None:
            getattr(message, name).dim.extend(int(v) for v in value)
        elif isinstance(value, list):
            getattr(message, name).extend(value)
        else:
            setattr(message, name, value)


def _executor(proto, executor: dict, networks: dict[str, _NetworkWriter]) -> None:
    """Add one entry of ``contents['executors']``: the network's data, outputs and parameters."""
    name, net_name = executor.get("name"), executor.get("network")
    if net_name not in networks:
        raise DpnbError(f"executor {name!r} runs network {net_name!r}, but contents['networks'] "
                        f"has {sorted(networks)}; name one of them in 'network'")
    net = networks[net_name]
    remap = executor.get("remp", {})
    e = proto.executor.add()
    e.name, e.network_name = str(name), net_name
    for key in ("no_image_normalization", "num_evaluations", "repeat_evaluation_type",
                "need_back_propagation"):
        if executor.get(key) is not None:
            setattr(e, key, executor[key])
    for key, field in (("data", e.data_variable), ("output", e.output_variable)):
        for v in executor.get(key, net.inputs if key == "data" else net.outputs):
            if v not in net.variables:
                raise DpnbError(f"executor {name!r}: {key} variable {v!r} is not in network "
                                f"{net_name!r}, whose variables are {list(net.variables)}; "
                                "name them in the network's 'names' or 'outputs'")
            item = field.add()
            item.variable_name, item.data_name = v, remap.get(v, v)
    for param in net.parameters:
        e.parameter_variable.add().variable_name = param
    _generators(e, executor)


def _dataset(proto, dataset: dict) -> str:
    """Add one entry of ``contents['datasets']``: where the data is, how it is batched,
    and the names of the variables it feeds."""
    missing = [k for k in ("name", "uri", "variables", "shuffle", "batch_size",
                           "no_image_normalization") if k not in dataset]
    if missing:
        raise DpnbError(f"dataset {dataset.get('name')!r} lacks {missing}; give name, uri, "
                        "variables (name -> variable), shuffle, batch_size, "
                        "no_image_normalization and optionally cache_dir")
    d = proto.dataset.add()
    d.name, d.uri = str(dataset["name"]), str(dataset["uri"])
    if dataset.get("cache_dir") is not None:
        d.cache_dir = str(dataset["cache_dir"])
    d.shuffle, d.batch_size = bool(dataset["shuffle"]), int(dataset["batch_size"])
    d.no_image_normalization = bool(dataset["no_image_normalization"])
    d.variable.extend(str(name) for name in dataset["variables"])
    return d.name


def _dataset_names(owner: str, given, datasets: list[str], required: bool) -> list[str]:
    """The dataset names an optimizer or monitor uses (a name, or a list or tuple of them)."""
    names = [given] if isinstance(given, str) else list(given)
    unknown = [n for n in names if n not in datasets]
    if unknown and (required or not isinstance(given, str)):
        raise DpnbError(f"{owner} uses datasets {unknown}, but contents['datasets'] has "
                        f"{datasets}; name those")
    return [n for n in names if n in datasets]


def _solver_field(solver_type: str):
    """The ``Solver`` field (``adam_param`` ...) holding a solver type's hyperparameters."""
    wanted = solver_type.lower() + "param"
    field = next((f for f in nnabla_pb2.Solver.DESCRIPTOR.fields
                  if f.name.replace("_", "") == wanted), None)
    if field is None:
        known = [f.name for f in nnabla_pb2.Solver.DESCRIPTOR.oneofs_by_name["parameter"].fields]
        raise DpnbError(f"solver {solver_type} cannot be written to a network file: dpnb's "
                        f"format holds the hyperparameters of {', '.join(known)}; use one of "
                        "those solvers, or save its state with solver.save_states")
    return field


def _optimizer(proto, optimizer: dict, networks: dict[str, "_NetworkWriter"],
               datasets: list[str]) -> None:
    """Add one entry of ``contents['optimizers']``: the solver and its hyperparameters,
    the network it trains (its outputs as losses) and the datasets feeding it."""
    missing = [k for k in ("name", "solver", "network", "dataset", "weight_decay", "lr_decay",
                           "lr_decay_interval", "update_interval") if k not in optimizer]
    if missing:
        raise DpnbError(f"optimizer {optimizer.get('name')!r} lacks {missing}; give name, "
                        "solver, network, dataset, weight_decay, lr_decay, lr_decay_interval "
                        "and update_interval")
    name, solver = str(optimizer["name"]), optimizer["solver"]
    net = networks.get(optimizer["network"])
    o = proto.optimizer.add()
    o.name = name
    o.network_name = net.name if net is not None else "None"
    o.dataset_name.extend(_dataset_names(f"optimizer {name!r}", optimizer["dataset"], datasets,
                                         required=False))
    o.solver.type = solver.name
    field = _solver_field(solver.name)
    params = getattr(o.solver, field.name)
    params.SetInParent()
    for key, value in solver.info.items():
        if key in params.DESCRIPTOR.fields_by_name:
            setattr(params, key, value)
    o.solver.weight_decay = optimizer["weight_decay"]
    o.solver.lr_decay = optimizer["lr_decay"]
    o.solver.lr_decay_interval = optimizer["lr_decay_interval"]
    o.update_interval = optimizer["update_interval"]
    for variable, data in optimizer.get("data_variables", {}).items():
        item = o.data_variable.add()
        item.variable_name, item.data_name = variable, data
    if net is not None:
        for loss in optimizer.get("loss_variables", net.outputs):
            o.loss_variable.add().variable_name = loss
    trained = set(solver.get_parameters())
    for param in (net.parameters if net is not None else get_parameters(grad_only=False)):
        item = o.parameter_variable.add()
        item.variable_name = param
        item.learning_rate_multiplier = 1.0 if param in trained else 0.0
    _generators(o, optimizer)


def _generators(message, entry: dict) -> None:
    for v in entry.get("generator_variables", []):
        g = message.generator_variable.add()
        g.variable_name, g.type, g.multiplier = v, "Constant", 0


def _monitor(proto, monitor: dict, networks: dict[str, "_NetworkWriter"],
             datasets: list[str]) -> None:
    """Add one entry of ``contents['monitors']``: the network whose outputs are watched
    as errors, on the datasets named."""
    name, net_name = monitor.get("name"), monitor.get("network")
    if net_name not in networks:
        raise DpnbError(f"monitor {name!r} watches network {net_name!r}, but "
                        f"contents['networks'] has {sorted(networks)}; name one of them")
    m = proto.monitor.add()
    m.name, m.network_name = str(name), net_name
    m.dataset_name.extend(_dataset_names(f"monitor {name!r}", monitor.get("dataset", []),
                                         datasets, required=True))
    if not m.dataset_name:
        raise DpnbError(f"monitor {name!r} names no dataset; give 'dataset' (a name or a "
                        "list of names from contents['datasets'])")
    for variable, data in monitor.get("data_variables", {}).items():
        item = m.data_variable.add()
        item.variable_name, item.data_name = variable, data
    for out in monitor.get("monitor_variables", networks[net_name].outputs):
        item = m.monitor_variable.add()
        item.type, item.variable_name = "Error", out
    _generators(m, monitor)


def _add_parameters(proto, params: dict[str, Variable]) -> None:
    for name, v in params.items():
        p = proto.parameter.add()
        p.variable_name = name
        p.shape.dim.extend(v.shape)
        p.data.extend(np.asarray(to_module(v.d, np), np.float32).ravel().tolist())
        p.need_grad = bool(v.need_grad)


def create_proto(contents: dict, include_params: bool = False, variable_batch_size: bool = True,
                 parameters: dict | None = None):
    """nnabla's NNablaProtoBuf message of ``contents`` (configs, networks, datasets,
    optimizers, monitors, executors)."""
    unknown = sorted(set(contents) - set(_CONTENT_KEYS))
    if unknown:
        raise DpnbError(f"contents keys {unknown} are not nnabla's: save writes "
                        f"{', '.join(_CONTENT_KEYS)}; drop the others")
    params = get_parameters(grad_only=False) if parameters is None else parameters
    parameter_names = {id(v.data): name for name, v in params.items()}
    proto = nnabla_pb2.NNablaProtoBuf()
    if "global_config" in contents:
        ctx = contents["global_config"]["default_context"]
        proto.global_config.default_context.backends.extend(ctx.backend)
        proto.global_config.default_context.array_class = ctx.array_class
        proto.global_config.default_context.device_id = str(ctx.device_id)
    if "training_config" in contents:
        t = contents["training_config"]
        proto.training_config.max_epoch = t["max_epoch"]
        proto.training_config.iter_per_epoch = t["iter_per_epoch"]
        proto.training_config.save_best = t["save_best"]
    networks: dict[str, _NetworkWriter] = {}
    for net in contents.get("networks", []):
        writer = _NetworkWriter(net, parameter_names, variable_batch_size)
        if writer.name in networks:
            raise DpnbError(f"two networks are named {writer.name!r}; give each its own name")
        networks[writer.name] = writer
        writer.to_proto(proto.network.add())
    datasets = [_dataset(proto, d) for d in contents.get("datasets", [])]
    for optimizer in contents.get("optimizers", []):
        _optimizer(proto, optimizer, networks, datasets)
    for monitor in contents.get("monitors", []):
        _monitor(proto, monitor, networks, datasets)
    for executor in contents.get("executors", []):
        _executor(proto, executor, networks)
    if include_params:
        _add_parameters(proto, params)
    return proto


def _nnp_bytes(proto, params: dict, parameter_format: str) -> bytes:
    """The .nnp archive: version, network text, and parameters in ``parameter_format``."""
    if parameter_format == ".protobuf":
        message = nnabla_pb2.NNablaProtoBuf()
        _add_parameters(message, params)
        parameter_bytes = message.SerializeToString()
    else:
        parameter_file = io.BytesIO()
        save_parameters(parameter_file, params, extension=parameter_format)
        parameter_bytes = parameter_file.getvalue()
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as nnp:
        nnp.writestr("nnp_version.txt", f"{nnp_version()}\n")
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


def _network_extension(filename, extension: str) -> str:
    """The network-file kind to write: ``filename``'s extension (``extension`` for a file
    object or a name without one), refused unless nnabla writes networks as it."""
    ext = extension
    if isinstance(filename, (str, os.PathLike)):
        ext = os.path.splitext(os.fspath(filename))[1] or extension
    if ext not in _NETWORK_EXTENSIONS:
        raise DpnbError(f"cannot save a network as {ext!r} ({filename!r}): nnabla's network "
                        f"files are {', '.join(_NETWORK_EXTENSIONS)}; name the file so")
    return ext


def save(filename, contents: dict, include_params: bool = False,
         variable_batch_size: bool = True, extension: str = ".nnp",
         parameters: dict | None = None, parameter_format: str = ".h5",
         include_solver_state: bool = False, solver_state_format: str = ".h5") -> None:
    """Write the networks of ``contents`` (and its configs, datasets, optimizers, monitors
    and executors, as nnabla's training tools read them) in nnabla's format, chosen by the
    file's extension (or ``extension`` for a file object): ``.nnp`` (with the parameters,
    as ``parameter_format``), ``.nntxt``/``.prototxt`` (text) or ``.protobuf`` (binary);
    ``include_params`` puts the parameters into the latter two.  With
    ``variable_batch_size`` the batch axis is written as -1, to be set when loading."""
    ext = _network_extension(filename, extension)
    if include_solver_state:
        raise DpnbError("include_solver_state=True: dpnb's save does not write solver states "
                        "into network files; save them beside it with solver.save_states(path)")
    if parameter_format not in (".h5", ".protobuf"):
        raise DpnbError(f"parameter_format must be '.h5' or '.protobuf', got "
                        f"{parameter_format!r}")
    params = get_parameters(grad_only=False) if parameters is None else parameters
    proto = create_proto(contents, include_params and ext != ".nnp", variable_batch_size,
                         params)
    if ext == ".nnp":
        _write(filename, _nnp_bytes(proto, params, parameter_format), text=False)
    elif ext == ".protobuf":
        _write(filename, proto.SerializeToString(), text=False)
    else:
        _write(filename, text_format.MessageToString(proto).encode("utf-8"), text=True)
    logger.info("Model file is saved as (%s): %s", ext, filename)
