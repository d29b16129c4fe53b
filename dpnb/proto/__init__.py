"""nnabla's file formats in dpnb: the protobuf schema (nnabla.proto and its generated
nnabla_pb2), and readers and writers of parameter and solver-state files."""
