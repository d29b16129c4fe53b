"""Every file format of dpnb in one place.  Needing only the core: nnabla's protobuf
schema (nnabla.proto, nnabla_pb2), checked reads of possibly hostile files, the codecs
of parameter and solver-state files, atomic writes with clear file errors (files), and
network files as containers (network_files, messages).  Built on the functions: the
functions' file spec (function_specs, function_messages), and the writers and readers of
networks and training contents that ``dpnb.utils.save``, ``nnp_graph`` and ``load`` give
under nnabla's names."""
