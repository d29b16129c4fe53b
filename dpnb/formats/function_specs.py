"""The registry of how each dpnb Function is written in nnabla's network files and
rebuilt from them: it collects the ``nnabla_spec`` every function class declares beside
itself (dpnb.functions.specs says what a spec holds) and looks them up by function,
class and nnabla type name for the readers and writers of ``.nnp`` files."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import replace

from .. import functions
from ..errors import DpnbError
from ..functions.specs import Built, FunctionSpec, Params
from ..graph import Function, install_arguments

__all__ = ["Built", "FunctionSpec", "NOT_WRITABLE", "Params", "exported_types", "spec_of_class",
           "spec_of_function", "spec_of_type"]


def _function_classes() -> list[type]:
    """The Function classes of dpnb.functions' modules, each where it is defined, in order."""
    classes = []
    for info in sorted(pkgutil.iter_modules(functions.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{functions.__name__}.{info.name}")
        classes += [value for value in vars(module).values()
                    if inspect.isclass(value) and issubclass(value, Function)
                    and value.__module__ == module.__name__]
    return classes


def _declared(cls: type) -> list[FunctionSpec]:
    """The specs ``cls`` declares itself (not those of its bases), bound to it."""
    declared = vars(cls).get("nnabla_spec", ())
    declared = declared if isinstance(declared, tuple) else (declared,)
    return [replace(spec, cls=cls) for spec in declared]


_CLASSES = _function_classes()
_SPECS_OF = {cls: _declared(cls) for cls in _CLASSES}
_SPECS = [spec for specs in _SPECS_OF.values() for spec in specs]
_BY_TYPE = {spec.type_name: spec for spec in _SPECS}
if len(_BY_TYPE) != len(_SPECS):
    raise DpnbError("function_specs: two specs share an nnabla type name")

# Function classes with no nnabla form of their own, and why (their ``no_nnabla_spec``).
NOT_WRITABLE = {cls: vars(cls)["no_nnabla_spec"] for cls in _CLASSES
                if "no_nnabla_spec" in vars(cls)}


def spec_of_function(fn: Function) -> FunctionSpec:
    """The spec of a function in a dpnb graph, or an error naming a function with none."""
    specs = _SPECS_OF.get(type(fn), [])  # the exact class: SyncBatchNormalization is not its base
    if len(specs) > 1:  # a class of several types (array.Generated), by the one it keeps
        specs = [spec for spec in specs if spec.type_name == fn.type_name]
    if not specs:
        reason = NOT_WRITABLE.get(type(fn))
        detail = f" ({reason})" if reason else ""
        raise DpnbError(f"function {type(fn).__name__} cannot be written to an nnabla network "
                        f"file{detail}: dpnb knows how to write {', '.join(sorted(_BY_TYPE))}; "
                        "build the network from those")
    return specs[0]


def spec_of_class(cls: type) -> FunctionSpec | None:
    """The spec written for functions of class ``cls`` (None where there is none)."""
    specs = _SPECS_OF.get(cls)
    return specs[0] if specs else None


def spec_of_type(type_name: str) -> FunctionSpec:
    """The spec of an nnabla function type read from a file, or an error naming it."""
    spec = _BY_TYPE.get(type_name)
    if spec is None:
        raise DpnbError(f"the network uses function type {type_name!r}, which dpnb does not "
                        f"have; dpnb reads {', '.join(sorted(_BY_TYPE))}. Rebuild the model "
                        "with those functions or run it on nnabla")
    return spec


def exported_types() -> list[str]:
    """nnabla's type names of every function dpnb can write and read."""
    return list(_BY_TYPE)


def _arguments(fn: Function) -> Params:
    """``Function.arguments``: a function's ``*_param`` values as it was called with them
    (a file holds Reshape's shape resolved, its arguments keep the -1 given)."""
    spec = spec_of_function(fn)
    return (spec.arguments or spec.export)(fn)


install_arguments(_arguments)
