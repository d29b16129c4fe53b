"""nnabla's file formats in dpnb, in one place: the protobuf schema (nnabla.proto and its
generated nnabla_pb2), the guards every read of a possibly hostile file goes through, the
codecs of parameter and solver-state files, and atomic writes with clear file errors."""
