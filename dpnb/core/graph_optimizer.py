"""nnabla's ``nnabla.core.graph_optimizer``: edits of a graph_def ProtoNetwork."""
from __future__ import annotations

from ..errors import DpnbError


def rename_variable(proto_network, renames: dict) -> None:
    """Rename variables of ``proto_network`` (``{'old_name': 'new_name', ...}``) where
    they are kept, computed and listed as outputs; the caller keeps names unique."""
    for old, new in renames.items():
        if old not in proto_network.variables:
            raise DpnbError(f"cannot rename {old!r}: network {proto_network.name!r} has no such "
                            f"variable; its variables are {list(proto_network.variables)}")
        pv = proto_network.variables.pop(old)
        proto_network.variables[new] = pv
        pv.name = new
        pv.proto.name = new
        if pv.parent is not None:
            outputs = proto_network.functions[pv.parent].outputs
            outputs[outputs.index(old)] = new
    proto_network.outputs = [renames.get(n, n) for n in proto_network.outputs]
