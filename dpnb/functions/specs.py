"""How a function is written in nnabla's network files, declared beside its class: the
``FunctionSpec`` a class holds as ``nnabla_spec`` (nnabla's type name, its ``*_param``
field and fields, how to read the values off a function and how to add the function
back to a graph), and the small helpers most declarations are made of.

A class with no nnabla form says why in ``no_nnabla_spec``.  Parameters travel as plain
dicts (field name -> number, bool, str or list of ints), so nothing here knows protobuf;
dpnb.formats.function_specs collects the declarations for the file readers and writers."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..graph import Function, Variable

Params = dict[str, object]
Built = Variable | tuple[Variable, ...]
Export = Callable[[Function], Params]
Build = Callable[[list[Variable], Params, int], Built]


@dataclass(frozen=True)
class FunctionSpec:
    """One function as nnabla's files know it.

    ``params`` are the fields of the ``param_field`` message, in its order; ``export``
    gives their values for a function that has been set up; ``build`` adds the function
    to a graph from its inputs, those values (every field of the message, defaults
    included) and its number of outputs; ``arguments``, where given, the values the
    function was called with (``Function.arguments``) where they differ from those a file
    holds.  ``cls`` is the class declaring it, filled in by the registry."""

    type_name: str
    param_field: str | None
    params: tuple[str, ...]
    export: Export
    build: Build
    arguments: Export | None = None
    cls: type | None = None


def public(name: str) -> Callable:
    """The public function ``name`` of dpnb.functions (``F.name``), looked up when a
    build runs: a class is declared before the function that makes it."""
    return getattr(importlib.import_module(__package__), name)


@dataclass(frozen=True)
class Call:
    """A build calling ``F.<function>`` on the inputs (the first ``inputs`` of them; None:
    all), then the ``positional`` fields in order and the ``fields`` by keyword."""

    function: str
    fields: tuple[str, ...] = ()
    inputs: int | None = None
    positional: tuple[str, ...] = ()

    def __call__(self, xs: list[Variable], p: Params, n: int) -> Built:
        return public(self.function)(*xs[:self.inputs], *(p[name] for name in self.positional),
                                     **{name: p[name] for name in self.fields})


def call(function: str, *fields: str) -> Call:
    """A build passing the inputs, then the fields as keywords of the same names."""
    return Call(function, fields)


def only_inputs(function: str) -> Call:
    """A build passing the inputs alone."""
    return Call(function)


def unary(function: str) -> Call:
    """A build passing the first input alone."""
    return Call(function, inputs=1)


def binary(function: str) -> Call:
    """A build passing the first two inputs alone."""
    return Call(function, inputs=2)


def scalar(function: str) -> Call:
    """A build passing the first input and the value ``val``."""
    return Call(function, inputs=1, positional=("val",))


def without_params(type_name: str, function: str) -> FunctionSpec:
    """A function whose nnabla form has no parameters: its inputs alone."""
    return FunctionSpec(type_name, None, (), no_params, only_inputs(function))


def no_params(fn: Function) -> Params:
    return {}


def inplace_false(fn: Function) -> Params:
    """nnabla's ``inplace`` alone, written False: dpnb computes out of place."""
    return {"inplace": False}


def float_val(fn: Function) -> Params:
    return {"val": float(fn.val)}


def bool_val(fn: Function) -> Params:
    return {"val": bool(fn.val)}


def and_inplace_false(export: Export) -> Export:
    """``export``'s values and ``inplace`` written False."""
    return lambda fn: {**export(fn), "inplace": False}


def int_axis(fn: Function) -> Params:
    return {"axis": int(fn.axis)}


def always_false(fn: Function) -> bool:
    return False


def ints(values: Sequence) -> list[int]:
    return [int(v) for v in values]


def none_to(value, default):
    return default if value is None else value


def plain(value):
    """A parameter value as protobuf takes it: Python numbers, bools, strs, lists, dicts."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def attrs(*same: str, **other) -> Export:
    """An export reading fields from the function's attributes: ``same`` under the
    field's own name, ``other`` maps a field to an attribute name or a getter."""
    def export(fn: Function) -> Params:
        values = {name: getattr(fn, name) for name in same}
        for name, source in other.items():
            values[name] = getattr(fn, source) if isinstance(source, str) else source(fn)
        return plain(values)
    return export
