"""The nnabla forms each function class declares beside itself (``nnabla_spec``, or why it
has none in ``no_nnabla_spec``) cover every function and agree with nnabla's network-file
schema (dpnb/formats/nnabla_pb2.py, nnabla 1.39's nnabla.proto), and the registry
(dpnb.formats.function_specs) serves exactly those declarations."""
import importlib
import inspect
import pkgutil

import pytest

import dpnb.functions as F
from dpnb.functions.specs import Call, FunctionSpec
from dpnb.graph import Function
from dpnb.formats import nnabla_pb2
from dpnb.formats import function_specs

MESSAGES = nnabla_pb2.Function.DESCRIPTOR.fields_by_name


def _classes() -> dict[str, type]:
    """Every Function class of dpnb.functions' modules, by module.name."""
    found = {}
    for info in pkgutil.iter_modules(F.__path__):
        module = importlib.import_module(f"dpnb.functions.{info.name}")
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, Function)
                    and value.__module__ == module.__name__):
                found[f"{info.name}.{name}"] = value
    return found


CLASSES = _classes()


def _declared_specs(cls: type) -> tuple[FunctionSpec, ...]:
    declared = vars(cls).get("nnabla_spec", ())
    return declared if isinstance(declared, tuple) else (declared,)


def _is_base(name: str, cls: type) -> bool:
    """A shared base, never made itself: base.py's, or private with subclasses."""
    subclasses = [c for c in CLASSES.values() if c is not cls and issubclass(c, cls)]
    return name.startswith("base.") or (cls.__name__.startswith("_") and bool(subclasses))


def test_every_function_declares_a_spec_or_a_reason():
    assert len(CLASSES) > 180
    for name, cls in CLASSES.items():
        specs, reason = _declared_specs(cls), vars(cls).get("no_nnabla_spec")
        assert not (specs and reason), f"{name} declares a spec and a reason for none"
        if _is_base(name, cls):
            continue
        assert specs or reason, f"{name} declares neither nnabla_spec nor no_nnabla_spec"
        assert reason is None or (isinstance(reason, str) and len(reason) > 20), name
        assert all(isinstance(spec, FunctionSpec) for spec in specs), name


SPECS = [(name, spec) for name, cls in CLASSES.items() for spec in _declared_specs(cls)]


@pytest.mark.parametrize("name, spec", SPECS, ids=[spec.type_name for _, spec in SPECS])
def test_declared_params_are_the_schema_fields(name, spec):
    """A spec's params are its ``*_param`` message's fields, in nnabla's order, and the
    message is the type's own (``<type>Parameter``)."""
    if spec.param_field is None:  # no message, or one without fields
        assert spec.params == ()
        own = [field for field in MESSAGES.values() if field.message_type is not None
               and field.message_type.name == f"{spec.type_name}Parameter"]
        assert all(not _fields(field.name) for field in own)
        return
    assert MESSAGES[spec.param_field].message_type.name == f"{spec.type_name}Parameter"
    assert spec.params == _fields(spec.param_field)


@pytest.mark.parametrize("name, spec", SPECS, ids=[spec.type_name for _, spec in SPECS])
def test_a_called_build_names_a_public_function_and_declared_params(name, spec):
    if not isinstance(spec.build, Call):
        return
    assert callable(getattr(F, spec.build.function, None)), spec.build.function
    assert set(spec.build.fields) | set(spec.build.positional) <= set(spec.params)


def test_the_registry_serves_the_declarations():
    declared = {spec.type_name: cls for cls in CLASSES.values() for spec in _declared_specs(cls)}
    assert function_specs.exported_types() == list(declared)
    for type_name, cls in declared.items():
        spec = function_specs.spec_of_type(type_name)
        assert spec.cls is cls and spec.type_name == type_name
    reasons = {cls: vars(cls)["no_nnabla_spec"] for cls in CLASSES.values()
               if "no_nnabla_spec" in vars(cls)}
    assert function_specs.NOT_WRITABLE == reasons


def test_one_class_of_several_types_is_told_apart_by_the_type_it_keeps():
    """arange, linspace and constant make one class (array.Generated); each is written
    as the type it was made as."""
    made = {"Arange": F.arange(0, 3), "Linspace": F.linspace(0, 1, 3),
            "Constant": F.constant(1.0, (2,))}
    for type_name, y in made.items():
        assert function_specs.spec_of_function(y.parent).type_name == type_name
    assert function_specs.spec_of_class(type(made["Arange"].parent)).type_name == "Arange"


def test_a_subclass_does_not_take_its_base_spec():
    """SyncBatchNormalization declares its own; a class declaring none gets none from
    its base (Standardization's subclasses each declare theirs)."""
    sync = CLASSES["normalization.SyncBatchNormalization"]
    assert function_specs.spec_of_class(sync).type_name == "SyncBatchNormalization"
    assert function_specs.spec_of_class(CLASSES["normalization.Standardization"]) is None


def _fields(param_field: str) -> tuple[str, ...]:
    return tuple(f.name for f in MESSAGES[param_field].message_type.fields)
