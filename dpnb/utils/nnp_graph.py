"""nnabla's ``nnabla.utils.nnp_graph``: read a network file written by nnabla (or by
``dpnb.utils.save``) and build its graph in dpnb, with its parameters, to run it; the
work is dpnb.formats.network_reader's."""
from ..formats.network_reader import NnpLoader, NnpNetwork, NnpNetworkPass

__all__ = ["NnpLoader", "NnpNetwork", "NnpNetworkPass"]
