"""nnabla's deprecated ``extension_context``, kept because old programs (and nnabla's
own communicator tests) import it: ``ext_utils.get_extension_context`` under its
old name, with nnabla's deprecation warning."""
from __future__ import annotations

from ..context import Context
from ..ext_utils import get_extension_context
from ..logger import logger


def extension_context(extension_name: str = "cpu", **kw) -> Context:
    """The context of extension ``extension_name`` ("cpu", "cuda", "cudnn", ...); ``kw``
    go to the extension's ``context()``.  Deprecated, as in nnabla: use
    ``nnabla.ext_utils.get_extension_context(ext_name, **kw)``."""
    logger.warning("Deprecated API. Use `nnabla.ext_util.get_extension_context(ext_name, **kw)`.")
    return get_extension_context(extension_name, **kw)
