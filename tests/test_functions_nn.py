import numpy as np
import pytest
from conftest import requires_gpu
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
    gx, gw = fn.backward(np, [x, w], None, [gy], [True, True])
    geo = fn.geometry
    grouped = gy.reshape(2, group, 6 // group, -1)
    col2im = geo.add_columns_to_image(np, np.matmul(geo.weight_matrix(w).swapaxes(-1, -2),
                                                    grouped))
    np.testing.assert_allclose(gx, col2im, rtol=1e-12, atol=1e-12)
    x_columns = geo.columns(np, x)
    np.testing.assert_allclose(gw, np.matmul(grouped, x_columns.swapaxes(-1, -2)).sum(axis=0)
                               .reshape(w.shape), rtol=1e-12, atol=1e-12)


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

@requires_gpu
@pytest.mark.parametrize("options", CONV_CASES)
def test_convolution_gpu_matches_cpu(rng, options):
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


@requires_gpu
def test_affine_gpu_matches_cpu(rng):
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
