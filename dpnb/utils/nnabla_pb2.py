"""nnabla's ``nnabla.utils.nnabla_pb2``: the protobuf classes of nnabla's network and
parameter files, which are dpnb's ``dpnb.formats.nnabla_pb2`` (one module under two names)."""
import sys

from ..formats import nnabla_pb2

sys.modules[__name__] = nnabla_pb2
