"""dpnb's protobuf schema of nnabla's file format (nnabla.proto) and its generated module."""
