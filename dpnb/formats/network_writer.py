"""dpnb graphs as nnabla's ``Network`` messages: the functions the outputs depend on, in
an order that runs them, their variables and parameters, named as nnabla names them,
and the batch axis written as variable where asked."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..errors import DpnbError
from ..graph import Function, Variable
from .function_specs import spec_of_function
from .messages import fill_message, unique_name


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


class NetworkWriter:
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
            name = self.given.get(id(x)) or unique_name(self._var_counts,
                                                    f"{self.prefix}{fn_type}_in")
            self._names_of[id(x)] = name
            self.variables[name] = _ProtoVariable(name, "Buffer", x.shape)
        return self._names_of[id(x)]

    def _add(self, fn: Function) -> None:
        pf = _ProtoFunction(fn, "")
        pf.name = unique_name(self._fn_counts, f"{self.prefix}{pf.type}")
        for x in fn.inputs:
            name = self._leaf_name(x, pf.type) if x.parent is None else self._names_of[id(x)]
            pf.inputs.append(name)
            self.required.add(name)
        for y in fn.outputs:
            name = self.given.get(id(y)) or unique_name(self._var_counts,
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
                fill_message(getattr(f, pf.param_field), pf.params)
