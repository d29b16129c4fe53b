"""Tensor factorizations for low-rank layers, under nnabla's module name
(``nnabla.utils.factorization``): ``cpd.ALS``, the CP decomposition PF.cpd3_convolution
starts from."""
