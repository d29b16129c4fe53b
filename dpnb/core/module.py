"""nnabla's ``nn.Module``: a building block of models that owns its parameters (in its
own parameter scope) and its submodules (its attributes that are modules); every
method of a subclass runs inside both, so that parametric functions called there
create and find the module's parameters, and graph_def names what it records after
the module."""
from __future__ import annotations

import functools
import inspect
from collections import OrderedDict

from ..errors import DpnbValueError
from ..parameter import get_parameters as scope_parameters
from ..parameter import load_parameters as load_parameter_file
from ..parameter import parameter_scope
from ..parameter import save_parameters as save_parameter_file
from ..parameter import set_parameter as set_scope_parameter
from .graph_builder import module_name, module_scope
from .proto_graph import current_graph_builder


def insert_parent_name(name: str, params: dict) -> OrderedDict:
    """``params`` with their names put under submodule ``name`` (``@name/...``)."""
    return OrderedDict((f"@{name}/{k}", v) for k, v in params.items())


class ParamMemo:
    """The parameters listed so far, so that a parameter shared by modules is listed once."""

    def __init__(self):
        self._memo = set()

    def filter_and_update(self, params: dict) -> OrderedDict:
        """The parameters of ``params`` not listed before (now listed)."""
        found = OrderedDict()
        for k, v in params.items():
            if id(v) not in self._memo:
                found[k] = v
                self._memo.add(id(v))
        return found


class MetaClass(type):
    """Makes every method of a Module subclass run in the module's graph_def scope and
    parameter scope."""

    @staticmethod
    def method_wrapper(method):
        @functools.wraps(method)
        def wrapped(self, *args, **kwargs):
            with module_scope(current_graph_builder(), self):
                with parameter_scope("", self.parameter_scope):
                    return method(self, *args, **kwargs)
        return wrapped

    def __new__(meta, classname, bases, class_dict):
        if bases:
            class_dict = {name: MetaClass.method_wrapper(attr) if inspect.isfunction(attr) else attr
                          for name, attr in class_dict.items()}
        return type.__new__(meta, classname, bases, class_dict)


class Module(metaclass=MetaClass):
    """A model's building block: subclasses build their submodules in ``__init__`` (as
    attributes) and compute in ``call``; calling the module calls ``call``.  Its
    parameters are listed by ``get_parameters`` as ``name`` (its own) and
    ``@sub/name`` (a submodule's); ``training`` is passed down to submodules."""

    _recursive_attrs = ["training"]

    def __repr__(self) -> str:
        return self.__class__.__name__

    @property
    def training(self) -> bool:
        """Whether the module is training (True until set): ``call`` may build another
        graph for evaluation."""
        return self.__dict__.setdefault("training", True)  # set by __setattr__

    @property
    def parameter_scope(self) -> OrderedDict:
        """The module's own parameter scope (a dict), where its methods create parameters."""
        return self.__dict__.setdefault("_parameter_scope", OrderedDict())

    @property
    def submodules(self) -> OrderedDict:
        """The module's submodules, by attribute name."""
        return self.__dict__.setdefault("_submodules", OrderedDict())

    def get_scope_name(self) -> str:
        """The path of the first submodule chain (``@a/@b``)."""
        for name, module in self.submodules.items():
            return f"@{name}/{module.get_scope_name()}".strip("/")
        return ""

    def get_parameters(self, recursive=True, grad_only=False, memo=None) -> OrderedDict:
        """The parameters of the module (and of its submodules, ``@sub/...``, with
        ``recursive``), each once; ``grad_only`` keeps those that need a gradient."""
        memo = ParamMemo() if memo is None else memo
        params = OrderedDict()
        if recursive:
            for name, module in self.submodules.items():
                params.update(insert_parent_name(
                    name, module.get_parameters(recursive=recursive, grad_only=grad_only,
                                                memo=memo)))
        with parameter_scope("", self.parameter_scope):
            found = scope_parameters(grad_only=grad_only)
        params.update(memo.filter_and_update(found))
        return params

    def load_parameters(self, path, extension=".h5", raise_if_missing=True) -> None:
        """Set the module's parameters from a parameter file (path or file object)."""
        scope = OrderedDict()
        with parameter_scope("", scope):
            load_parameter_file(path, extension=extension)
            params = scope_parameters(grad_only=False)
        self.set_parameters(params, raise_if_missing=raise_if_missing)

    def save_parameters(self, path, extension=".h5") -> None:
        """Write the module's parameters to a parameter file (path or file object)."""
        save_parameter_file(path, params=self.get_parameters(grad_only=False),
                            extension=extension)

    def set_parameter(self, key, param, raise_if_missing=False) -> None:
        """Set parameter ``key`` (``@sub/...`` goes to submodule ``sub``); a missing
        submodule is skipped, or an error with ``raise_if_missing``."""
        if key.startswith("@"):
            pos = key.find("/")
            if pos < 0 or pos == len(key) - 1:
                raise DpnbValueError(f"invalid parameter key {key!r}: a module scope '@name' "
                                     "must be followed by '/' and a parameter name")
            name, subkey = key[1:pos], key[pos + 1:]
            if name in self.submodules:
                self.submodules[name].set_parameter(subkey, param,
                                                    raise_if_missing=raise_if_missing)
            elif raise_if_missing:
                raise DpnbValueError(f"{self} has no submodule {name!r} (for parameter {key!r}); "
                                     f"its submodules are {list(self.submodules)}. Pass "
                                     "raise_if_missing=False to skip such parameters")
            return
        with parameter_scope("", self.parameter_scope):
            set_scope_parameter(key, param)

    def set_parameters(self, params, raise_if_missing=False) -> None:
        for key, param in params.items():
            self.set_parameter(key, param, raise_if_missing=raise_if_missing)

    def update_parameter(self) -> None:
        """Hand parameters set in this module's scope under ``@sub/...`` to the submodules."""
        self.set_parameters(self.get_parameters())

    def zero_grad(self) -> None:
        """Set the gradients of the module's parameters to 0."""
        for param in self.get_parameters().values():
            param.grad.zero()

    def __len__(self) -> int:
        return len(self.submodules)

    def __setattr__(self, name, value):
        if isinstance(value, Module):
            self.submodules[name] = value
            value.__dict__["_name"] = name
            value.__dict__["_parent"] = self
            return
        self.__dict__[name] = value
        if name in self._recursive_attrs:
            for module in self.submodules.values():
                setattr(module, name, value)

    def __getattr__(self, name):
        submodules = self.__dict__.get("_submodules", {})
        if name in submodules:
            return submodules[name]
        raise AttributeError(f"{type(self).__name__!r} module has no attribute or submodule "
                             f"{name!r}")

    @property
    def name(self) -> str:
        """The attribute name the parent gave it, else the class name in snake case."""
        return self.__dict__.get("_name") or module_name(type(self))

    @property
    def parent(self):
        return self.__dict__.get("_parent")

    def is_root(self) -> bool:
        return self.parent is None

    def get_path_name(self) -> str:
        """``@root/@sub/...``: where graph_def names this module's functions."""
        if self.is_root():
            return f"@{self.name}"
        parent = self.parent.get_path_name()
        return f"{parent}/@{self.name}" if parent else f"@{self.name}"

    def __call__(self, *args, **kwargs):
        return self.call(*args, **kwargs)

    def call(self, *args, **kwargs):
        """The module's computation, which subclasses implement (on nn.Variables, or on
        nn.ProtoVariables to define a network)."""
        raise NotImplementedError(f"{type(self).__name__} must implement call(*args, **kwargs)")
