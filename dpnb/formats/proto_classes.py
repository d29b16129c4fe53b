"""Message classes of a protobuf schema from its serialized FileDescriptorProto, with
only what every protobuf release from 3.20 to 7.x offers.

protoc's generated ``_pb2`` modules check the runtime's version against the protoc that
made them (since protobuf 5) and refuse others, which would tie dpnb to one protobuf
major while the programs around it (nnabla 1.39 needs 3.20, TensorFlow, ONNX and gRPC
hold 4 to 6) need others. dpnb ships the schema as bytes instead
(``dpnb/formats/nnabla_pb2.py``, written by ``scripts/make_proto.py``) and builds the
classes here: the file is added to the default descriptor pool, and each message class
comes from ``message_factory.GetMessageClass`` (protobuf >= 4.22) or
``MessageFactory().GetPrototype`` (the only way before 4.22; removed in 6.30).
"""
from __future__ import annotations

from google.protobuf import descriptor_pool, message_factory

from ..errors import DpnbError

_get_message_class = getattr(message_factory, "GetMessageClass", None)
if _get_message_class is None:  # protobuf 3.20 .. 4.21
    _get_message_class = message_factory.MessageFactory().GetPrototype


def build_module(serialized: bytes, module_name: str, namespace: dict):
    """Add the serialized FileDescriptorProto to the default pool and put a class for each
    of its top-level messages into ``namespace`` (a module's ``globals()``), nested
    messages as attributes of their outer class, as protoc's modules do; return the
    FileDescriptor.

    Enums, extensions and services are not built: dpnb's schema has none, and a schema
    that grows one must be met with code here rather than with a missing name."""
    file = descriptor_pool.Default().AddSerializedFile(serialized)
    unsupported = [kind for kind, names in (("enums", file.enum_types_by_name),
                                            ("extensions", file.extensions_by_name),
                                            ("services", file.services_by_name)) if names]
    unsupported += [f"enums in {d.full_name}" for d in _all_messages(file) if d.enum_types]
    if unsupported:
        raise DpnbError(f"{file.name} declares {', '.join(unsupported)}, which "
                        f"dpnb.formats.proto_classes does not build; extend build_module "
                        f"before adding them to the schema")
    for name, descriptor in file.message_types_by_name.items():
        namespace[name] = _message_class(descriptor, module_name, "")
    return file


def _message_class(descriptor, module_name: str, outer: str):
    cls = _get_message_class(descriptor)
    cls.__module__ = module_name  # pickle and repr find the class where the module is
    cls.__qualname__ = outer + descriptor.name
    for name, nested in descriptor.nested_types_by_name.items():
        setattr(cls, name, _message_class(nested, module_name, cls.__qualname__ + "."))
    return cls


def _all_messages(file):
    pending = list(file.message_types_by_name.values())
    while pending:
        descriptor = pending.pop()
        yield descriptor
        pending.extend(descriptor.nested_types)



def is_repeated(field) -> bool:
    """Whether a FieldDescriptor is repeated (maps included): ``is_repeated`` where the
    protobuf has it (it replaced ``label``, which 7.x no longer has), else ``label``."""
    if hasattr(field, "is_repeated"):
        return field.is_repeated
    return field.label == field.LABEL_REPEATED
