"""Model-compression cases (see functions.py): incremental network quantization (F.inq_affine,
F.inq_convolution and their layers), the quantized and pruned layers, and the low-rank
layers.

The quantized weights' gradients are straight-through estimates, and INQ rewrites its
weight in place at every forward, so their cases skip the finite-difference check
(fd=False); an INQ case whose weight takes no gradient checks x's and the bias's, which
are true derivatives.  The results hold the weights, indicators, W_q and b_q that forward
writes.  The low-rank layers keep the factors they computed from a seeded initial weight
(params returning None), so that their results check nnabla's factorizations too; their
gradients are derivatives (fd=True)."""
import numpy as np

from .functions import Case, default_params

R = np.random.RandomState(21)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


def indicator(*shape):
    """A float indicator: about a third of the weights fixed already."""
    return (R.uniform(size=shape) < 0.33).astype(np.float32)


def params(name, shape, rng):
    """Layer parameters: ranges [-2, 2] and levels 0..255 for min-max quantization, all
    weights learnable for INQ, the rest as functions.py's default."""
    leaf = name.rsplit("/", 1)[-1]
    fixed = {"qr_min": -2.0, "qr_max": 2.0, "ql_min": 0.0, "ql_max": 255.0, "I": 0.0}
    if leaf in fixed:
        return np.full(shape, fixed[leaf])
    return default_params(name, shape, rng)


def kept(name, shape, rng):
    """Keep the parameters the layer made."""
    return None


INQ_GRADS = (True, True, False, True)  # the indicator takes none
X_AND_BIAS = (True, False, False, True)

CASES = [
    Case("inq_affine largest_abs fixes half at forward 0",
         lambda lib, x, w, i, b: lib.F.inq_affine(x, w, i, b, num_bits=3, inq_iterations=(0, 4)),
         (u(2, 3, 4), u(12, 5, low=-2, high=2), indicator(12, 5), u(5)), fd=False,
         need_grad=INQ_GRADS),
    Case("inq_affine all fixed at the last iteration, base_axis 2, no bias",
         lambda lib, x, w, i: lib.F.inq_affine(x, w, i, base_axis=2, num_bits=4,
                                               inq_iterations=(0,)),
         (u(2, 3, 4), u(4, 3), indicator(4, 3)), fd=False, need_grad=(True, True, False)),
    Case("inq_affine random seed 412",
         lambda lib, x, w, i, b: lib.F.inq_affine(x, w, i, b, 1, 2, (0, 3), "random", 412),
         (u(2, 6), u(6, 7), indicator(6, 7), u(7)), fd=False, need_grad=INQ_GRADS),
    Case("inq_affine fixed weights given, x and bias gradients",
         lambda lib, x, w, i, b: lib.F.inq_affine(x, w, i, b, num_bits=5),
         (u(3, 4), u(4, 3), indicator(4, 3), u(3)), need_grad=X_AND_BIAS),
    Case("inq_convolution largest_abs pad stride group 2",
         lambda lib, x, w, i, b: lib.F.inq_convolution(x, w, i, b, pad=(1, 0), stride=(1, 2),
                                                      group=2, num_bits=3,
                                                      inq_iterations=(0, 2)),
         (u(2, 4, 5, 5), u(4, 2, 3, 2), indicator(4, 2, 3, 2), u(4)), fd=False,
         need_grad=INQ_GRADS),
    Case("inq_convolution random seed 7 dilation",
         lambda lib, x, w, i: lib.F.inq_convolution(x, w, i, dilation=(2, 1), num_bits=4,
                                                    inq_iterations=(0, 1),
                                                    selection_algorithm="random", seed=7),
         (u(1, 2, 6, 5), u(3, 2, 2, 2), indicator(3, 2, 2, 2)), fd=False,
         need_grad=(True, True, False)),
    Case("inq_convolution fixed weights given, x and bias gradients",
         lambda lib, x, w, i, b: lib.F.inq_convolution(x, w, i, b, pad=(1, 1)),
         (u(1, 2, 4, 4), u(2, 2, 3, 3), indicator(2, 2, 3, 3), u(2)), need_grad=X_AND_BIAS),
    Case("PF.inq_affine random seed 3",
         lambda lib, x: lib.PF.inq_affine(x, 4, num_bits=3, inq_iterations=(0, 2), seed=3),
         (u(2, 5),), fd=False, params=params),
    Case("PF.inq_convolution largest_abs named",
         lambda lib, x: lib.PF.inq_convolution(x, 3, (2, 2), pad=(1, 1), inq_iterations=(0,),
                                               selection_algorithm="largest_abs", name="q"),
         (u(2, 2, 4, 4),), fd=False, params=params),
    Case("PF.fixed_point_quantized_affine",
         lambda lib, x: lib.PF.fixed_point_quantized_affine(x, 4, n_w=4, delta_w=0.25),
         (u(2, 5),), fd=False, params=params),
    Case("PF.fixed_point_quantized_affine unquantized bias, outputs (2, 2)",
         lambda lib, x: lib.PF.fixed_point_quantized_affine(x, (2, 2), quantize_b=False,
                                                            sign_w=False, n_w=3, delta_w=0.3),
         (u(2, 2, 3),), fd=False, params=params),
    Case("PF.fixed_point_quantized_convolution",
         lambda lib, x: lib.PF.fixed_point_quantized_convolution(x, 4, (3, 3), pad=(1, 1),
                                                                 group=2),
         (u(2, 4, 5, 5),), fd=False, params=params),
    Case("PF.pow2_quantized_affine",
         lambda lib, x: lib.PF.pow2_quantized_affine(x, 3, with_zero_w=True, n_w=4, m_w=0),
         (u(2, 4),), fd=False, params=params),
    Case("PF.pow2_quantized_convolution no bias",
         lambda lib, x: lib.PF.pow2_quantized_convolution(x, 2, (2, 3), stride=(2, 1),
                                                          with_bias=False),
         (u(1, 3, 5, 5),), fd=False, params=params),
    Case("PF.pruned_affine",
         lambda lib, x: lib.PF.pruned_affine(x, 6, rate_w=0.5, rate_b=0.3),
         (u(3, 4),), fd=False, params=params),
    Case("PF.pruned_convolution unpruned bias",
         lambda lib, x: lib.PF.pruned_convolution(x, 4, (3, 3), pad=(1, 1), prune_b=False),
         (u(2, 3, 5, 5),), fd=False, params=params),
    Case("PF.min_max_quantized_affine",
         lambda lib, x: lib.PF.min_max_quantized_affine(x, 3, ql_max_w=15, ql_max_b=127),
         (u(2, 4),), fd=False, params=params),
    Case("PF.min_max_quantized_convolution w_min_max fixed",
         lambda lib, x: lib.PF.min_max_quantized_convolution(x, 2, (3, 3), w_min_max=True,
                                                             fix_parameters=True, name="m"),
         (u(1, 2, 5, 5),), fd=False, params=params),
    Case("PF.svd_affine seeded",
         lambda lib, x: lib.PF.svd_affine(x, 4, 2, rng=np.random.RandomState(3)),
         (u(2, 6),), params=kept),
    Case("PF.svd_affine uv_init array outputs (2, 3) base_axis 2",
         lambda lib, x: lib.PF.svd_affine(x, (2, 3), 3, base_axis=2,
                                          uv_init=np.random.RandomState(8).randn(4, 2, 3)),
         (u(2, 2, 4),), params=kept),
    Case("PF.svd_convolution seeded",
         lambda lib, x: lib.PF.svd_convolution(x, 4, (3, 3), 2, pad=(1, 1), stride=(2, 1),
                                               rng=np.random.RandomState(4)),
         (u(2, 3, 5, 5),), params=kept),
    Case("PF.cpd3_convolution seeded",
         lambda lib, x: lib.PF.cpd3_convolution(x, 4, (3, 3), 2, pad=(1, 1),
                                                rng=np.random.RandomState(5)),
         (u(2, 3, 5, 5),), params=kept, rtol=1e-3, atol=1e-5),
]
