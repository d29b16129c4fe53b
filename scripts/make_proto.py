"""Regenerate dpnb/formats/nnabla_pb2.py from dpnb/formats/nnabla.proto.

Needs grpcio-tools (``pip install grpcio-tools``), for generation only: dpnb at run
time needs just the protobuf package. Run from anywhere: ``python scripts/make_proto.py``.
"""
from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "dpnb" / "formats"


def main() -> int:
    """Run protoc on nnabla.proto; the generated module lands beside it."""
    try:
        from grpc_tools import protoc
    except ImportError:
        sys.stderr.write("make_proto: grpcio-tools is not installed; run `pip install grpcio-tools`\n")
        return 1
    # The include root is the repository, so that the schema registers as
    # "dpnb/formats/nnabla.proto" and never clashes with another "nnabla.proto".
    rc = protoc.main(["protoc", f"-I{ROOT}", f"--python_out={ROOT}",
                      str(PROTO_DIR / "nnabla.proto")])
    if rc != 0:
        sys.stderr.write(f"make_proto: protoc failed with status {rc}\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
