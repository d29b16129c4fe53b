"""nnabla's ``nnabla.function_bases``: the module nnabla generates its functions in, which
``nnabla.functions`` re-exports.  dpnb's functions are written once, in ``dpnb.functions``;
this module gives them under the name nnabla's programs and tests also call them by,
with the raw forms where nnabla's ``functions`` wraps one (``patch_correlation``)."""
from .functions import *  # noqa: F401,F403 (the module's content is that namespace)
from .functions import nn as _nn
from .functions.base import default_outputs


def patch_correlation(x1, x2, patch=(1, 1), shift=(0, 0), patch_step=(1, 1), shift_step=(1, 1),
                      padding=(0, 0, 0, 0), n_outputs=-1, outputs=None):
    """nnabla's raw PatchCorrelation: channel-last inputs (N, H, W, C) only, as nnabla's
    function is; ``F.patch_correlation`` also takes channel-first ones."""
    default_outputs("function_bases.patch_correlation", n_outputs, outputs)
    return _nn.patch_correlation(x1, x2, patch, shift, patch_step, shift_step, padding,
                                 channel_last=True)
