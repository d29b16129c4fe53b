"""The executors of nnabla's network files in graph_def (``ProtoExecutor``)."""
from __future__ import annotations

from ..formats import nnabla_pb2


class ProtoExecutor:
    """An executor of a network file (nnabla's ``Executor`` message), with the renaming
    of the network's outputs that its ``output`` dict asks for."""

    def __init__(self, proto):
        self.proto = proto
        self.renaming = None
        self.network_name = None

    @staticmethod
    def from_proto(proto) -> "ProtoExecutor":
        return ProtoExecutor(proto)

    @staticmethod
    def create_from_dict(executor: dict, network) -> "ProtoExecutor":
        """An executor from nnabla's dict (name, network, data, output: a list of names or
        a dict name -> ProtoVariable, which renames those variables) for ``network``."""
        remap = executor.get("remp", {})
        e = ProtoExecutor(nnabla_pb2.Executor())
        e.network_name = executor.get("network")
        outputs = executor.get("output", {})
        if isinstance(outputs, dict):
            e.renaming = {v.name: n for n, v in outputs.items()}
        p = e.proto
        p.name, p.network_name = executor["name"], executor["network"]
        p.no_image_normalization = executor.get("no_image_normalization", False)
        p.num_evaluations = executor.get("num_evaluations", 0)
        p.repeat_evaluation_type = executor.get("repeat_evaluation_type", "")
        p.need_back_propagation = executor.get("need_back_propagation", False)
        for field, names in ((p.data_variable, executor.get("data", [])),
                             (p.output_variable, outputs)):
            for name in names:
                item = field.add()
                item.variable_name, item.data_name = name, remap.get(name, name)
        for name in executor.get("generator_variables", {}):
            g = p.generator_variable.add()
            g.variable_name, g.type, g.multiplier = name, "Constant", 0
        for name in network.parameters:
            p.parameter_variable.add().variable_name = name
        return e

    def get_network_renaming(self):
        return self.network_name, self.renaming

    def as_proto(self):
        return self.proto
