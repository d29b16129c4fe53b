"""nnabla's ``nnabla.core.variable_batch_size``: mark the batch axis of a graph_def
ProtoNetwork as -1, so that the network saved runs with any batch size."""
from __future__ import annotations

import numpy as np

from ..errors import DpnbError

# Functions whose ``shape`` argument starts with the batch size.
_SHAPED = ("Reshape", "Constant", "Rand", "Randint", "Randn", "RandBinomial", "RandBeta",
           "RandGamma")


def _batch_size(network) -> int | None:
    """The size of the sample axes of the data read by the last function with a
    ``base_axis`` (other than 0), as nnabla takes it; None where there is none."""
    batch = None
    for pf in network.forward_sequence():
        base_axis = pf.args.get("base_axis", 0)
        if base_axis:
            data = [k for k in pf.inputs if k in network.variables]
            if data:
                batch = int(np.prod(network.variables[data[0]].shape[:base_axis]))
    return batch


def _check_leading(pf, leading: int | None, batch: int) -> None:
    """``leading`` (what a shape argument starts with) must be the batch size."""
    if leading != batch:
        raise DpnbError(f"{pf.name}: its shape argument {list(pf.args['shape'])} does not "
                        f"start with the batch size {batch}; keep the batch axis first, or "
                        "save with variable_batch_size=False")


def variable_batch_size(network) -> None:
    """Rewrite ``network`` so that its batch axis is -1: variables starting with the
    batch size (but those computed from parameters alone), the leading size of shape
    arguments, and sample axes folded into one where a function's ``base_axis`` is
    above 1; sets ``network.batch_size``."""
    batch = _batch_size(network)
    if batch is None:
        return
    constant: set[str] = set()
    folded: set[str] = set()
    for pf in network.forward_sequence():
        if not any(k in network.variables and k not in constant for k in pf.inputs):
            constant.update(pf.outputs)
            continue
        base_axis = pf.args.get("base_axis", 1)
        if base_axis > 1:
            names = [k for k in pf.inputs if k in network.variables and k not in constant]
            for k in names + list(pf.outputs):
                if k not in folded:
                    v = network.variables[k]
                    v.shape = (int(np.prod(v.shape[:base_axis])),) + tuple(v.shape[base_axis:])
                    folded.add(k)
            pf.args["base_axis"] = 1
        if pf.type in _SHAPED or pf.type == "Broadcast":
            shape = list(pf.args["shape"])
            # Broadcast to more axes than its input has: the batch spans the leading ones.
            extra = 0
            if pf.type == "Broadcast":
                extra = max(len(shape) - len(network.variables[pf.inputs[0]].shape), 0)
            _check_leading(pf, int(np.prod(shape[:extra + 1])) if shape else None, batch)
            pf.args["shape"] = [-1] + shape[extra + 1:]
    for name, v in network.variables.items():
        if v.shape and name not in constant and v.shape[0] == batch:
            v.shape = (-1,) + tuple(v.shape[1:])
    network.batch_size = batch
