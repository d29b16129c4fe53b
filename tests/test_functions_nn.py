import itertools

import numpy as np
import pytest
from gradcheck import check_grad

import dpnb as nn
import dpnb.functions as F
from dpnb.context import to_module
from dpnb.errors import DpnbError
from dpnb.ext_utils import get_extension_context


def reference_convolution(x, w, b=None, pad=(0, 0), stride=(1, 1), dilation=(1, 1), group=1):
    """Plain loops over NCHW: y[n, o, i, j] = sum over the window of x * w[o] (+ b[o])."""
    n_batch, channels, height, width = x.shape
    out_channels, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    ho = (height + 2 * pad[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (width + 2 * pad[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    y = np.zeros((n_batch, out_channels, ho, wo))
    per_group = out_channels // group
    for n in range(n_batch):
        for o in range(out_channels):
            g = o // per_group
            for i in range(ho):
                for j in range(wo):
                    top, left = i * stride[0], j * stride[1]
                    patch = xp[n, g * cg:(g + 1) * cg,
                               top:top + dilation[0] * (kh - 1) + 1:dilation[0],
                               left:left + dilation[1] * (kw - 1) + 1:dilation[1]]
                    y[n, o, i, j] = np.sum(patch * w[o]) + (0 if b is None else b[o])
    return y


# -- affine ------------------------------------------------------------------

@pytest.mark.parametrize("x_shape, w_shape, base_axis", [
    ((3, 4), (4, 5), 1),
    ((2, 3, 2, 2), (12, 5), 1),
    ((2, 3, 4), (4, 2, 3), 2),
    ((2, 3, 4), (4, 5), -1),
])
def test_affine_values_and_gradients(rng, x_shape, w_shape, base_axis):
    x, w = rng.randn(*x_shape), rng.randn(*w_shape)
    b = rng.randn(*w_shape[1:])
    y = check_grad(lambda x, w, b: F.affine(x, w, b, base_axis=base_axis), [x, w, b])
    axis = base_axis % len(x_shape)
    rows = int(np.prod(x_shape[:axis]))
    expected = (x.reshape(rows, -1) @ w.reshape(w_shape[0], -1) + b.reshape(-1))
    assert y.shape == x_shape[:axis] + w_shape[1:]
    np.testing.assert_allclose(y.d, expected.reshape(y.shape), rtol=1e-12)


def test_affine_without_bias_keeps_float32(rng):
    x = nn.Variable.from_numpy_array(rng.randn(4, 3).astype(np.float32))
    w = nn.Variable.from_numpy_array(rng.randn(3, 2).astype(np.float32))
    y = F.affine(x, w)
    y.forward()
    assert y.dtype == np.float32 and y.d.dtype == np.float32
    np.testing.assert_allclose(y.d, x.d @ w.d, rtol=1e-6)
    check_grad(F.affine, [rng.randn(4, 3), rng.randn(3, 2)])


def test_affine_errors(rng):
    x = nn.Variable((4, 3))
    with pytest.raises(DpnbError, match=r"weight must have shape \(3, \*out\)"):
        F.affine(x, nn.Variable((4, 2)))
    with pytest.raises(DpnbError, match=r"bias must have shape \(2,\)"):
        F.affine(x, nn.Variable((3, 2)), nn.Variable((3,)))
    with pytest.raises(DpnbError, match="base_axis must lie in"):
        F.affine(x, nn.Variable((3, 2)), base_axis=2)


# -- convolution -------------------------------------------------------------

CONV_CASES = [
    dict(),
    dict(pad=(1, 2)),
    dict(stride=(2, 1)),
    dict(dilation=(2, 1), pad=(1, 1)),
    dict(group=2),
    dict(pad=(1, 1), stride=(2, 2), dilation=(1, 2), group=2),
]


@pytest.mark.parametrize("options", CONV_CASES)
def test_convolution_matches_loops(rng, options):
    group = options.get("group", 1)
    x = rng.randn(2, 4, 7, 6).astype(np.float32)
    w = rng.randn(6, 4 // group, 3, 2).astype(np.float32)
    b = rng.randn(6).astype(np.float32)
    xv, wv, bv = (nn.Variable.from_numpy_array(a) for a in (x, w, b))
    y = F.convolution(xv, wv, bv, **options)
    y.forward()
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.d, reference_convolution(x, w, b, **options), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", CONV_CASES)
def test_convolution_gradients(rng, options):
    group = options.get("group", 1)
    x, w, b = rng.randn(2, 4, 5, 4), rng.randn(4, 4 // group, 3, 2), rng.randn(4)
    check_grad(lambda x, w, b: F.convolution(x, w, b, **options), [x, w, b])


def test_convolution_pointwise_path(rng):
    x, w, b = rng.randn(2, 4, 3, 3), rng.randn(6, 2, 1, 1), rng.randn(6)
    y = check_grad(lambda x, w, b: F.convolution(x, w, b, group=2), [x, w, b])
    np.testing.assert_allclose(y.d, reference_convolution(x, w, b, group=2), rtol=1e-12)
    y = check_grad(lambda x, w: F.convolution(x, w, stride=(2, 2)), [x, w[:, :1].repeat(4, 1)])
    assert y.shape == (2, 6, 2, 2)


@pytest.mark.parametrize("base_axis, x_shape",
                         [(2, (2, 3, 2, 5, 5)), (0, (2, 5, 5)), (-3, (2, 2, 5, 5))])
def test_convolution_base_axis(rng, base_axis, x_shape):
    x, w, b = rng.randn(*x_shape), rng.randn(3, 2, 3, 3), rng.randn(3)
    y = check_grad(lambda x, w, b: F.convolution(x, w, b, base_axis=base_axis, pad=(1, 1)),
                   [x, w, b])
    flat = x.reshape((-1,) + x_shape[-3:])
    expected = reference_convolution(flat, w, b, pad=(1, 1))
    assert y.shape == x_shape[:-3] + (3, 5, 5)
    np.testing.assert_allclose(y.d, expected.reshape(y.shape), rtol=1e-12)


def test_convolution_input_gradient_only(rng):
    x, w = rng.randn(2, 2, 4, 4), rng.randn(3, 2, 3, 3)
    check_grad(lambda x, w: F.convolution(x, w, pad=(1, 1)), [x, w], need_grad=[True, False])
    check_grad(lambda x, w: F.convolution(x, w, pad=(1, 1)), [x, w], need_grad=[False, True])


def test_convolution_errors():
    x = nn.Variable((2, 4, 5, 5))
    w = nn.Variable((6, 4, 3, 3))
    with pytest.raises(DpnbError, match="at least one spatial axis after the sample axes"):
        F.convolution(nn.Variable((2, 4)), nn.Variable((6, 4)))
    with pytest.raises(DpnbError, match="input-channel axis must be 4/1"):
        F.convolution(x, nn.Variable((6, 3, 3, 3)))
    with pytest.raises(DpnbError, match="with group=3"):
        F.convolution(x, nn.Variable((6, 1, 3, 3)), group=3)
    with pytest.raises(DpnbError, match="the kernel spans 7 pixels"):
        F.convolution(x, nn.Variable((6, 4, 3, 3)), dilation=(3, 1))
    with pytest.raises(DpnbError, match=r"bias must have shape \(6,\)"):
        F.convolution(x, w, nn.Variable((4,)))
    with pytest.raises(DpnbError, match=r"stride must be 2 int\(s\) >= 1"):
        F.convolution(x, w, stride=(0, 1))
    with pytest.raises(DpnbError, match=r"pad must be 2 int\(s\) >= 0"):
        F.convolution(x, w, pad=(1,))
    with pytest.raises(DpnbError, match=r"weight must have shape \(OC, C/group, \*kernel\) for 2"):
        F.convolution(x, nn.Variable((6, 4, 3)))
    with pytest.raises(DpnbError, match=r"weight must have shape \(OC, \*kernel, C/group\)"):
        F.convolution(nn.Variable((2, 5, 5, 4)), nn.Variable((6, 4, 3, 3, 3)), channel_last=True)
    with pytest.raises(DpnbError, match="input-channel axis must be 4/1"):
        F.convolution(nn.Variable((2, 5, 5, 4)), w, channel_last=True)


STRIDE_1_CASES = [
    dict(pad=(1, 1)),
    dict(pad=(0, 2)),
    dict(pad=(3, 1)),  # pad beyond the kernel's reach along the height
    dict(dilation=(2, 3), pad=(2, 1)),
    dict(group=2, pad=(1, 0)),
    dict(group=2, dilation=(1, 2), pad=(4, 2)),
]


@pytest.mark.parametrize("options", STRIDE_1_CASES)
def test_convolution_stride_1_gradients_match_col2im(rng, options):
    """Stride 1 takes both gradients from the columns of the output gradient instead of
    col2im (the path of the other strides): check by finite differences and against col2im."""
    group = options.get("group", 1)
    x, w = rng.randn(2, 4, 5, 6), rng.randn(6, 4 // group, 3, 2)
    check_grad(lambda x, w: F.convolution(x, w, **options), [x, w])
    y = F.convolution(*(nn.Variable.from_numpy_array(a, need_grad=True) for a in (x, w)),
                      **options)
    fn = y.parent
    gy = rng.randn(*y.shape)
    gx, gw = fn.backward_arrays(np, [x, w], None, [gy], [True, True])
    geo = fn.geometry
    grouped = gy.reshape(2, group, 6 // group, -1)
    col2im = geo.add_columns_to_image(np, np.matmul(geo.weight_matrix(w).swapaxes(-1, -2),
                                                    grouped))
    np.testing.assert_allclose(gx, col2im, rtol=1e-12, atol=1e-12)
    x_columns = np.concatenate([columns.copy() for _, columns in geo.column_blocks(np, x)])
    # (over wide rows where the padding allows: gy widened)
    widened = geo.x_patches.widen(np, gy).reshape(2, group, 6 // group, -1)
    np.testing.assert_allclose(gw, np.matmul(widened, x_columns.swapaxes(-1, -2)).sum(axis=0)
                               .reshape(w.shape), rtol=1e-12, atol=1e-12)


def reference_convolution_nd(x, w, pad, stride, dilation):
    """Any number of spatial axes, group 1: the sum over kernel offsets of each offset's
    strided window of the padded input times that offset's weight."""
    x = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    out = [(n - d * (k - 1) - 1) // s + 1
           for n, k, s, d in zip(x.shape[2:], w.shape[2:], stride, dilation)]
    y = 0
    for offset in itertools.product(*(range(k) for k in w.shape[2:])):
        window = tuple(slice(o * d, o * d + s * (n - 1) + 1, s)
                       for o, d, s, n in zip(offset, dilation, stride, out))
        y = y + np.einsum("bc...,oc->bo...", x[(Ellipsis,) + window], w[(Ellipsis,) + offset])
    return y


# Strided, with more channels than output columns: these take channel-minor columns.
CHANNEL_MINOR_CASES = [
    ((2, 6, 9), (5, 6, 4), dict(pad=(1,), stride=(2,))),
    ((2, 6, 8, 8), (3, 6, 4, 4), dict(pad=(1, 1), stride=(2, 2))),
    ((2, 5, 7, 6), (4, 5, 3, 2), dict(pad=(2, 1), stride=(3, 2), dilation=(2, 1))),
    ((1, 4, 5, 4, 4), (2, 4, 2, 3, 2), dict(pad=(0, 1, 1), stride=(1, 2, 2))),
]


@pytest.mark.parametrize("x_shape, w_shape, options", CHANNEL_MINOR_CASES)
def test_strided_convolution_over_many_channels(rng, x_shape, w_shape, options):
    """Values against the reference and both gradients by finite differences, forward and
    as deconvolution (its forward is the convolution's input gradient)."""
    x, w = rng.randn(*x_shape), rng.randn(*w_shape)
    n = len(x_shape) - 2
    options = {"dilation": (1,) * n, **options}
    y = F.convolution(nn.Variable.from_numpy_array(x), nn.Variable.from_numpy_array(w),
                      **options)
    assert y.parent.geometry.minor_patches is not None
    y.forward()
    np.testing.assert_allclose(y.d, reference_convolution_nd(x, w, **options), rtol=1e-10)
    check_grad(lambda x, w: F.convolution(x, w, **options), [x, w])
    check_grad(lambda z, w: F.deconvolution(z, w, **options), [rng.randn(*y.shape), w])


# Stride 1 with padding, rows at most a quarter longer padded, columns of at least 4x the
# channels of their products: columns over wide rows.
WIDE_ROW_CASES = [
    ((2, 4, 5, 9), (4, 2, 3, 3), dict(pad=(1, 1), group=2)),
    ((1, 2, 4, 16), (3, 2, 2, 3), dict(pad=(1, 2), dilation=(1, 2))),
    ((1, 1, 2, 20, 20), (2, 1, 2, 3, 3), dict(pad=(0, 1, 1))),
]


@pytest.mark.parametrize("x_shape, w_shape, options", WIDE_ROW_CASES)
def test_stride_1_convolution_over_wide_rows(rng, x_shape, w_shape, options):
    """Values against the reference, and both gradients and the bias's by finite differences,
    forward and as deconvolution (whose forward takes the output gradient's wide rows)."""
    x, w, b = rng.randn(*x_shape), rng.randn(*w_shape), rng.randn(w_shape[0])
    n = len(x_shape) - 2
    y = F.convolution(*(nn.Variable.from_numpy_array(a) for a in (x, w, b)), **options)
    geometry = y.parent.geometry
    assert geometry.x_patches.wide and geometry.gy_patches.wide
    y.forward()
    group, dilation = options.get("group", 1), options.get("dilation", (1,) * n)
    reference = np.concatenate([reference_convolution_nd(xs, ws, options["pad"], (1,) * n,
                                                         dilation)
                                for xs, ws in zip(np.split(x, group, axis=1),
                                                  np.split(w, group, axis=0))], axis=1)
    np.testing.assert_allclose(y.d, reference + b.reshape((-1,) + (1,) * n), rtol=1e-10)
    check_grad(lambda x, w, b: F.convolution(x, w, b, **options), [x, w, b])
    check_grad(lambda z, w: F.deconvolution(z, w, **options), [rng.randn(*y.shape), w])


BLOCK_CASES = [
    ((3, 4, 6, 7), (5, 4, 3, 3), dict(pad=(1, 1))),   # stride 1 over wide rows
    ((3, 4, 6, 7), (6, 2, 3, 2), dict(pad=(0, 1), group=2, dilation=(2, 1))),
    ((3, 2, 7, 7), (4, 2, 3, 3), dict(pad=(1, 1), stride=(2, 2))),   # col2im
]


@pytest.mark.parametrize("x_shape, w_shape, options", BLOCK_CASES)
def test_convolution_a_sample_at_a_time(rng, monkeypatch, x_shape, w_shape, options):
    """With blocks of columns one sample long (as a large image makes them), values
    against the reference and gradients by finite differences, forward and as
    deconvolution: each block's products land at its own samples."""
    import dpnb.functions.nn as nn_functions
    monkeypatch.setattr(nn_functions, "_BLOCK_BYTES", 1)
    x, w = rng.randn(*x_shape), rng.randn(*w_shape)
    n, group = len(x_shape) - 2, options.get("group", 1)
    options = {"stride": (1,) * n, "dilation": (1,) * n, **options}
    y = F.convolution(nn.Variable.from_numpy_array(x), nn.Variable.from_numpy_array(w),
                      **options)
    assert len(list(y.parent.geometry.column_blocks(np, x))) == x_shape[0]
    y.forward()
    reference = np.concatenate([reference_convolution_nd(xs, ws, **{k: v for k, v in
                                                                     options.items()
                                                                     if k != "group"})
                                for xs, ws in zip(np.split(x, group, axis=1),
                                                  np.split(w, group, axis=0))], axis=1)
    np.testing.assert_allclose(y.d, reference, rtol=1e-10)
    check_grad(lambda x, w: F.convolution(x, w, **options), [x, w])
    check_grad(lambda z, w: F.deconvolution(z, w, **options), [rng.randn(*y.shape), w])


def test_convolution_results_do_not_alias_the_column_buffer(rng):
    """Columns live in a buffer shared by all convolutions; outputs and gradients must not."""
    xv = nn.Variable.from_numpy_array(rng.randn(2, 2, 4, 4).astype(np.float32), need_grad=True)
    wv = nn.Variable.from_numpy_array(rng.randn(2, 2, 3, 3).astype(np.float32), need_grad=True)
    y = F.convolution(xv, wv, pad=(1, 1))
    other = F.convolution(F.convolution(xv, wv, pad=(2, 2)), wv, stride=(2, 1))
    y.forward()
    y.backward(np.ones(y.shape, np.float32))
    saved = [a.copy() for a in (y.d, xv.g, wv.g)]
    other.forward()
    other.backward(np.ones(other.shape, np.float32))
    np.testing.assert_array_equal(y.d, saved[0])
    np.testing.assert_allclose(y.d, reference_convolution(xv.d, wv.d, pad=(1, 1)),
                               rtol=1e-5, atol=1e-5)
    assert not np.array_equal(xv.g, saved[1]), "gradients accumulate in the leaves"
    xv.g, wv.g = 0, 0
    y.backward(np.ones(y.shape, np.float32))
    np.testing.assert_allclose(xv.g, saved[1], rtol=1e-6)
    np.testing.assert_allclose(wv.g, saved[2], rtol=1e-6)


# -- GPU ---------------------------------------------------------------------

@pytest.mark.parametrize("options", CONV_CASES)
def test_convolution_gpu_matches_cpu(rng, options, gpu):
    group = options.get("group", 1)
    arrays = [rng.randn(*shape).astype(np.float32)
              for shape in ((2, 4, 7, 6), (6, 4 // group, 3, 2), (6,))]
    gy = rng.randn(*reference_convolution(arrays[0], arrays[1], **options).shape).astype(np.float32)
    results = []
    for ctx in (nn.Context(), get_extension_context("cudnn")):
        with nn.context_scope(ctx):
            vs = [nn.Variable.from_numpy_array(a, need_grad=True) for a in arrays]
            y = F.convolution(*vs, **options)
            y.forward()
            y.backward(gy)
            results.append([to_module(a, np) for a in [y.d] + [v.g for v in vs]])
    for cpu, gpu in zip(*results):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-4)


def test_affine_gpu_matches_cpu(rng, gpu):
    arrays = [rng.randn(4, 3, 2).astype(np.float32), rng.randn(6, 5).astype(np.float32),
              rng.randn(5).astype(np.float32)]
    results = []
    for ctx in (nn.Context(), get_extension_context("cudnn")):
        with nn.context_scope(ctx):
            vs = [nn.Variable.from_numpy_array(a, need_grad=True) for a in arrays]
            y = F.affine(*vs)
            y.forward()
            y.backward(np.ones((4, 5), np.float32))
            results.append([to_module(a, np) for a in [y.d] + [v.g for v in vs]])
    for cpu, gpu in zip(*results):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-5)


# -- channel_last, deconvolution, depthwise -------------------------------------

def forward_backward(build, arrays, gy=None):
    """Output, input gradients and output gradient of ``build(*variables)`` (float64) for
    ``gy`` (default: fixed random numbers)."""
    vs = [nn.Variable.from_numpy_array(a, need_grad=True) for a in arrays]
    y = build(*vs)
    y.forward()
    gy = np.random.RandomState(1).randn(*y.shape) if gy is None else np.ascontiguousarray(gy)
    for v in vs:
        v.g = 0
    y.backward(gy)
    return y.d.copy(), [v.g.copy() for v in vs], gy


def last(a, n):
    """Channel-first (B, C, *n spatial) as channel-last."""
    return np.moveaxis(a, -n - 1, -1)


CHANNEL_LAST_CASES = [
    ((2, 3, 7), (4, 3, 3), dict(pad=(1,), stride=(2,))),
    ((2, 4, 5, 6), (6, 2, 3, 2), dict(group=2, dilation=(1, 2), pad=(1, 0))),
    ((1, 2, 5, 5), (3, 2, 1, 1), dict()),
    ((1, 2, 4, 3, 4), (2, 2, 2, 2, 3), dict(stride=(2, 1, 1), pad=(0, 1, 1))),
]


@pytest.mark.parametrize("x_shape, w_shape, options", CHANNEL_LAST_CASES)
def test_convolution_channel_last_is_the_transposed_channel_first(rng, x_shape, w_shape,
                                                                   options):
    """nnabla's CPU code refuses channel_last; its channel-first results are recorded, so
    channel_last must be exactly those, transposed (weight (OC, *kernel, C/group))."""
    n = len(x_shape) - 2
    x, w, b = rng.randn(*x_shape), rng.randn(*w_shape), rng.randn(w_shape[0])
    y, (gx, gw, gb), gy = forward_backward(lambda x, w, b: F.convolution(x, w, b, **options),
                                           [x, w, b])
    wl = np.moveaxis(w, 1, -1)
    yl, (gxl, gwl, gbl), _ = forward_backward(
        lambda x, w, b: F.convolution(x, w, b, channel_last=True, **options),
        [np.ascontiguousarray(last(x, n)), np.ascontiguousarray(wl), b], last(gy, n))
    np.testing.assert_allclose(yl, last(y, n), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gxl, last(gx, n), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gwl, np.moveaxis(gw, 1, -1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gbl, gb, rtol=1e-12)
    check_grad(lambda x, w, b: F.convolution(x, w, b, channel_last=True, **options),
               [np.ascontiguousarray(last(x, n)), np.ascontiguousarray(wl), b])


DECONV_CASES = [
    ((2, 2, 4), (2, 3, 3), dict(stride=(2,), output_padding=(1,))),
    ((1, 4, 3, 3), (4, 1, 3, 2), dict(group=2, pad=(1, 0), stride=(2, 2))),
    ((1, 2, 3, 2, 3), (2, 2, 2, 2, 2), dict(dilation=(1, 2, 1))),
]


@pytest.mark.parametrize("x_shape, w_shape, options", DECONV_CASES)
def test_deconvolution_channel_last_is_the_transposed_channel_first(rng, x_shape, w_shape,
                                                                     options):
    n = len(x_shape) - 2
    x, w = rng.randn(*x_shape), rng.randn(*w_shape)
    b = rng.randn(w_shape[1] * options.get("group", 1))
    y, grads, gy = forward_backward(lambda x, w, b: F.deconvolution(x, w, b, **options),
                                    [x, w, b])
    yl, grads_l, _ = forward_backward(
        lambda x, w, b: F.deconvolution(x, w, b, channel_last=True, **options),
        [np.ascontiguousarray(last(x, n)), np.ascontiguousarray(np.moveaxis(w, 1, -1)), b],
        last(gy, n))
    np.testing.assert_allclose(yl, last(y, n), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grads_l[0], last(grads[0], n), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grads_l[1], np.moveaxis(grads[1], 1, -1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grads_l[2], grads[2], rtol=1e-12)


@pytest.mark.parametrize("x_shape, w_shape, options", DECONV_CASES)
def test_deconvolution_is_the_transpose_of_convolution(rng, x_shape, w_shape, options):
    """<deconv(x, w), z> == <x, conv(z, w)>: the same weight maps back and forth."""
    conv_options = {k: v for k, v in options.items() if k != "output_padding"}
    x, w = rng.randn(*x_shape), rng.randn(*w_shape)
    y = F.deconvolution(nn.Variable.from_numpy_array(x), nn.Variable.from_numpy_array(w),
                        **options)
    y.forward()
    z = rng.randn(*y.shape)
    back = F.convolution(nn.Variable.from_numpy_array(z), nn.Variable.from_numpy_array(w),
                         **conv_options)
    back.forward()
    assert back.shape == x.shape
    np.testing.assert_allclose(np.sum(y.d * z), np.sum(x * back.d), rtol=1e-10)


def test_depthwise_are_grouped_with_one_channel_per_group(rng):
    x, w, b = rng.randn(2, 3, 5, 5), rng.randn(6, 3, 2), rng.randn(6)
    y = check_grad(lambda x, w, b: F.depthwise_convolution(x, w, b, pad=(1, 0), multiplier=2),
                   [x, w, b])
    np.testing.assert_allclose(y.d, reference_convolution(x, w[:, None], b, pad=(1, 0), group=3),
                               rtol=1e-12)
    x, w, b = rng.randn(1, 4, 3, 3), rng.randn(4, 2, 2), rng.randn(2)
    y = check_grad(lambda x, w, b: F.depthwise_deconvolution(x, w, b, stride=(2, 1), divisor=2),
                   [x, w, b])
    z = F.deconvolution(*(nn.Variable.from_numpy_array(a) for a in (x, w[:, None], b)),
                        stride=(2, 1), group=2)
    z.forward()
    np.testing.assert_allclose(y.d, z.d, rtol=1e-12)


def test_deconvolution_errors():
    x = nn.Variable((1, 4, 3, 3))
    w = nn.Variable((4, 2, 3, 3))
    with pytest.raises(DpnbError, match="output_padding must be smaller than the stride"):
        F.deconvolution(x, w, stride=(2, 2), output_padding=(2, 0))
    with pytest.raises(DpnbError, match="output_padding must be smaller than the stride"):
        F.deconvolution(x, w, dilation=(2, 2), output_padding=(1, 1))
    with pytest.raises(DpnbError, match=r"output would have size \(-1, -1\).*use less padding"):
        F.deconvolution(x, w, pad=(3, 3))
    with pytest.raises(DpnbError, match="with group=3, the input's 4 channels must divide"):
        F.deconvolution(x, w, group=3)
    with pytest.raises(DpnbError, match=r"equal the weight's first axis; got weight shape \(2,"):
        F.deconvolution(x, nn.Variable((2, 2, 3, 3)))
    with pytest.raises(DpnbError, match=r"bias must have shape \(4,\)"):
        F.deconvolution(x, w, nn.Variable((2,)), group=2)
    with pytest.raises(DpnbError, match=r"output_padding must be 2 int\(s\) >= 0"):
        F.deconvolution(x, w, stride=(2, 2), output_padding=(1,))
    with pytest.raises(DpnbError, match=r"weight must have shape \(C, \*kernel, OC/group\)"):
        F.deconvolution(nn.Variable((1, 3, 3, 4)), nn.Variable((4, 3, 3)), channel_last=True)


def test_depthwise_errors():
    x = nn.Variable((1, 4, 5, 5))
    with pytest.raises(DpnbError, match=r"\(C \* multiplier, \*kernel\) = \(4 \* 2, ...\)"):
        F.depthwise_convolution(x, nn.Variable((4, 3, 3)), multiplier=2)
    with pytest.raises(DpnbError, match="multiplier=0 \\(an int >= 1\\)"):
        F.depthwise_convolution(x, nn.Variable((4, 3, 3)), multiplier=0)
    with pytest.raises(DpnbError, match=r"weight must have shape \(C \* multiplier, \*kernel\)"):
        F.depthwise_convolution(x, nn.Variable((4, 1, 3, 3)))
    # nnabla 1.39 silently drops channels when divisor does not divide them: dpnb refuses.
    with pytest.raises(DpnbError, match="4 channels must divide by divisor=3"):
        F.depthwise_deconvolution(x, nn.Variable((4, 3, 3)), divisor=3)
    with pytest.raises(DpnbError, match=r"weight must have shape \(C, \*kernel\)"):
        F.depthwise_deconvolution(x, nn.Variable((4, 1, 3, 3)))


# -- parametric functions ----------------------------------------------------

def test_pf_shapes_and_default_initializers():
    """nnabla's names and shapes; W uniform within Glorot's limit for (in, out, kernel) as
    nnabla computes it for each layer; b zero."""
    import dpnb.parametric_functions as PF
    from dpnb.initializer import calc_uniform_lim_glorot
    nn.clear_parameters()
    layers = [
        (lambda: PF.convolution(nn.Variable((2, 7, 5, 6)), 8, (3, 2), group=2,
                                channel_last=True, name="c"),
         "c/conv", (8, 3, 2, 3), (8,), (6, 8, (3, 2))),
        (lambda: PF.convolution(nn.Variable((2, 3, 9)), 4, (5,), name="c1"),
         "c1/conv", (4, 3, 5), (4,), (3, 4, (5,))),
        (lambda: PF.deconvolution(nn.Variable((2, 4, 5, 5)), 6, (3, 3), group=2, name="d"),
         "d/deconv", (4, 3, 3, 3), (6,), (6, 4, (3, 3))),
        (lambda: PF.deconvolution(nn.Variable((2, 5, 5, 4)), 6, (3, 2), channel_last=True,
                                  name="dl"),
         "dl/deconv", (4, 3, 2, 6), (6,), (6, 4, (3, 2))),
        (lambda: PF.depthwise_convolution(nn.Variable((2, 3, 6, 6)), (3, 3), multiplier=4,
                                          name="w"),
         "w/depthwise_conv", (12, 3, 3), (12,), (12, 3, (3, 3))),
        (lambda: PF.depthwise_deconvolution(nn.Variable((2, 6, 6, 6)), (3, 3), divisor=3,
                                            name="wd"),
         "wd/depthwise_deconv", (6, 3, 3), (2,), (6, 6, (3, 3))),
    ]
    for build, prefix, w_shape, b_shape, glorot in layers:
        build()
        params = nn.get_parameters(grad_only=False)
        w, b = params[f"{prefix}/W"], params[f"{prefix}/b"]
        assert w.shape == w_shape and b.shape == b_shape
        limit = calc_uniform_lim_glorot(*glorot)[1]
        assert np.abs(w.d).max() <= limit and np.abs(w.d).max() > 0.5 * limit
        assert not np.any(b.d)
    nn.clear_parameters()


def test_pf_errors():
    import dpnb.parametric_functions as PF
    with pytest.raises(DpnbError, match="must both be divisible by group"):
        PF.deconvolution(nn.Variable((1, 4, 3, 3)), 3, (3, 3), group=2)
    with pytest.raises(DpnbError, match=r"PF.convolution: kernel must be one or more int\(s\) >= 1"):
        PF.convolution(nn.Variable((1, 4, 3, 3)), 3, (0, 3))
    with pytest.raises(DpnbError, match="multiplier must be an int >= 1"):
        PF.depthwise_convolution(nn.Variable((1, 4, 3, 3)), (3, 3), multiplier=0)
    with pytest.raises(DpnbError, match="divisor must be an int >= 1 that divides"):
        PF.depthwise_deconvolution(nn.Variable((1, 4, 3, 3)), (3, 3), divisor=3)
    with pytest.raises(DpnbError, match="at least 3 dimensions"):
        PF.convolution(nn.Variable((4, 3)), 3, (3, 3))
    nn.clear_parameters()


@pytest.mark.parametrize("build, shapes", [
    (lambda x, w, b: F.convolution(x, w, b, pad=(1, 0, 1), stride=(2, 1, 1)),
     ((2, 2, 4, 3, 5), (3, 2, 2, 2, 3), (3,))),
    (lambda x, w, b: F.convolution(x, w, b, group=2, channel_last=True),
     ((2, 6, 5, 4), (4, 3, 2, 2), (4,))),
    (lambda x, w, b: F.deconvolution(x, w, b, stride=(2, 2), output_padding=(1, 0), group=2),
     ((2, 4, 3, 3), (4, 3, 3, 2), (6,))),
    (lambda x, w, b: F.deconvolution(x, w, b, stride=(2,), channel_last=True),
     ((2, 5, 3), (3, 2, 4), (4,))),
    (lambda x, w, b: F.depthwise_convolution(x, w, b, multiplier=2, dilation=(2, 1)),
     ((2, 3, 6, 5), (6, 3, 3), (6,))),
    (lambda x, w, b: F.depthwise_deconvolution(x, w, b, divisor=2, stride=(2, 2)),
     ((2, 4, 3, 3), (4, 2, 2), (2,))),
])
def test_convolutions_gpu_match_cpu(rng, build, shapes, gpu):
    arrays = [rng.randn(*shape).astype(np.float32) for shape in shapes]
    results = []
    for ctx in (nn.Context(), get_extension_context("cudnn")):
        with nn.context_scope(ctx):
            vs = [nn.Variable.from_numpy_array(a, need_grad=True) for a in arrays]
            y = build(*vs)
            y.forward()
            y.backward(np.random.RandomState(3).randn(*y.shape).astype(np.float32))
            results.append([to_module(a, np) for a in [y.d] + [v.g for v in vs]])
    for cpu, gpu in zip(*results):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-4)


def test_caller_made_outputs_are_refused():
    """nnabla's n_outputs / outputs hand in output variables; dpnb makes its own."""
    x, w = nn.Variable((1, 2, 4, 4)), nn.Variable((2, 2, 3, 3))
    for call in (lambda: F.convolution(x, w, n_outputs=1),
                 lambda: F.deconvolution(x, w, outputs=[nn.Variable((1, 2, 6, 6))]),
                 lambda: F.depthwise_convolution(x, nn.Variable((2, 3, 3)), n_outputs=1),
                 lambda: F.depthwise_deconvolution(x, nn.Variable((2, 3, 3)), n_outputs=1),
                 lambda: F.affine(x, nn.Variable((32, 3)), n_outputs=1)):
        with pytest.raises(DpnbError, match="leave them at -1 and None"):
            call()
