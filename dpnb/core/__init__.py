"""nnabla's ``nnabla.core``: modules (``nn.Module``, ``nn.Sequential``) and network
definitions (``nn.graph_def``, ``nn.ProtoVariable``)."""
from . import graph_def

__all__ = ["graph_def"]
