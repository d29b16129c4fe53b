"""Regenerate dpnb/formats/nnabla_pb2.py from dpnb/formats/nnabla.proto.

The module it writes holds the schema as a serialized FileDescriptorProto and builds the
message classes at import with dpnb.formats.proto_classes, which works with every
protobuf from 3.20 to 7.x; protoc's own Python output checks the runtime's version and
would tie dpnb to one protobuf major.

Needs grpcio-tools (``pip install grpcio-tools``; any version: only its protoc is used),
for generation only: dpnb at run time needs just the protobuf package. Run from anywhere:
``python scripts/make_proto.py``; ``--check`` compares instead of writing (status 1 where
the shipped module differs from what the .proto gives).
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO = ROOT / "dpnb" / "formats" / "nnabla.proto"
MODULE = ROOT / "dpnb" / "formats" / "nnabla_pb2.py"

HEADER = '''\
# Written by scripts/make_proto.py from dpnb/formats/nnabla.proto. DO NOT EDIT: edit the
# .proto and run the script.
"""The classes of dpnb's protobuf schema (nnabla's file format): ``NNablaProtoBuf``,
``Network``, ``Function``, ``Parameter``, ``Optimizer`` ... built at import from the
serialized schema below, for any protobuf from 3.20 to 7.x (see proto_classes)."""
from .proto_classes import build_module

_SERIALIZED = (
'''


def serialized_schema() -> bytes:
    """Run protoc on nnabla.proto and return its FileDescriptorProto, serialized as
    protoc's Python output embeds it (without JSON names and source locations)."""
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "nnabla.desc"
        # The include root is the repository, so that the schema registers as
        # "dpnb/formats/nnabla.proto" and never clashes with another "nnabla.proto".
        rc = protoc.main(["protoc", f"-I{ROOT}", f"--descriptor_set_out={out}",
                          str(PROTO.relative_to(ROOT))])
        if rc != 0:
            raise SystemExit(f"make_proto: protoc failed with status {rc}")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    (file,) = files
    file.ClearField("source_code_info")
    pending = list(file.message_type)
    while pending:
        message = pending.pop()
        for field in message.field:
            field.ClearField("json_name")
        pending.extend(message.nested_type)
    return file.SerializeToString(deterministic=True)


def module_text(serialized: bytes) -> str:
    """The source of nnabla_pb2.py holding ``serialized``, 64 bytes a line."""
    lines = [f"    {serialized[i:i + 64]!r}\n" for i in range(0, len(serialized), 64)]
    return (HEADER + "".join(lines) + ")\n\n"
            "DESCRIPTOR = build_module(_SERIALIZED, __name__, globals())\n")


def main(argv=None) -> int:
    """Write (or with --check, compare) dpnb/formats/nnabla_pb2.py."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the shipped module instead of writing it")
    args = parser.parse_args(argv)
    try:
        import grpc_tools  # noqa: F401
    except ImportError:
        sys.stderr.write("make_proto: grpcio-tools is not installed; run `pip install grpcio-tools`\n")
        return 1
    text = module_text(serialized_schema())
    if args.check:
        if MODULE.read_text() != text:
            sys.stderr.write(f"make_proto: {MODULE} differs from what {PROTO.name} gives; "
                             f"run scripts/make_proto.py\n")
            return 1
        return 0
    MODULE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
