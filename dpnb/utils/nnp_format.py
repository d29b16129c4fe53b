"""nnabla's ``nnabla.utils.nnp_format``: the version of the ``.nnp`` format that dpnb
writes into ``nnp_version.txt`` (a zip of that file, a network ``.nntxt`` and the
parameters as ``.h5`` or ``.protobuf``)."""
from __future__ import annotations

from ..formats.parameter_files import NNP_VERSION


def nnp_version() -> str:
    """The ``.nnp`` format version, "0.1" as in nnabla 1.39 (the only one there is)."""
    return NNP_VERSION
