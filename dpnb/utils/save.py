"""nnabla's ``nnabla.utils.save``: write networks (and their parameters) as nnabla's
network files, so that nnabla, its tools and dpnb's ``NnpLoader`` can run them; the
formats are dpnb.formats' (contents_writer, network_files)."""
from __future__ import annotations

import logging

from ..errors import DpnbError
from ..formats.contents_writer import create_proto
from ..formats.network_files import network_extension, write_network
from ..parameter import get_parameters

__all__ = ["create_proto", "get_parameters", "save"]

logger = logging.getLogger(__name__)


def save(filename, contents: dict, include_params: bool = False,
         variable_batch_size: bool = True, extension: str = ".nnp",
         parameters: dict | None = None, parameter_format: str = ".h5",
         include_solver_state: bool = False, solver_state_format: str = ".h5") -> None:
    """Write the networks of ``contents`` (and its configs, datasets, optimizers, monitors
    and executors, as nnabla's training tools read them) in nnabla's format, chosen by the
    file's extension (or ``extension`` for a file object): ``.nnp`` (with the parameters,
    as ``parameter_format``), ``.nntxt``/``.prototxt`` (text) or ``.protobuf`` (binary);
    ``include_params`` puts the parameters into the latter two.  With
    ``variable_batch_size`` the batch axis is written as -1, to be set when loading."""
    ext = network_extension(filename, extension)
    if include_solver_state:
        raise DpnbError("include_solver_state=True: dpnb's save does not write solver states "
                        "into network files; save them beside it with solver.save_states(path)")
    if parameter_format not in (".h5", ".protobuf"):
        raise DpnbError(f"parameter_format must be '.h5' or '.protobuf', got "
                        f"{parameter_format!r}")
    params = get_parameters(grad_only=False) if parameters is None else parameters
    proto = create_proto(contents, include_params and ext != ".nnp", variable_batch_size,
                         params)
    write_network(filename, ext, proto, params, parameter_format)
    logger.info("Model file is saved as (%s): %s", ext, filename)
