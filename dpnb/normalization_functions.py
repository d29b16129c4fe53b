"""nnabla's ``nnabla.normalization_functions``: the normalization functions, which nnabla
defines in this module and ``nnabla.functions`` re-exports (dpnb's live in
``dpnb.functions.normalization``; this module gives them under nnabla's path)."""
from .functions.normalization import (BatchNormalizationInOutAdapter, batch_normalization,
                                      fused_batch_normalization, group_normalization,
                                      instance_normalization, layer_normalization,
                                      sync_batch_normalization, tensor_normalization,
                                      weight_standardization)

__all__ = ["BatchNormalizationInOutAdapter", "batch_normalization", "fused_batch_normalization",
           "group_normalization", "instance_normalization", "layer_normalization",
           "sync_batch_normalization", "tensor_normalization", "weight_standardization"]
