"""nnabla's ``nnabla.utils.converter``, as far as dpnb goes: the table of the functions
that dpnb writes to and reads from nnabla's network files.  Converting networks to other
formats (ONNX, TensorFlow, NNB), the rest of nnabla's module, is not part of dpnb."""
from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor

from ..formats import nnabla_pb2
from ..formats.function_specs import exported_types, spec_of_type
from ..formats.proto_classes import is_repeated

_SCALARS = {FieldDescriptor.TYPE_INT64: "int64", FieldDescriptor.TYPE_FLOAT: "float",
            FieldDescriptor.TYPE_DOUBLE: "double", FieldDescriptor.TYPE_BOOL: "bool",
            FieldDescriptor.TYPE_STRING: "string"}


def _type_of(field: FieldDescriptor) -> str:
    """nnabla's name of an argument's type: ``int64``, ``repeated float``, ``Shape`` ..."""
    name = field.message_type.name if field.message_type is not None else _SCALARS[field.type]
    return f"repeated {name}" if is_repeated(field) else name


def get_function_info() -> dict[str, dict]:
    """nnabla's type name -> ``{"arguments": {name: {"type": ...}}}``, the arguments as
    the network files' schema orders them, for every function dpnb writes and reads."""
    fields = nnabla_pb2.Function.DESCRIPTOR.fields_by_name
    info = {}
    for type_name in exported_types():
        param_field = spec_of_type(type_name).param_field
        arguments = {} if param_field is None else {
            field.name: {"type": _type_of(field)}
            for field in fields[param_field].message_type.fields}
        info[type_name] = {"arguments": arguments}
    return info


def get_category_info() -> dict[str, dict[str, dict]]:
    """The same table under one category (nnabla groups its functions by kind; dpnb's
    files do not need the grouping, so every function is in "Functions")."""
    return {"Functions": get_function_info()}
