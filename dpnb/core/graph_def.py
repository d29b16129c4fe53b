"""nnabla's ``nnabla.core.graph_def`` (``nn.graph_def``): network definitions kept as
nnabla's files describe them (``ProtoGraph`` > ``ProtoNetwork`` > ``ProtoFunction``
and ``ProtoVariable``), defined by calling modules or functions on ProtoVariables or
converted from a dpnb graph, saved to and loaded from network files, and built into
dpnb graphs by calling them."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..errors import DpnbError
from ..formats.network_files import network_extension
from ..formats.network_reader import NnpLoader
from .graph_builder import (create_graph_from_variable, get_default_graph,
                            get_default_graph_by_variable, graph, graph_name, module_scope,
                            reset_default_graph)
from .proto_executor import ProtoExecutor
from .proto_graph import (FlatModule, ProtoFunction, ProtoGraph, ProtoGraphBuilder, ProtoNetwork,
                          current_graph_builder, current_module, current_network)
from .proto_variable import ProtoVariable

__all__ = ["FlatModule", "ProtoGraphBuilder", "create_graph_from_variable",
           "current_graph_builder", "current_module", "current_network", "get_default_graph",
           "get_default_graph_by_variable", "graph", "graph_name", "module_scope",
           "reset_default_graph", "ProtoExecutor", "ProtoFunction", "ProtoGraph", "ProtoNetwork",
           "ProtoVariable", "load", "save"]


def load(filename, batch_size=None, exclude_parameter=False, parameter_only=False,
         extension=".nntxt", parameter_scope=None, rng=None) -> ProtoGraph:
    """The graph of a network file (path or file object; ``extension`` names a file
    object's format): its networks (none with ``parameter_only``) and its parameters,
    which go to ``parameter_scope`` (a new dict when None) unless ``exclude_parameter``;
    ``batch_size`` replaces the networks' own, ``rng`` draws parameters the file lacks."""
    scope = parameter_scope if parameter_scope is not None else OrderedDict()
    loader = NnpLoader(filename, scope=OrderedDict() if exclude_parameter else scope,
                       extension=extension)
    if parameter_only:
        return ProtoGraph(parameter_scope=scope)
    rng = np.random.RandomState(0) if rng is None else rng
    return ProtoGraph.from_proto(loader.proto, batch_size=batch_size, param_scope=scope, rng=rng)


def save(filename, content, include_parameters=False, variable_batch_size=True,
         extension=".nnp", executors=None) -> None:
    """Write the first ProtoGraph (all its networks) or ProtoNetwork of ``content``, with
    its graph's parameters, to a network file chosen by the file's extension
    (``extension`` for a file object): ``.nnp``, ``.nntxt``/``.prototxt`` or
    ``.protobuf`` (the latter with the parameters inside where ``include_parameters``).
    ``executors`` are nnabla's dicts (name, network, data, output ...)."""
    network_extension(filename, extension)  # a kind nnabla does not write is refused first
    for g in content:
        if isinstance(g, ProtoGraph):
            return g.write(filename, None, include_parameters, variable_batch_size, executors,
                           extension)
        if isinstance(g, ProtoNetwork):
            return g.owner().write(filename, [g], include_parameters, variable_batch_size,
                                   executors, extension)
    raise DpnbError(f"save takes a list holding a ProtoGraph or a ProtoNetwork, got "
                    f"{[type(g).__name__ for g in content]}")
