"""Solver-state files in nnabla 1.39's .h5 and .protobuf layouts, and dpnb's own .npz.

States travel as an ordered mapping parameter name -> (state name -> array, t).
.h5: a group per parameter (attribute ``index``), a dataset per state (attribute
``index``) and a scalar int64 dataset ``t``.  .protobuf: one ``Optimizer``
message whose ``solver.states`` maps each parameter to a ``SolverState`` (``t``
and float32 ``state_parameter`` arrays).  .npz: entries ``<name>/<state>`` and
``<name>/t``.  dpnb also records the solver type (h5 root attribute ``solver``,
protobuf ``solver.type``); nnabla writes none and ignores it."""
from __future__ import annotations

import zipfile
from collections import OrderedDict
from typing import BinaryIO

import h5py
import numpy as np

from ..errors import DpnbError
from .files import describe, require_readable, write_target
from . import nnabla_pb2
from .checked_read import (NUMERIC, Reading, decoding, h5_array, h5_attribute, h5_datasets,
                           h5_scalar, h5_text_attribute, npz_arrays, proto_array, read_whole)

States = OrderedDict[str, tuple[dict[str, np.ndarray], int]]

FORMATS = (".h5", ".protobuf", ".npz")
WHAT = "solver state"


def _write_h5(f: BinaryIO, solver_type: str, states: States) -> None:
    """A group per parameter holding its state datasets and ``t``."""
    with h5py.File(f, "w") as h5:
        h5.attrs["solver"] = np.bytes_(solver_type)  # fixed length: read without a heap
        for index, (name, (arrays, t)) in enumerate(states.items()):
            group = h5.require_group(name)
            group.attrs["index"] = index
            for key_index, (key, array) in enumerate(arrays.items()):
                group[key] = array
                group[key].attrs["index"] = key_index
            group["t"] = np.int64(t)


def _read_h5(f, reading: Reading) -> tuple[str | None, States]:
    """(solver type or None, states) of an .h5 state file, parameters in ``index`` order."""
    groups: dict[str, dict] = {}
    with h5py.File(f, "r") as h5:
        solver_type = h5_text_attribute(reading, h5, "solver")
        for name, dataset in h5_datasets(h5):
            group, key = name.rsplit("/", 1) if "/" in name else ("", name)
            entry = groups.setdefault(group, {"index": h5_attribute(reading, dataset.parent,
                                                                    "index"),
                                              "seen": len(groups), "arrays": [], "t": 0})
            if key == "t":
                entry["t"] = h5_scalar(reading, name, dataset)
            else:
                index = h5_attribute(reading, dataset, "index")
                entry["arrays"].append((index or 0, key, h5_array(reading, name, dataset)))
    order = sorted(groups, key=lambda g: (groups[g]["index"] is None,
                                          groups[g]["index"] or 0, groups[g]["seen"]))
    states = OrderedDict(
        (g, ({key: a for _, key, a in sorted(groups[g]["arrays"], key=lambda e: e[0])},
             groups[g]["t"])) for g in order)
    return solver_type, states


def write_optimizer(opt: nnabla_pb2.Optimizer, states: States) -> None:
    """Put ``states`` into ``opt.solver.states``, replacing the entries of the same
    parameters and keeping the others, as nnabla's ``set_states_to_protobuf`` does."""
    for name, (arrays, t) in states.items():
        state = opt.solver.states[name]
        state.Clear()
        state.t = int(t)
        for key, array in arrays.items():
            entry = state.state_parameter[key]
            entry.shape.dim.extend(int(d) for d in np.shape(array))
            entry.data.extend(np.asarray(array, dtype=np.float32).ravel().tolist())


def _to_optimizer(solver_type: str, states: States) -> nnabla_pb2.Optimizer:
    """The states as nnabla's ``Optimizer`` message."""
    opt = nnabla_pb2.Optimizer()
    opt.solver.type = solver_type
    write_optimizer(opt, states)
    return opt


def read_optimizer(opt: nnabla_pb2.Optimizer, where: str,
                   reading: Reading | None = None) -> tuple[str | None, States]:
    """(solver type or None, states) of an ``Optimizer`` message; errors name it as
    ``where`` says (a file, or the message), ``reading`` (of a file) holds its limit."""
    reading = Reading(where) if reading is None else reading
    states: States = OrderedDict()
    for name, state in opt.solver.states.items():
        arrays = {key: proto_array(reading, f"{name}/{key}", entry.shape.dim, entry.data)
                  for key, entry in state.state_parameter.items()}
        states[name] = (arrays, int(state.t))
    return (opt.solver.type or None), states


def _write_npz(f: BinaryIO, states: States) -> None:
    """dpnb's .npz: entries ``<name>/<state>`` and ``<name>/t``."""
    arrays: dict[str, np.ndarray] = {}
    for name, (state, t) in states.items():
        arrays.update((f"{name}/{key}", array) for key, array in state.items())
        arrays[f"{name}/t"] = np.array(t, dtype=np.int64)
    np.savez(f, **arrays)


def _read_npz(f, reading: Reading) -> tuple[None, States]:
    """(None, states) of dpnb's .npz; a parameter's entries keep their file order."""
    states: States = OrderedDict()
    with zipfile.ZipFile(f, "r") as archive:
        for entry, array in npz_arrays(reading, archive, NUMERIC):
            if "/" not in entry:
                raise ValueError(f"entry {entry!r} is not <parameter>/<state>")
            name, key = entry.rsplit("/", 1)
            arrays, _ = states.setdefault(name, ({}, 0))
            if key != "t":
                arrays[key] = array
            elif array.size != 1 or array.dtype.kind not in "iu":
                raise reading.refuse(f"has entry {entry!r} of {array.dtype} {array.shape}, "
                                     "not one integer")
            else:
                states[name] = (arrays, int(array.reshape(())))
    return None, states


def save(path, fmt: str, solver_type: str, states: States) -> None:
    """Write ``states`` of a ``solver_type`` solver to ``path`` atomically in ``fmt``."""
    if fmt == ".h5":
        write_target(path, lambda f: _write_h5(f, solver_type, states))
    elif fmt == ".protobuf":
        data = _to_optimizer(solver_type, states).SerializeToString()
        write_target(path, lambda f: f.write(data))
    else:
        write_target(path, lambda f: _write_npz(f, states))


def load(path, fmt: str) -> tuple[str | None, States]:
    """(solver type, or None where the file does not say, states) of a state file."""
    require_readable(path, WHAT)
    reading = Reading(f"{WHAT} file {describe(path)}")
    with decoding(reading, fmt, WHAT):
        if fmt == ".h5":
            solver_type, states = _read_h5(path, reading)
        elif fmt == ".protobuf":
            opt = nnabla_pb2.Optimizer.FromString(read_whole(path, reading))
            solver_type, states = read_optimizer(opt, f"{reading.label} (.protobuf)", reading)
        else:
            solver_type, states = _read_npz(path, reading)
    if not states:
        raise DpnbError(f"{WHAT} file {describe(path)} ({fmt}) holds no states: it is damaged "
                        "or not a solver state file; check the file")
    return solver_type, states
