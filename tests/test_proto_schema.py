"""dpnb's shipped schema (the serialized descriptor in dpnb/formats/nnabla_pb2.py) says what
dpnb/formats/nnabla.proto says, and the classes built from it by
dpnb.formats.proto_classes behave as protoc's generated ones do (nested classes, maps,
oneofs, text and binary round trips, pickling), whatever protobuf from 3.20 to 7.x runs.

The .proto is read here by a small parser for the part of proto3 the schema uses
(messages, scalar and message fields, repeated, maps, oneofs); it fails on anything else,
so that a schema that outgrows it is noticed. protoc itself is not needed at test time
(scripts/make_proto.py --check compares byte for byte where grpcio-tools is installed)."""
import pathlib
import pickle
import re

import pytest
from google.protobuf import descriptor_pb2, text_format
from google.protobuf.descriptor import FieldDescriptor

from dpnb import DpnbError
from dpnb.formats import nnabla_pb2
from dpnb.formats.proto_classes import build_module, is_repeated

PROTO = pathlib.Path(nnabla_pb2.__file__).with_name("nnabla.proto")

SCALARS = {"double": FieldDescriptor.TYPE_DOUBLE, "float": FieldDescriptor.TYPE_FLOAT,
           "int64": FieldDescriptor.TYPE_INT64, "uint64": FieldDescriptor.TYPE_UINT64,
           "int32": FieldDescriptor.TYPE_INT32, "uint32": FieldDescriptor.TYPE_UINT32,
           "bool": FieldDescriptor.TYPE_BOOL, "string": FieldDescriptor.TYPE_STRING,
           "bytes": FieldDescriptor.TYPE_BYTES}
FIELD = re.compile(r"(repeated\s+)?(map<\s*(\w+)\s*,\s*(\w+)\s*>|\w+)\s+(\w+)\s*=\s*(\d+)\s*;$")


def parse_proto(text: str) -> tuple[str, dict]:
    """(package, {message: [(name, number, repeated, type, map (key, value) or None,
    oneof or None)]}) of a proto3 file; ValueError on a construct it does not know."""
    text = re.sub(r"//[^\n]*", "", text)
    statements = re.findall(r"[^{};]*[{};]", text)
    package, messages, stack = None, {}, []
    for raw in statements:
        s = " ".join(raw.split())
        if not s:
            continue
        if m := re.fullmatch(r'syntax = "proto3";', s):
            continue
        if m := re.fullmatch(r"package (\w+);", s):
            package = m.group(1)
        elif m := re.fullmatch(r"message (\w+) \{", s):
            if stack:
                raise ValueError(f"nested message {m.group(1)}: the test's parser does not know them")
            stack.append(("message", m.group(1)))
            messages[m.group(1)] = []
        elif m := re.fullmatch(r"oneof (\w+) \{", s):
            if len(stack) != 1:
                raise ValueError(f"oneof {m.group(1)} outside a message")
            stack.append(("oneof", m.group(1)))
        elif s == "}":
            stack.pop()
        elif (m := FIELD.fullmatch(s)) and stack:
            repeated, type_, key, value, name, number = m.groups()
            oneof = stack[-1][1] if stack[-1][0] == "oneof" else None
            mapping = (key, value) if key else None
            messages[stack[0][1]].append((name, int(number), bool(repeated), type_, mapping, oneof))
        else:
            raise ValueError(f"the test's .proto parser does not know {s!r}")
    if stack:
        raise ValueError(f"unclosed {stack[-1]}")
    return package, messages


def _type_of(field) -> str:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return field.message_type.full_name
    return next(k for k, v in SCALARS.items() if v == field.type)


def test_the_shipped_descriptor_says_what_the_proto_file_says():
    package, messages = parse_proto(PROTO.read_text())
    file = nnabla_pb2.DESCRIPTOR
    assert file.name == "dpnb/formats/nnabla.proto" and file.package == package == "dpnb"
    assert list(file.message_types_by_name) == list(messages)
    for message_name, fields in messages.items():
        message = file.message_types_by_name[message_name]
        assert [f.name for f in message.fields] == [f[0] for f in fields], message_name
        for name, number, repeated, type_, mapping, oneof in fields:
            field = message.fields_by_name[name]
            where = f"{message_name}.{name}"
            assert field.number == number, where
            assert is_repeated(field) == (repeated or bool(mapping)), where
            assert (field.containing_oneof.name if field.containing_oneof else None) == oneof, where
            if mapping:
                entry = field.message_type
                assert entry.GetOptions().map_entry, where
                key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
                assert _type_of(key) == mapping[0], where
                assert _type_of(value) == (mapping[1] if mapping[1] in SCALARS
                                           else f"{package}.{mapping[1]}"), where
            else:
                assert _type_of(field) == (type_ if type_ in SCALARS else f"{package}.{type_}"), where


def test_the_parser_refuses_what_it_does_not_know():
    with pytest.raises(ValueError, match="does not know"):
        parse_proto('syntax = "proto3";\npackage p;\nmessage A { enum E { X = 0; } }')
    with pytest.raises(ValueError, match="nested message"):
        parse_proto("message A { message B { int64 x = 1; } }")
    package, messages = parse_proto("package p; message A { repeated float x = 3; "
                                    "map<string, A> m = 4; oneof o { A a = 5; } }")
    assert package == "p" and messages == {"A": [("x", 3, True, "float", None, None),
                                                 ("m", 4, False, "map<string, A>", ("string", "A"), None),
                                                 ("a", 5, False, "A", None, "o")]}


def test_classes_are_where_protoc_would_put_them():
    assert nnabla_pb2.Solver.__module__ == "dpnb.formats.nnabla_pb2"
    assert nnabla_pb2.Solver.StatesEntry.__qualname__ == "Solver.StatesEntry"
    assert nnabla_pb2.Solver.StatesEntry.DESCRIPTOR is nnabla_pb2.Solver.DESCRIPTOR.nested_types_by_name["StatesEntry"]
    assert nnabla_pb2.Solver.StatesEntry.DESCRIPTOR.GetOptions().map_entry
    assert nnabla_pb2.Function.DESCRIPTOR.full_name == "dpnb.Function"
    assert len(nnabla_pb2.DESCRIPTOR.message_types_by_name) == 196


def test_messages_round_trip_through_binary_text_and_pickle():
    proto = nnabla_pb2.NNablaProtoBuf(version="0.1")
    net = proto.network.add(name="net", batch_size=4)
    net.variable.add(name="x", type="Buffer").shape.dim.extend([4, 3])
    fn = net.function.add(name="aff", type="Affine", input=["x", "w"], output=["y"])
    fn.affine_param.base_axis = 1
    param = proto.parameter.add(variable_name="w", need_grad=True)
    param.shape.dim.extend([3, 2])
    param.data.extend([0.5, -1.25, 2.0, 0.0, 1.0, 3.5])
    solver = proto.optimizer.add(name="o").solver
    solver.type = "Adam"
    solver.adam_param.alpha = 0.001
    state = solver.states["w"]
    state.t = 7
    state.state_parameter["m"].data.extend([1.0, 2.0])
    assert solver.WhichOneof("parameter") == "adam_param"
    assert fn.WhichOneof("parameter") == "affine_param"

    again = nnabla_pb2.NNablaProtoBuf.FromString(proto.SerializeToString())
    assert again == proto
    assert list(again.parameter[0].data) == [0.5, -1.25, 2.0, 0.0, 1.0, 3.5]
    assert again.optimizer[0].solver.states["w"].state_parameter["m"].data[1] == 2.0
    assert text_format.Parse(text_format.MessageToString(proto), nnabla_pb2.NNablaProtoBuf()) == proto
    assert pickle.loads(pickle.dumps(proto)) == proto
    with pytest.raises(ValueError, match="no_such_field"):  # every implementation says so
        nnabla_pb2.Network(no_such_field=1)
    with pytest.raises(text_format.ParseError):
        text_format.Parse("network { no_such_field: 1 }", nnabla_pb2.NNablaProtoBuf())


def test_build_module_refuses_a_schema_with_enums():
    file = descriptor_pb2.FileDescriptorProto(name="dpnb_test/with_enum.proto",
                                              package="dpnb_test_enum", syntax="proto3")
    message = file.message_type.add(name="M")
    message.enum_type.add(name="E").value.add(name="E_ZERO", number=0)
    namespace = {}
    with pytest.raises(DpnbError, match="enums in dpnb_test_enum.M"):
        build_module(file.SerializeToString(), "dpnb_test_enum_pb2", namespace)
    assert namespace == {}


def test_build_module_builds_a_new_schema():
    file = descriptor_pb2.FileDescriptorProto(name="dpnb_test/plain.proto",
                                              package="dpnb_test_plain", syntax="proto3")
    outer = file.message_type.add(name="Outer")
    outer.field.add(name="inner", number=1, label=FieldDescriptor.LABEL_REPEATED,
                    type=FieldDescriptor.TYPE_MESSAGE, type_name=".dpnb_test_plain.Outer.Inner")
    outer.nested_type.add(name="Inner").field.add(
        name="x", number=1, label=FieldDescriptor.LABEL_OPTIONAL, type=FieldDescriptor.TYPE_DOUBLE)
    namespace = {}
    descriptor = build_module(file.SerializeToString(), "plain_pb2", namespace)
    assert descriptor.name == "dpnb_test/plain.proto" and list(namespace) == ["Outer"]
    message = namespace["Outer"](inner=[namespace["Outer"].Inner(x=1.5)])
    assert namespace["Outer"].FromString(message.SerializeToString()).inner[0].x == 1.5
