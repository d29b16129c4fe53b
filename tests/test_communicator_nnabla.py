"""What dpnb adds for nnabla's own communicator tests (python/test/communicator): the
deprecated ``nnabla.contrib.context.extension_context`` they import, synchronized
batch normalization whose gradients agree across layouts to float64 round-off, and
``all_reduce_callback(scale_grad=, keep_dtype=)`` with the cast of narrower floats to
the communicator's type (on 2 MPI ranks, through
tests/mpi_scripts/nnabla_api.py, against NumPy)."""
from __future__ import annotations

import logging
from pathlib import Path

import dpnb
from dpnb.contrib.context import extension_context
from dpnb.ext_utils import get_extension_context
from dpnb.logger import logger
from dpnb.testing import check_ranks

SCRIPTS = Path(__file__).parent / "mpi_scripts"


def test_sync_batch_normalization_agrees_across_layouts():
    check_ranks(2, SCRIPTS / "nnabla_api.py", "layouts")


def test_all_reduce_callback_scales_the_gradients_it_sums():
    check_ranks(2, SCRIPTS / "nnabla_api.py", "scale_grad")


def test_collectives_cast_narrower_floats_to_the_communicator_s_type_unless_keep_dtype():
    check_ranks(2, SCRIPTS / "nnabla_api.py", "dtypes")


class Messages(logging.Handler):
    """Keeps the messages of the records it is given."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_extension_context_is_get_extension_context_with_a_deprecation_warning():
    handler = Messages()
    logger.addHandler(handler)
    try:
        ctx = extension_context("cpu", type_config="half")
    finally:
        logger.removeHandler(handler)
    assert ctx == get_extension_context("cpu", type_config="half")
    assert ctx.backend == ["cpu:half", "cpu:float"]  # as nnabla's extension_context gives
    assert extension_context() == get_extension_context()
    assert handler.messages == ["Deprecated API. Use "
                                "`nnabla.ext_util.get_extension_context(ext_name, **kw)`."]


def test_nnabla_name_resolves_to_it():
    dpnb.use_as_nnabla()
    from nnabla.contrib.context import extension_context as aliased

    assert aliased is extension_context
