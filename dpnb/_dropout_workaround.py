"""nnabla's private ``nnabla._dropout_workaround``, which nnabla's dropout tests import:
``_get_dropout_mask(x)``, the mask of the dropout applied to ``x``."""
from .functions.stochastic import dropout_mask as _get_dropout_mask

__all__ = ["_get_dropout_mask"]
