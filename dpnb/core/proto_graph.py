"""nnabla's network definitions in memory (``nn.graph_def``'s data model): a
``ProtoGraph`` holds ``ProtoNetwork``s made of ``ProtoVariable``s and
``ProtoFunction``s named as in nnabla's files; a network converts to nnabla's protobuf
and back, builds a dpnb graph on given (or new) input variables, and is written to a
network file.  The graph being defined is held by the current ``ProtoGraphBuilder``."""
from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from ..context import context_scope, get_current_context
from ..errors import DpnbError
from ..formats import nnabla_pb2, parameter_files
from ..formats.function_messages import create_function_instance, function_message, function_params
from ..formats.messages import network_message, unique_name
from ..formats.network_files import network_extension, write_network
from ..graph import Variable, get_auto_forward
from ..parameter import get_parameter_or_create, get_parameters, parameter_scope, set_parameter
from .graph_optimizer import rename_variable
from .proto_executor import ProtoExecutor
from .proto_variable import ProtoVariable
from .variable_batch_size import variable_batch_size as mark_batch_axis

GRAPH_MEMBERS = ("inputs", "outputs", "parameters", "functions", "variables")


def _input_of(network, name: str) -> ProtoVariable:
    """The variable or parameter ``name`` of ``network``."""
    return network.variables[name] if name in network.variables else network.parameters[name]


class ProtoFunction:
    """A function of a network definition: nnabla's ``type``, a unique ``name``, its
    ``args`` (the ``*_param`` fields), and the names of its ``inputs`` and ``outputs``.
    Without ``name`` it is named after the current module of the graph being defined,
    in the current network, which then ``owner``s it."""

    def __init__(self, func, f_type, args, name=None, owner=None):
        self.type = f_type
        if name is None:
            network = current_network()
            self.path_name = current_module().get_path_name()
            prefix = f"{self.path_name}/{f_type}" if self.path_name else f_type
            self.name = unique_name(network.func_names, prefix)
            self.owner = weakref.ref(network)
        else:
            self.path_name = ""
            self.name = name
            self.owner = weakref.ref(owner)
        self.args = args
        self.inputs = []
        self.outputs = []
        self.function_instance = func  # a dpnb Function set up on the inputs' shapes
        self.repeat_id = []
        self._proto = None

    def __repr__(self) -> str:
        return f"<ProtoFunction {self.name!r} {self.type}>"

    def __getitem__(self, item):
        return self.__dict__[item]

    def clone(self, owner) -> "ProtoFunction":
        pf = ProtoFunction(None, self.type, dict(self.args), self.name, owner)
        pf.inputs = list(self.inputs)
        pf.outputs = list(self.outputs)
        pf.repeat_id = list(self.repeat_id)
        return pf

    def to_message(self, args: dict | None = None):
        """This function as nnabla's ``Function`` message (with ``args`` in place of its own)."""
        return function_message(self.name, self.type, self.inputs, self.outputs, self.repeat_id,
                                self.args if args is None else args)

    @property
    def proto(self):
        """nnabla's ``Function`` message of this function, made once and then kept."""
        if self._proto is None:
            self._proto = self.to_message()
        return self._proto

    def __call__(self, inputs, n_outputs=-1):
        return self._proto_call(inputs, n_outputs)

    def _proto_call(self, inputs, n_outputs):
        """Add this function to its network, reading ``inputs`` (ProtoVariables, or
        nn.Variables: parameters, named when the network is committed); its outputs
        get the shapes of ``function_instance``'s outputs.  Returns the output
        ProtoVariable(s)."""
        network = self.owner()
        join = (lambda n: f"{self.path_name}/{n}") if self.path_name else (lambda n: n)
        for v in inputs:
            if isinstance(v, Variable):
                key = str(id(v.data))
                network.parameters[key] = v
                self.inputs.append(key)
                continue
            if v.name is None:
                v.name = unique_name(network.var_names, join(f"{self.type}_in"))
            network.variables[v.name] = v
            v.required.append(self.name)
            self.inputs.append(v.name)
        shapes = [y.shape for y in self.function_instance.outputs]
        if n_outputs >= 0 and n_outputs != len(shapes):
            raise DpnbError(f"{self.type} gives {len(shapes)} outputs, but n_outputs="
                            f"{n_outputs} was asked for")
        self.function_instance = None
        renaming = getattr(network, "renaming", None)
        for i, shape in enumerate(shapes):
            auto = join(f"{self.type}_out")
            wanted = auto if renaming is None else renaming(i, auto)
            name = unique_name(network.var_names, wanted)
            if wanted != auto and name != wanted:
                raise DpnbError(f"the name {wanted!r} given to an output of {self.name} is "
                                "taken already in the network; give each variable its own name")
            pv = network.variables[name] = ProtoVariable(shape, name, False, "Buffer")
            pv.parent = self.name
            self.outputs.append(name)
        network.functions[self.name] = self
        current_graph_builder().dirty()
        outputs = tuple(network.variables[k] for k in self.outputs)
        return outputs[0] if len(outputs) == 1 else outputs

    def graph_call(self, **kwargs):
        """Add this function to a dpnb graph: on its inputs' ``variable_instance``s
        (parameters fetched, or created with their initializer, in the current scope),
        setting its outputs' ``variable_instance``s.  The function is made on the first
        call, ``batch_size`` then replacing a leading -1 of a ``shape`` argument."""
        network = self.owner()
        batch_size = kwargs.get("batch_size", 1)
        inputs = []
        for k in self.inputs:
            pv = _input_of(network, k)
            if pv.type == "Parameter":
                pv.variable_instance = get_parameter_or_create(pv.name, pv.shape, pv.initializer,
                                                               need_grad=pv.need_grad)
            elif pv.variable_instance is None:
                raise DpnbError(f"input {pv.name!r} of {self.name} has no variable; give the "
                                "network's inputs when calling it")
            inputs.append(pv.variable_instance)
        if self.function_instance is None:  # made once (per context), as nnabla does
            args = dict(self.args)
            if args.get("shape") and args["shape"][0] == -1:
                args["shape"] = [batch_size] + list(args["shape"][1:])
            self.function_instance = create_function_instance(network.current_context,
                                                              self.to_message(args))
        outputs = self.function_instance(*inputs, n_outputs=len(self.outputs),
                                         auto_forward=get_auto_forward())
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        for k, y in zip(self.outputs, outputs):
            network.variables[k].variable_instance = y


class ProtoNetwork:
    """A network definition: ``functions``, ``variables`` (activations), ``parameters``
    (OrderedDicts by name) and the names of its ``inputs`` and ``outputs``.  Calling it
    builds the network as a dpnb graph; ``as_proto`` gives nnabla's ``Network``."""

    def __init__(self, owner, name=None, batch_size=None):
        for key in GRAPH_MEMBERS:
            self.__dict__[key] = OrderedDict()
        self.arguments = {}
        self.func_names = {}
        self.var_names = {}
        self.name = name
        self.owner = weakref.ref(owner)
        self.batch_size = batch_size
        self.repeat_info = {}

    def __repr__(self) -> str:
        return f"<ProtoNetwork {self.name!r}: {len(self.functions)} functions>"

    @property
    def current_context(self):
        return self.owner().current_context

    def __getitem__(self, item):
        return self.__dict__[item]

    def _update_ports(self) -> None:
        """Inputs: variables read and computed by nothing; outputs: computed and read by nothing."""
        self.inputs = [k for k, v in self.variables.items() if not v.parent and v.required]
        self.outputs = [k for k, v in self.variables.items() if not v.required and v.parent]

    def resolve_function_parameters(self, function, params):
        """Give the nn.Variable inputs of ``function`` their parameter names: from
        ``params`` (id of a variable's data -> name), else ``<function>_<index>``; yields
        the keys they were recorded under."""
        inputs = []
        for index, k in enumerate(function.inputs):
            v = _input_of(self, k)
            if not isinstance(v, Variable):
                inputs.append(k)
                continue
            name = params.get(id(v.data))
            if name is None:
                name = unique_name(self.var_names, f"{function.name}_{index}")
            yield k
            p = self.parameters.get(name)
            if not isinstance(p, ProtoVariable):
                p = self.parameters[name] = ProtoVariable(v.shape, name, v.need_grad, "Parameter")
                p.variable_instance = v
            p.required.append(function.name)
            inputs.append(name)
        function.inputs = inputs

    def commit(self, name, networks, params):
        """Finish the network as ``networks[name]``: parameters named (``params``: id of
        a parameter's data -> name) and set in the graph's parameter scope."""
        networks[name] = self
        recorded = set()
        for f in self.functions.values():
            recorded.update(self.resolve_function_parameters(f, params))
        for k in recorded:
            self.parameters.pop(k, None)
        with parameter_scope("", self.owner().parameter_scope):
            for k, v in self.parameters.items():
                set_parameter(k, v.variable_instance)
        for v in self.variables.values():
            if v.parent not in self.functions:
                v.parent = None
        self._update_ports()
        self.name = name

    def update_actual_shape_of_reshape(self):
        """Resolve the -1 of Reshape's ``shape`` arguments from their inputs' shapes."""
        for pf in self.forward_sequence():
            if pf.type != "Reshape":
                continue
            shape = list(pf.args["shape"])
            unknown = [i for i, s in enumerate(shape) if s < 0]
            if len(unknown) > 1:
                raise DpnbError(f"{pf.name}: Reshape's shape {shape} has more than one "
                                "negative size; give at most one")
            if unknown:
                rest = int(np.prod([s for s in shape if s >= 0]))
                shape[unknown[0]] = int(np.prod(_input_of(self, pf.inputs[0]).shape)) // rest
                pf.args["shape"] = shape

    def as_proto(self, **kwargs):
        """nnabla's ``Network`` message of this network; ``variable_batch_size`` (default
        True, remembered) writes the batch axis as -1 (and changes this network so)."""
        self.arguments.update(kwargs)
        self.update_actual_shape_of_reshape()
        if self.arguments.get("variable_batch_size", True):
            mark_batch_axis(self)
        variables = list(self.variables.values()) + list(self.parameters.values())
        return network_message(self.name, self.batch_size, [v.to_message() for v in variables],
                               [pf.to_message() for pf in self.functions.values()])

    def __call__(self, *args, **kwargs):
        """Build this network as a dpnb graph on the input variables ``args`` (new ones,
        of the inputs' shapes with ``batch_size`` for -1, when none are given) and
        return its output variable(s); ``ctx`` sets the graph's context."""
        ctx = kwargs.get("ctx")
        if ctx:
            self.owner().current_context = ctx
        batch_size = kwargs.get("batch_size")
        batch_size = self.batch_size if batch_size is None else batch_size
        with parameter_scope("", self.owner().parameter_scope), context_scope(self.current_context):
            pvs = [_input_of(self, k) for k in self.inputs]
            if args:
                for pv, v in zip(pvs, args):
                    pv.variable_instance = v
            else:
                for pv in pvs:
                    self._new_input(pv, batch_size)
            self.execute_on_proto(lambda pf: pf.graph_call(batch_size=batch_size))
        outputs = tuple(self.variables[k].variable_instance for k in self.outputs)
        return outputs[0] if len(outputs) == 1 else outputs

    def _new_input(self, pv: ProtoVariable, batch_size) -> None:
        """A variable for input ``pv``: its initializer's values (shared by the graph's
        networks) where it has one, else an empty one of its shape."""
        if any(d < 0 for d in pv.shape) and not batch_size:
            raise DpnbError(f"input {pv.name!r} of network {self.name!r} has a variable batch "
                            f"size {pv.shape}; pass batch_size= or input variables")
        shape = tuple(d if d >= 0 else batch_size for d in pv.shape)
        if callable(pv.initializer):
            shared = self.owner().global_variables
            if pv.name not in shared:
                shared[pv.name] = Variable.from_numpy_array(pv.initializer(shape), need_grad=True)
            pv.variable_instance = shared[pv.name]
        elif pv.variable_instance is None:
            pv.variable_instance = Variable(shape)

    def execute_on_proto(self, execute: Callable):
        """Call ``execute`` with each function the outputs depend on, each after those
        computing its inputs (nnabla's order: the last output's functions first)."""
        evaluated = set(self.inputs)
        done = set()
        stack = [self.functions[self.variables[k].parent] for k in self.outputs
                 if self.variables[k].parent in self.functions]
        while stack:
            pf = stack.pop()
            if pf.name in done or pf.name not in self.functions:
                continue
            pending = [_input_of(self, k) for k in pf.inputs]
            pending = [v for v in pending if v.parent in self.functions and v.name not in evaluated]
            if pending:
                stack.append(pf)
                stack.extend(self.functions[v.parent] for v in pending)
                continue
            execute(pf)
            done.add(pf.name)
            evaluated.update(pf.outputs)

    def forward_sequence(self):
        """The functions in the order a forward runs them."""
        functions = []
        self.execute_on_proto(functions.append)
        yield from functions

    @staticmethod
    def from_proto(owner, proto, rng, batch_size) -> "ProtoNetwork":
        """The network of nnabla's ``Network`` message ``proto``; parameters get the
        initializers the file names (drawing from ``rng``)."""
        g = ProtoNetwork(owner, proto.name, batch_size if batch_size else proto.batch_size)
        g.repeat_info = {r.id: r.times for r in proto.repeat_info}
        for v in proto.variable:
            kind = g.parameters if v.type == "Parameter" else g.variables
            kind[v.name] = ProtoVariable.from_message(v, rng)
        for f in proto.function:
            pf = g.functions[f.name] = ProtoFunction(None, f.type, function_params(f), f.name, g)
            pf.repeat_id = list(f.repeat_id)
            for n in f.input:
                _input_of(g, n).required.append(pf.name)
                pf.inputs.append(n)
            for n in f.output:
                _input_of(g, n).parent = pf.name
                pf.outputs.append(n)
        g._update_ports()
        return g

    def save(self, filename, include_parameter=False, variable_batch_size=True, executors=None):
        """Write this network (and its graph's parameters) to a network file."""
        self.owner().write(filename, [self], include_parameter, variable_batch_size, executors)

    def clone(self) -> "ProtoNetwork":
        """A copy with copied variables and functions (sharing the graph, which it keeps alive)."""
        owner = self.owner()
        n = ProtoNetwork(owner, self.name, self.batch_size)
        for key in ("variables", "parameters"):
            n.__dict__[key] = OrderedDict((k, v.clone()) for k, v in self[key].items())
        n.functions = OrderedDict((k, f.clone(n)) for k, f in self.functions.items())
        n.inputs, n.outputs = list(self.inputs), list(self.outputs)
        n.owner_ = owner
        return n


class ProtoGraph:
    """A group of networks (what an .nnp holds) with their parameter scope; its only
    (or first) network is its default one, which calling the graph builds, and whose
    members (``inputs``, ``functions`` ...) it shows as its own."""

    def __init__(self, networks=None, parameter_scope=None):
        self.networks = networks if networks is not None else OrderedDict()
        self.executors = OrderedDict()
        self.parameter_scope = parameter_scope if parameter_scope is not None else OrderedDict()
        self.global_variables = {}

    def __contains__(self, item):
        return item in self.__dict__

    def __getattr__(self, item):
        if item in GRAPH_MEMBERS:
            return self.default_graph()[item]
        networks = self.__dict__.get("networks", {})
        if item in networks:
            return networks[item]
        raise AttributeError(f"ProtoGraph has no attribute or network {item!r}; its networks "
                             f"are {list(networks)}")

    def __getitem__(self, item):
        return self.__dict__[item] if item in self.__dict__ else self.__getattr__(item)

    def __setitem__(self, key, value):
        if isinstance(value, ProtoNetwork):
            self.networks[key] = value
        else:
            self.__dict__[key] = value

    def get(self, key, value=None):
        return self.__dict__.get(key, value)

    def get_parameters(self, grad_only=False):
        """The parameters of this graph's scope, by name."""
        with parameter_scope("", self.parameter_scope):
            return get_parameters(grad_only=grad_only)

    def set_parameter(self, key, param):
        with parameter_scope("", self.parameter_scope):
            set_parameter(key, param)

    def set_parameters(self, params):
        for key, param in params.items():
            self.set_parameter(key, param)

    @property
    def current_context(self):
        """The context the graph's networks are built in (the current one unless set)."""
        return self.__dict__.get("_context") or get_current_context()

    @current_context.setter
    def current_context(self, ctx):
        if ctx != self.current_context:  # the functions made for the old one go
            for network in self.networks.values():
                for pf in network.functions.values():
                    pf.function_instance = None
        self.__dict__["_context"] = ctx

    @staticmethod
    def from_proto(proto, batch_size=None, param_scope=None, rng=None) -> "ProtoGraph":
        """The graph of nnabla's ``NNablaProtoBuf`` message (its networks and executors)."""
        rng = np.random.RandomState(0) if rng is None else rng
        g = ProtoGraph(parameter_scope=param_scope)
        for p in proto.network:
            g.networks[p.name] = ProtoNetwork.from_proto(g, p, rng, batch_size)
        for e in proto.executor:
            g.executors[e.name] = ProtoExecutor.from_proto(e)
        return g

    def as_proto(self, include_parameter=False, only_parameter=False, networks=None,
                 variable_batch_size=True):
        """nnabla's ``NNablaProtoBuf`` of the graph's networks (or ``networks``) and
        executors (whose output dicts rename variables in the copy written), with the
        parameters where ``include_parameter`` (alone with ``only_parameter``)."""
        proto = nnabla_pb2.NNablaProtoBuf()
        if not only_parameter:
            chosen = OrderedDict((n.name, n) for n in
                                 (self.networks.values() if networks is None else networks))
            for executor in self.executors.values():
                name, renames = executor.get_network_renaming()
                if renames is not None and name in chosen:
                    renamed = chosen[name].clone()
                    rename_variable(renamed, renames)
                    chosen[name] = renamed
            proto.network.extend(n.as_proto(variable_batch_size=variable_batch_size)
                                 for n in chosen.values())
            proto.executor.extend(e.as_proto() for e in self.executors.values())
        if include_parameter:
            parameter_files.to_proto(parameter_files.parameter_entries(self.get_parameters()),
                                     proto)
        return proto

    def default_graph(self) -> ProtoNetwork:
        """The first network of the graph."""
        if self.networks:
            return next(iter(self.networks.values()))
        raise DpnbError("this graph has no network; define one (call a module or a function "
                        "on nn.ProtoVariables) or load a network file")

    def __call__(self, *args, **kwargs):
        return self.default_graph()(*args, **kwargs)

    def save(self, filename, include_parameter=False, variable_batch_size=True, executors=None):
        """Write this graph's networks and parameters to a network file."""
        self.write(filename, None, include_parameter, variable_batch_size, executors)

    def write(self, filename, networks=None, include_parameter=False, variable_batch_size=True,
              executors=None, extension=".nnp") -> None:
        """Write this graph's networks (or ``networks``, one of them), with its parameters,
        to a network file chosen by the file's extension (``extension`` for a file object):
        ``.nnp``, ``.nntxt``/``.prototxt`` or ``.protobuf`` (the latter with the parameters
        inside where ``include_parameter``); ``executors`` are nnabla's dicts (name,
        network, data, output ...) for the networks written."""
        ext = network_extension(filename, extension)
        if executors is not None:
            self.executors = _executors(executors, self.networks if networks is None
                                        else {n.name: n for n in networks})
        proto = self.as_proto(include_parameter=include_parameter and ext != ".nnp",
                              networks=networks, variable_batch_size=variable_batch_size)
        write_network(filename, ext, proto, self.get_parameters())


class FlatModule:
    """The module a network defined without modules is named after: ``model`` (its
    functions then have no path) or the graph's name."""

    def __init__(self, name):
        self.name = name if name else "model"

    @staticmethod
    def get_parameters(recursive=True, grad_only=False, memo=None):
        return get_parameters()

    def get_path_name(self) -> str:
        return f"@{self.name}" if self.name != "model" else ""


class ProtoGraphBuilder:
    """What a graph being defined holds meanwhile: its networks, the network being
    recorded (``current``), the stack of modules being called, and the names given."""

    def __init__(self, **kwargs):
        self.networks = OrderedDict()
        self.stack = []
        self.current = None
        self.module = None
        self.names = {}
        self.dirty_flag = False
        self.graph_name = kwargs.get("name")
        self.proto_graph = ProtoGraph(self.networks, kwargs.get("parameter_scope"))

    def get_current(self) -> ProtoNetwork:
        if self.current is None:
            self.current = ProtoNetwork(self.proto_graph)
        return self.current

    def get_module(self):
        if self.module is None:
            self.module = FlatModule(self.graph_name)
        return self.module

    def dirty(self) -> None:
        self.dirty_flag = True

    def is_dirty(self) -> bool:
        return self.dirty_flag

    def get_graph(self) -> ProtoGraph:
        return self.proto_graph

    def begin_module(self, module) -> ProtoNetwork:
        self.stack.append(module)
        self.module = module
        return self.get_current()

    def end_module(self) -> None:
        self.stack.pop()
        if self.stack:
            self.module = self.stack[-1]
        else:
            self.commit_network()

    def commit_network(self) -> None:
        """Add the network recorded so far to the graph, named after the graph (once) or
        its module, and start a new one."""
        if self.graph_name:
            name, self.graph_name = self.graph_name, None
        else:
            name = self.get_module().name
        name = unique_name(self.names, name)
        params = {id(v.data): k for k, v in self.get_module().get_parameters().items()}
        self.get_current().commit(name, self.networks, params)
        self.dirty_flag = False
        self.current = None
        self.module = None


proto_graph_builder = ProtoGraphBuilder()


def use_builder(builder: ProtoGraphBuilder) -> ProtoGraphBuilder:
    """Make ``builder`` the one recording (the default graph's, or a ``graph()`` block's);
    returns the one it replaces."""
    global proto_graph_builder
    previous, proto_graph_builder = proto_graph_builder, builder
    return previous


def current_graph_builder() -> ProtoGraphBuilder:
    return proto_graph_builder


def current_network() -> ProtoNetwork:
    return proto_graph_builder.get_current()


def current_module():
    return proto_graph_builder.get_module()


def _executors(executors: list[dict], networks: dict) -> OrderedDict:
    """nnabla's executor dicts as ProtoExecutors of ``networks`` (by name)."""
    for e in executors:
        if e.get("network") not in networks:
            raise DpnbError(f"executor {e.get('name')!r} runs network {e.get('network')!r}, "
                            f"but the networks saved are {list(networks)}; name one in 'network'")
    return OrderedDict((e["name"], ProtoExecutor.create_from_dict(e, networks[e["network"]]))
                       for e in executors)
