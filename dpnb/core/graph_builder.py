"""How ``nn.graph_def`` networks get defined: functions called on ProtoVariables are
recorded into the current network of the current graph (the default one, or that of a
``graph()`` block), named after the module calling them; a network is committed when
its top module returns, or when the graph is asked for.  A dpnb graph already built
converts too (``create_graph_from_variable``)."""
from __future__ import annotations

import contextlib
import re
from collections import OrderedDict
from collections.abc import Iterator

from .. import functions as F
from ..errors import DpnbError
from ..formats.function_messages import exported_params
from ..graph import Function, Variable, auto_forward, register_recorder
from ..parameter import get_parameters
from ..parameter import parameter_scope as scope_of
from .proto_graph import (ProtoFunction, ProtoGraph, ProtoGraphBuilder, ProtoNetwork,
                          current_graph_builder, current_network, use_builder)
from .proto_variable import ProtoVariable


def module_name(cls: type) -> str:
    """nnabla's default name of a module class: ``ConvBn`` -> ``conv_bn``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


def _commit_if_dirty() -> None:
    builder = current_graph_builder()
    if builder.is_dirty():
        builder.commit_network()


@contextlib.contextmanager
def graph(**kwargs) -> Iterator[ProtoGraph]:
    """Define networks into a new graph inside the block (``name``: the network's name,
    ``parameter_scope``: the dict its parameters go to); gives the graph."""
    previous = use_builder(ProtoGraphBuilder(**kwargs))
    try:
        yield current_graph_builder().get_graph()
        _commit_if_dirty()
    finally:
        use_builder(previous)


@contextlib.contextmanager
def graph_name(name: str) -> Iterator[ProtoNetwork | None]:
    """Name the network defined inside the block ``name``."""
    builder = current_graph_builder()
    previous, builder.graph_name = builder.graph_name, name
    try:
        yield builder.current
        _commit_if_dirty()
    finally:
        builder.graph_name = previous


@contextlib.contextmanager
def module_scope(pgb: ProtoGraphBuilder, module) -> Iterator[ProtoNetwork]:
    """Functions recorded inside the block belong to ``module``."""
    network = pgb.begin_module(module)
    try:
        yield network
    finally:
        pgb.end_module()


def reset_default_graph() -> None:
    """Forget every network of the default graph."""
    use_builder(ProtoGraphBuilder())


def get_default_graph(*args, **kwargs):
    """The default graph (networks defined outside ``graph()`` blocks), or its network
    named by the first argument or ``name``."""
    name = args[0] if args and isinstance(args[0], str) else kwargs.get("name")
    _commit_if_dirty()
    graph_ = current_graph_builder().proto_graph
    return graph_ if name is None else graph_.networks.get(name)


def get_default_graph_by_variable(proto_variable: ProtoVariable) -> ProtoNetwork:
    """The network of the default graph that has ``proto_variable`` as an output."""
    _commit_if_dirty()
    for network in current_graph_builder().proto_graph.networks.values():
        if proto_variable.name in network.outputs:
            return network
    raise DpnbError(f"{proto_variable.name!r} is not an output of any network of the default "
                    "graph; give an output variable of a network defined outside graph() blocks")


def _record(fn: Function, inputs: tuple):
    """A function called on ProtoVariables: set up on stand-in variables of their shapes
    (nothing computed), then added to the current network."""
    unknown = [x.shape for x in inputs
               if not isinstance(x, Variable) and min(x.shape, default=0) < 0]
    if unknown:
        raise DpnbError(f"{fn.name} was called on a ProtoVariable of shape {unknown[0]}: dpnb "
                        "records functions on known sizes only; give the batch size (saving "
                        "with variable_batch_size=True still writes it as variable)")
    stand_ins = [x if isinstance(x, Variable) else Variable(x.shape) for x in inputs]
    with auto_forward(False):
        fn(*stand_ins)
    type_name, args = exported_params(fn)
    return ProtoFunction(fn, type_name, args)(list(inputs), len(fn.outputs))


register_recorder(ProtoVariable, _record)


class _VariableConverter:
    """Records the functions of a dpnb graph, in forward order, into the current
    network: parameters (``params``: id of data -> name) as parameter variables, other
    leaves as inputs; ``names`` (id of data -> name) names variables."""

    def __init__(self, names: dict, params: dict):
        self.names = dict(names)
        self.names.update(params)
        self.params = params
        self.variables = {}
        self.outputs = []

    def renaming(self, i: int, name: str) -> str:
        return self.names.get(id(self.outputs[i].data), name)

    def __call__(self, fn: Function) -> None:
        if fn.name == "Sink":
            return
        inputs = []
        for v in fn.inputs:
            key = id(v.data)
            if key not in self.variables:
                kind = "Parameter" if key in self.params else "Buffer"
                need_grad = v.need_grad and kind == "Parameter"
                pv = ProtoVariable(v.shape, self.names.get(key), need_grad, kind)
                pv.variable_instance = v
                self.variables[key] = pv
            inputs.append(self.variables[key])
        self.outputs = fn.outputs
        type_name, args = exported_params(fn)
        pf = ProtoFunction(fn, type_name, args)
        produced = pf._proto_call(inputs, len(fn.outputs))
        for y, pv in zip(fn.outputs, produced if isinstance(produced, tuple) else (produced,)):
            self.variables[id(y.data)] = pv


def create_graph_from_variable(name, variables, names=None, parameter_scope=None) -> ProtoGraph:
    """A graph with one network ``name`` made of the dpnb graph computing ``variables``
    (one, or several); ``names`` (name -> variable) names variables, parameters are
    named from ``parameter_scope`` (the current scope when None)."""
    roots = list(variables) if isinstance(variables, (list, tuple)) else [variables]
    for v in roots:
        if not isinstance(v, Variable):
            raise DpnbError(f"create_graph_from_variable takes nn.Variables, got "
                            f"{type(v).__name__}")
    output = F.sink(*roots) if isinstance(variables, (list, tuple)) else variables
    with (scope_of("", parameter_scope) if parameter_scope is not None
          else contextlib.nullcontext()):
        params = {id(v.data): k for k, v in get_parameters(grad_only=False).items()}
    given = {id(v.data): k for k, v in (names or {}).items()}
    with graph(parameter_scope=parameter_scope, name=name) as g:
        converter = _VariableConverter(given, params)
        network = current_network()
        network.renaming = converter.renaming
        output.visit(converter)
        del network.renaming
        network.parameters = OrderedDict((k, v) for k, v in network.variables.items()
                                         if v.type == "Parameter")
        network.variables = OrderedDict((k, v) for k, v in network.variables.items()
                                        if v.type != "Parameter")
        for v in network.variables.values():
            v.variable_instance = None
    return g
