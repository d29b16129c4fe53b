"""Networks of nnabla's network files built as dpnb graphs, with their parameters, to
run them: nnabla's ``NnpLoader``, ``NnpNetwork`` and ``NnpNetworkPass`` (the edits to
make on the way), which ``dpnb.utils.nnp_graph`` gives under nnabla's names."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from ..errors import DpnbError, DpnbValueError
from ..graph import Variable, get_auto_forward
from ..parameter import (assign_entries, get_current_parameter_scope, get_parameter,
                         parameter_scope, set_parameter, shapes_in)
from . import nnabla_pb2
from .files import describe
from .function_messages import create_function_instance
from .network_files import read_network_file


class _PassVariable:
    """A variable of a network being read, as a network pass sees it: its ``proto``
    (Variable message, which passes may edit), the function computing it (``parent``),
    the names of the functions reading it, and the dpnb ``variable`` once built (or
    given by a pass); ``need_grad`` (None: as saved) and ``stop`` are set by passes."""

    def __init__(self, proto):
        self.proto = proto
        self.parent: _PassFunction | None = None
        self._referrers: dict[str, _PassFunction] = {}
        self.variable: Variable | None = None
        self.need_grad: bool | None = None
        self.stop = False

    @property
    def name(self) -> str:
        return self.proto.name

    def add_referrer(self, f: "_PassFunction") -> None:
        self._referrers[f.name] = f

    def delete_referrer(self, f: "_PassFunction") -> None:
        del self._referrers[f.name]

    @property
    def referrers(self) -> dict:
        return dict(self._referrers)

    @property
    def num_referrers(self) -> int:
        return len(self._referrers)

    def rewire_on(self, var: "_PassVariable") -> None:
        """Make this variable what ``var`` is: computed by ``var``'s parent (the function
        computing this one now is dropped), ``var`` left without a parent."""
        parent = var.parent
        if self.parent is not None:
            self.parent.disable()
        self.parent = parent
        var.parent = None
        self.variable = var.variable
        if parent is not None:
            parent.outputs = [self if o is var else o for o in parent.outputs]


class _PassFunction:
    """A function of a network being read, as a network pass sees it: its ``proto``
    (Function message, which passes may edit), its input and output variables, and
    whether a pass dropped it (``disable``)."""

    def __init__(self, proto):
        self.proto = proto
        self._inputs: list[_PassVariable] = []
        self._outputs: list[_PassVariable] = []
        self.disabled = False

    @property
    def name(self) -> str:
        return self.proto.name

    @property
    def inputs(self) -> list[_PassVariable]:
        return list(self._inputs)

    @inputs.setter
    def inputs(self, inputs: list[_PassVariable]) -> None:
        for v in inputs:
            v.add_referrer(self)
        self._inputs = list(inputs)

    @property
    def outputs(self) -> list[_PassVariable]:
        return list(self._outputs)

    @outputs.setter
    def outputs(self, outputs: list[_PassVariable]) -> None:
        self._outputs = list(outputs)
        for v in outputs:
            v.parent = self

    def disable(self) -> None:
        """Drop the function: its inputs forget it, its outputs lose their parent."""
        self.disabled = True
        for v in self._inputs:
            v.delete_referrer(self)
        for v in self._outputs:
            v.parent = None
        self._inputs, self._outputs = [], []


def _connected(variables: dict[str, _PassVariable]) -> list[_PassVariable]:
    """The variables some function still computes or reads."""
    return [v for v in variables.values() if v.parent is not None or v.num_referrers]


def _forward_order(variables: dict[str, _PassVariable]) -> list[_PassFunction]:
    """The functions that compute the network's outputs, each after those it reads from
    (a depth-first walk from the outputs, without recursion: networks may be deep); a
    function reading, through others, a variable marked ``stop`` is dropped."""
    order: list[_PassFunction] = []
    seen: set[int] = set()
    outputs = [v for v in _connected(variables) if not v.num_referrers]
    stack: list[list] = [[outputs, 0, False, None]]  # variables, next one, stop seen, reader
    while stack:
        frame = stack[-1]
        variables_, index = frame[0], frame[1]
        if index < len(variables_):
            frame[1] += 1
            v = variables_[index]
            frame[2] |= v.stop
            f = v.parent
            if f is not None and id(f) not in seen:
                seen.add(id(f))
                stack.append([f.inputs, 0, False, f])
            continue
        stack.pop()
        f, stop = frame[3], frame[2]
        if f is None:
            break
        if stop:
            f.disable()
        else:
            order.append(f)
        stack[-1][2] |= stop
    return order


class NnpNetwork:
    """A network of an nnabla file built as a dpnb graph: ``inputs`` (the data
    variables to fill), ``outputs`` (to forward) and ``variables`` (all of them,
    parameters included), each by its name in the file.  ``callback`` (an
    ``NnpNetworkPass``) edits the network on the way, as in nnabla."""

    def __init__(self, proto, params: dict, batch_size: int | None, source: str,
                 callback: "NnpNetworkPass | None" = None):
        self.name = proto.name
        self.batch_size = int(batch_size) if batch_size is not None else int(proto.batch_size)
        self._params, self._source = params, source
        callback = callback if callback is not None else NnpNetworkPass()
        variables = OrderedDict((v.name, _PassVariable(v)) for v in proto.variable)
        functions = [_PassFunction(f) for f in proto.function]
        for f in functions:
            f.inputs = [self._declared(variables, name, f) for name in f.proto.input]
            f.outputs = [self._declared(variables, name, f) for name in f.proto.output]
        for f in _forward_order(variables):
            if not f.disabled:
                callback._apply_function_pass_by_type(f, variables, params)
                callback._apply_function_pass_by_name(f, variables, params)
        for f in _forward_order(variables):
            callback._apply_use_up_to(f.inputs)
        self._published: OrderedDict[str, Variable] = OrderedDict()
        for f in _forward_order(variables):
            self._add(f, callback)
        connected = _connected(variables)
        self._variables = {v.name: v.variable for v in connected}
        self._inputs = OrderedDict((v.name, v.variable) for v in connected
                                   if v.parent is None and v.proto.type != "Parameter")
        self._outputs = OrderedDict((v.name, v.variable) for v in connected
                                    if not v.num_referrers)
        with parameter_scope("", get_current_parameter_scope()):
            for name, param in self._published.items():
                set_parameter(name, param)

    def _declared(self, variables: dict, name: str, f) -> _PassVariable:
        if name not in variables:
            raise DpnbError(f"network {self.name!r} of {self._source}: function {f.name!r} "
                            f"uses variable {name!r}, which the network does not declare; "
                            "the file is inconsistent")
        return variables[name]

    def _leaf(self, v: _PassVariable, callback: "NnpNetworkPass") -> Variable:
        """The dpnb variable of an input or parameter, made on first use."""
        if v.variable is not None:
            return v.variable
        v = callback._apply_generate_variable(v)
        if v.variable is not None:
            return v.variable
        dims = [int(d) for d in v.proto.shape.dim]
        shape = [self.batch_size if d < 0 else d for d in dims]
        if v.proto.type == "Parameter":
            param = _find(self._params, v.proto.name)
            if param is None:
                raise DpnbError(f"network {self.name!r} of {self._source} needs parameter "
                                f"{v.proto.name!r}, which the file does not hold; save the "
                                "network with its parameters (an .nnp), or load them "
                                "with nn.load_parameters first")
            if v.need_grad is not None:
                param.need_grad = v.need_grad
            self._published[v.name] = param
            v.variable = param.apply(name=v.name)
        elif self.batch_size <= 0 and any(d < 0 for d in dims):
            raise DpnbError(f"network {self.name!r} of {self._source}: variable {v.name!r} has "
                            f"shape {dims} with a variable batch size, and the network has no "
                            "batch size of its own; pass batch_size= to get_network")
        else:
            v.variable = Variable(shape).apply(name=v.name)
        return v.variable

    def _add(self, f: _PassFunction, callback: "NnpNetworkPass") -> None:
        f = callback._apply_generate_function_by_type(f)
        f = callback._apply_generate_function_by_name(f)
        inputs = [self._leaf(v, callback) for v in f.inputs]
        instance = create_function_instance(None, f.proto)
        shape = instance.params.get("shape")
        if f.proto.type in ("Reshape", "Broadcast") and shape and shape[0] == -1:
            instance.params["shape"] = [self.batch_size] + list(shape[1:])
        try:
            built = instance(*inputs, n_outputs=len(f.outputs), auto_forward=get_auto_forward())
        except DpnbError as e:
            raise DpnbError(f"network {self.name!r}, function {f.name!r}: {e}") from e
        outputs = built if isinstance(built, tuple) else (built,)
        for v, y in zip(f.outputs, outputs):
            v.variable = y.apply(name=v.name)

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
        self.proto, entries = read_network_file(filepath, extension, shapes_in(self._params))
        with parameter_scope("", self._params):
            assign_entries(entries, f"network file {self._source}")
        self.network_dict = OrderedDict((n.name, n) for n in self.proto.network)

    def get_network_names(self) -> list[str]:
        """The names of the networks in the file."""
        return list(self.network_dict)

    def get_network(self, name: str, batch_size: int | None = None,
                    callback: "NnpNetworkPass | None" = None) -> NnpNetwork:
        """Build network ``name``; ``batch_size`` replaces the variable batch axis (-1),
        by default the batch size saved with the network; ``callback`` edits it."""
        if name not in self.network_dict:
            raise DpnbError(f"{self._source} has no network {name!r}; its networks are "
                            f"{self.get_network_names()}")
        network = nnabla_pb2.Network()
        network.CopyFrom(self.network_dict[name])
        return NnpNetwork(network, self._params, batch_size, self._source, callback)


FunctionPass = Callable[[_PassFunction, dict, dict], object]


class NnpNetworkPass:
    """Edits to make while ``NnpLoader.get_network`` builds a network, as nnabla's
    ``NnpNetworkPass``: replace variables, change functions' parameters, drop or bypass
    functions, stop at some variables, fix the parameters.  The passes see each
    function and variable as it is in the file (``proto``), before the graph is built.
    ``verbose`` 1 prints each edit, 2 also each function built."""

    def __init__(self, verbose: int = 0):
        self._variable_callbacks: dict[str, Callable] = {}
        self._function_callbacks_by_name: dict[str, Callable] = {}
        self._function_callbacks_by_type: dict[str, Callable] = {}
        self._passes_by_name: dict[str, FunctionPass] = {}
        self._passes_by_type: dict[str, FunctionPass] = {}
        self._fix_parameters = False
        self._use_up_to_variables: set[str] = set()
        self.verbose = print if verbose else _quiet
        self.verbose2 = print if verbose > 1 else _quiet

    def on_function_pass_by_name(self, name: str) -> Callable[[FunctionPass], FunctionPass]:
        """Decorator: run ``callback(f, variables, param_scope)`` on the function named
        ``name`` before the graph is built (it may rewire or disable it)."""
        return _registering(self._passes_by_name, name)

    def on_function_pass_by_type(self, name: str) -> Callable[[FunctionPass], FunctionPass]:
        """Decorator: as ``on_function_pass_by_name``, on every function of type ``name``."""
        return _registering(self._passes_by_type, name)

    def on_generate_variable(self, name: str) -> Callable:
        """Decorator: ``callback(v)`` returns the variable ``name`` to use when it is made
        (setting ``v.variable`` gives the dpnb variable itself)."""
        return _registering(self._variable_callbacks, name)

    def on_generate_function_by_name(self, name: str) -> Callable:
        """Decorator: ``callback(f)`` returns the function named ``name`` to build (it may
        edit ``f.proto``, e.g. its ``*_param``)."""
        return _registering(self._function_callbacks_by_name, name)

    def on_generate_function_by_type(self, name: str) -> Callable:
        """Decorator: as ``on_generate_function_by_name``, on every function of type ``name``."""
        return _registering(self._function_callbacks_by_type, name)

    def drop_function(self, *names: str) -> None:
        """Leave out the functions named ``names`` (and what only they lead to)."""
        def drop(f, variables, param_scope):
            self.verbose(f"Pass: Deleting {f.name}.")
            f.disable()

        for name in names:
            self.on_function_pass_by_name(name)(drop)

    def fix_parameters(self) -> None:
        """Build the network with every parameter at ``need_grad=False``."""
        self._fix_parameters = True

    def use_up_to(self, *names: str) -> None:
        """Stop the network at the variables ``names``: what reads them is left out."""
        self._use_up_to_variables.update(names)

    def remove_and_rewire(self, name: str, i: int = 0, o: int = 0) -> None:
        """Bypass the function named ``name``: its output ``o`` becomes its input ``i``
        (under the input's name)."""
        @self.on_function_pass_by_name(name)
        def bypass(f, variables, param_scope):
            fi, fo = f.inputs[i], f.outputs[o]
            self.verbose(f"Removing {f.name} and rewire input={fi.name} and output={fo.name}.")
            fo.rewire_on(fi)
            fo.proto.name = fi.name

    def set_variable(self, name: str, input_var: Variable) -> None:
        """Use ``input_var`` as the variable ``name`` (typically an input)."""
        @self.on_generate_variable(name)
        def replace(v):
            self.verbose(f"Replace {name} by {input_var}.")
            v.proto.shape.dim[:] = input_var.shape
            v.variable = input_var
            input_var.name = v.name
            return v

    def _average_pooling_decorator(self, name: str, by_type: bool) -> Callable:
        return (self.on_generate_function_by_type if by_type
                else self.on_generate_function_by_name)(name)

    def force_average_pooling_global(self, name: str, by_type: bool = False) -> None:
        """Make the average pooling ``name`` (a type with ``by_type``) pool over the whole
        image: its kernel and stride become the input's spatial shape."""
        @self._average_pooling_decorator(name, by_type)
        def make_global(f):
            pool_shape = list(f.inputs[0].proto.shape.dim[2:])
            self.verbose(f"Change strides of {f.name} to {pool_shape}.")
            p = f.proto.average_pooling_param
            p.kernel.dim[:] = pool_shape
            p.stride.dim[:] = pool_shape
            return f

    def check_average_pooling_global(self, name: str, by_type: bool = False) -> None:
        """Refuse (ValueError) the average pooling ``name`` (a type with ``by_type``)
        unless it pools over the whole image."""
        @self._average_pooling_decorator(name, by_type)
        def check(f):
            pool_shape = list(f.inputs[0].proto.shape.dim[2:])
            p = f.proto.average_pooling_param
            if list(p.kernel.dim) != pool_shape or list(p.stride.dim) != pool_shape:
                raise DpnbValueError(
                    f"{f.name}: average pooling is not global: the image shape is "
                    f"{pool_shape}, the pooling window {list(p.kernel.dim)} and its stride "
                    f"{list(p.stride.dim)}; use force_average_pooling_global")
            return f

    def set_batch_normalization_batch_stat_all(self, batch_stat: bool) -> None:
        """Set ``batch_stat`` of every batch normalization."""
        @self.on_generate_function_by_type("BatchNormalization")
        def set_batch_stat(f):
            self.verbose(f"Setting batch_stat={batch_stat} at {f.name}.")
            f.proto.batch_normalization_param.batch_stat = batch_stat
            return f

    def _apply_function_pass_by_name(self, f, variables, param_scope):
        callback = self._passes_by_name.get(f.name)
        return f if callback is None else callback(f, variables, param_scope)

    def _apply_function_pass_by_type(self, f, variables, param_scope):
        callback = self._passes_by_type.get(f.proto.type)
        return f if callback is None else callback(f, variables, param_scope)

    def _apply_generate_variable(self, v):
        if v.name in self._variable_callbacks:
            v = self._variable_callbacks[v.name](v)
        if self._fix_parameters:
            v.need_grad = False
        return v

    def _apply_generate_function_by_name(self, f):
        callback = self._function_callbacks_by_name.get(f.name)
        return f if callback is None else callback(f)

    def _apply_generate_function_by_type(self, f):
        callback = self._function_callbacks_by_type.get(f.proto.type)
        return f if callback is None else callback(f)

    def _apply_use_up_to(self, variables) -> None:
        for v in variables:
            if v.name in self._use_up_to_variables:
                self.verbose(f"Stopping at {v.name}.")
                v.stop = True


def _quiet(*args, **kwargs) -> None:
    """What ``verbose`` prints to when it is off: nothing."""


def _registering(table: dict, name: str) -> Callable:
    """A decorator that files its callback in ``table`` under ``name``."""
    def register(callback):
        table[name] = callback
        return callback
    return register
