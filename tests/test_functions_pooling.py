import itertools

import numpy as np
import pytest
from gradcheck import check_grad

import dpnb as nn
import dpnb.functions as F
from dpnb.context import to_module
from dpnb.errors import DpnbError
from dpnb.ext_utils import get_extension_context


def reference_pooling(x, kernel, stride=None, ignore_border=True, pad=None, mode="max",
                      including_pad=True):
    """Loops over every output position, windows as nnabla defines them."""
    n = len(kernel)
    stride = kernel if stride is None else stride
    pad = (0,) * n if pad is None else pad
    spatial = x.shape[-n:]
    out = tuple((w + p - (k - p if ignore_border else 1)) // s + 1
                for w, k, s, p in zip(spatial, kernel, stride, pad))
    y = np.zeros(x.shape[:-n] + out)
    for position in itertools.product(*(range(o) for o in out)):
        window, size = [], 1
        for o, w, k, s, p in zip(position, spatial, kernel, stride, pad):
            start = o * s - p
            stop = min(start + k, w + p)
            if including_pad:
                size *= stop - start
            start, stop = max(start, 0), min(stop, w)
            if not including_pad:
                size *= stop - start
            window.append(slice(start, stop))
        values = x[(Ellipsis,) + tuple(window)].reshape(x.shape[:-n] + (-1,))
        if mode == "max":
            y[(Ellipsis,) + position] = values.max(-1)
        else:
            y[(Ellipsis,) + position] = values.sum(-1) / (size if mode == "average" else 1)
    return y


POOL_CASES = [
    dict(kernel=(2, 2)),
    dict(kernel=(2, 3), stride=(1, 2)),
    dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1)),
    dict(kernel=(2, 2), ignore_border=False),
    dict(kernel=(3, 2), stride=(2, 3), ignore_border=False, pad=(1, 1)),
    dict(kernel=(2,), stride=(3,), ignore_border=False),
    dict(kernel=(2, 1, 2), stride=(1, 1, 2), pad=(1, 0, 1)),
]


@pytest.mark.parametrize("options", POOL_CASES)
def test_max_pooling_matches_loops(rng, options):
    x = rng.randn(2, 3, 5, 7).astype(np.float32)
    y = F.max_pooling(nn.Variable.from_numpy_array(x), **options)
    y.forward()
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.d, reference_pooling(x, mode="max", **options))


@pytest.mark.parametrize("including_pad", [True, False])
@pytest.mark.parametrize("options", POOL_CASES)
def test_average_pooling_matches_loops(rng, options, including_pad):
    x = rng.randn(2, 3, 5, 7).astype(np.float32)
    y = F.average_pooling(nn.Variable.from_numpy_array(x), including_pad=including_pad, **options)
    y.forward()
    assert y.dtype == np.float32
    expected = reference_pooling(x, mode="average", including_pad=including_pad, **options)
    np.testing.assert_allclose(y.d, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("options", POOL_CASES)
def test_sum_pooling_matches_loops_and_differences(rng, options):
    """Sum pooling over 1, 2 or 3 axes (nnabla's CPU code only pools 2 or 3)."""
    x = rng.randn(2, 3, 5, 7)
    y = F.sum_pooling(nn.Variable.from_numpy_array(x), **options)
    y.forward()
    np.testing.assert_allclose(y.d, reference_pooling(x, mode="sum", **options), rtol=1e-12)
    check_grad(lambda x: F.sum_pooling(x, **options), [rng.randn(2, 2, 5, 4)])


def test_output_size_rule_for_ignore_border_false():
    # nnabla: (w + p - 1) // s + 1 when ignore_border=False.
    x = nn.Variable((1, 1, 5, 6))
    assert F.max_pooling(x, (2, 2), ignore_border=False).shape == (1, 1, 3, 3)
    assert F.max_pooling(x, (2, 2), ignore_border=True).shape == (1, 1, 2, 3)
    assert F.average_pooling(x, (3, 3), (2, 2), False, (1, 1)).shape == (1, 1, 3, 4)
    assert F.average_pooling(x, (3, 3), (2, 2), True, (1, 1)).shape == (1, 1, 3, 3)


def test_average_pooling_divisor_at_borders():
    x = nn.Variable.from_numpy_array(np.ones((1, 1, 2, 2)))
    y = F.average_pooling(x, (2, 2), (1, 1), pad=(1, 1), including_pad=True)
    y.forward()
    np.testing.assert_allclose(y.d[0, 0], [[0.25, 0.5, 0.25], [0.5, 1, 0.5], [0.25, 0.5, 0.25]])
    y = F.average_pooling(x, (2, 2), (1, 1), pad=(1, 1), including_pad=False)
    y.forward()
    np.testing.assert_allclose(y.d[0, 0], np.ones((3, 3)))


def distinct_values(rng, shape):
    """Inputs without ties, so that finite differences do not cross a max switch."""
    return rng.permutation(np.prod(shape)).reshape(shape) * 0.1


@pytest.mark.parametrize("options", POOL_CASES)
def test_max_pooling_gradients(rng, options):
    check_grad(lambda x: F.max_pooling(x, **options), [distinct_values(rng, (2, 2, 5, 4))])


@pytest.mark.parametrize("including_pad", [True, False])
@pytest.mark.parametrize("options", POOL_CASES)
def test_average_pooling_gradients(rng, options, including_pad):
    check_grad(lambda x: F.average_pooling(x, including_pad=including_pad, **options),
               [rng.randn(2, 2, 5, 4)])


def test_max_pooling_gradient_goes_to_first_maximum():
    x = nn.Variable.from_numpy_array(np.ones((1, 1, 2, 4)), need_grad=True)
    y = F.max_pooling(x, (2, 2))
    y.forward()
    y.backward(np.array([[[[1.0, 2.0]]]]))
    np.testing.assert_array_equal(x.g[0, 0], [[1, 0, 2, 0], [0, 0, 0, 0]])


def test_tiled_pooling_as_in_resnet(rng):
    x = rng.randn(2, 3, 8, 8).astype(np.float32)
    for pool, mode in ((F.max_pooling, "max"), (F.average_pooling, "average")):
        y = pool(nn.Variable.from_numpy_array(x), (2, 2))
        y.forward()
        np.testing.assert_allclose(y.d, reference_pooling(x, (2, 2), mode=mode),
                                   rtol=1e-6, atol=1e-6)
    check_grad(lambda x: F.average_pooling(x, (2, 2)), [rng.randn(2, 2, 4, 4)])
    check_grad(lambda x: F.max_pooling(x, (2, 2)), [distinct_values(rng, (2, 2, 4, 4))])


def test_global_average_pooling(rng):
    x = rng.randn(2, 3, 4, 5)
    y = check_grad(F.global_average_pooling, [x])
    assert y.shape == (2, 3, 1, 1)
    np.testing.assert_allclose(y.d, x.mean(axis=(2, 3), keepdims=True), rtol=1e-12)
    y = check_grad(F.global_average_pooling, [x[:, :, 0, 0]])
    np.testing.assert_allclose(y.d, x[:, :, :1, :1], rtol=1e-12)


def test_float32_stays_float32(rng):
    x = nn.Variable.from_numpy_array(rng.randn(2, 3, 4, 4).astype(np.float32), need_grad=True)
    for y in (F.max_pooling(x, (2, 2)), F.average_pooling(x, (3, 3), (1, 1), pad=(1, 1)),
              F.global_average_pooling(x)):
        y.forward()
        y.backward(np.ones(y.shape, np.float32))
        assert y.d.dtype == np.float32 and x.g.dtype == np.float32


def test_pooling_errors():
    x = nn.Variable((2, 3, 4, 4))
    with pytest.raises(DpnbError, match=r"kernel must have between 1 and 3 entries .*channel_last=True"):
        F.max_pooling(x, (2, 2, 2, 2), channel_last=True)
    with pytest.raises(DpnbError, match=r"stride must be 2 int\(s\) >= 1, one per spatial axis, got \(1,\)"):
        F.average_pooling(x, (2, 2), stride=(1,))
    with pytest.raises(DpnbError, match="kernel must have between 1 and 4 entries"):
        F.max_pooling(x, (1, 1, 1, 1, 1))
    with pytest.raises(DpnbError, match=r"kernel must be one or more int\(s\) >= 1, one per "
                                        r"spatial axis, got \(\)"):
        F.max_pooling(x, ())
    with pytest.raises(DpnbError, match="pad must be smaller than the kernel"):
        F.max_pooling(x, (2, 2), pad=(2, 0))
    with pytest.raises(DpnbError, match="larger than the padded input"):
        F.average_pooling(x, (5, 2))
    with pytest.raises(DpnbError, match=r"stride must be 2 int\(s\) >= 1, one per spatial axis, got \(0, 1\)"):
        F.max_pooling(x, (2, 2), stride=(0, 1))
    # nnabla 1.39 returns garbage (max), zeros (sum) or NaN (average excluding the pad) for
    # windows made only of padding: dpnb refuses them for every pooling.
    for pool in (F.max_pooling, F.average_pooling, F.sum_pooling):
        with pytest.raises(DpnbError, match="pad must be smaller than the kernel"):
            pool(x, (2, 2), pad=(0, 2))
    with pytest.raises(DpnbError, match=r"2 to 4 dimensions \(B, C\[, H\[, W\]\]\), got shape \(3,\)"):
        F.global_average_pooling(nn.Variable((3,)))
    # nnabla 1.39 averages the wrong elements beyond 4 axes: dpnb refuses.
    with pytest.raises(DpnbError, match="reshape the spatial axes into one"):
        F.global_average_pooling(nn.Variable((1, 2, 2, 3, 2)))
    with pytest.raises(DpnbError, match=r"kernel must be one or more int\(s\) >= 1, one per spatial axis, got \(2.0, 2\)"):
        F.max_pooling(x, (2.0, 2))


@pytest.mark.parametrize("options", POOL_CASES)
def test_pooling_gpu_matches_cpu(rng, options, gpu):
    x = distinct_values(rng, (2, 3, 5, 7)).astype(np.float32)
    results = []
    for ctx in (nn.Context(), get_extension_context("cudnn")):
        with nn.context_scope(ctx):
            xv = nn.Variable.from_numpy_array(x, need_grad=True)
            outputs = []
            for y in (F.max_pooling(xv, **options),
                      F.average_pooling(xv, including_pad=False, **options),
                      F.global_average_pooling(xv)):
                y.forward()
                xv.g = 0
                y.backward(np.arange(y.size, dtype=np.float32).reshape(y.shape))
                outputs += [to_module(y.d, np), to_module(xv.g, np).copy()]
            results.append(outputs)
    for cpu, gpu in zip(*results):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-5)


# -- channel_last, unpooling, interpolate ---------------------------------------

def forward_backward(build, x, gy=None):
    """Output and input gradient of ``build(variable)`` (float64) for ``gy``
    (default: fixed random numbers)."""
    xv = nn.Variable.from_numpy_array(x, need_grad=True)
    y = build(xv)
    y.forward()
    gy = np.random.RandomState(1).randn(*y.shape) if gy is None else np.ascontiguousarray(gy)
    xv.g = 0
    y.backward(gy)
    return y.d.copy(), xv.g.copy(), gy


CHANNEL_LAST_CASES = [
    (lambda x, cl: F.max_pooling(x, (2, 3), (1, 2), True, (1, 1), channel_last=cl), 2),
    (lambda x, cl: F.max_pooling(x, (2,), ignore_border=False, channel_last=cl), 1),
    (lambda x, cl: F.average_pooling(x, (3, 2), (2, 2), False, (1, 0), channel_last=cl,
                                     including_pad=False), 2),
    (lambda x, cl: F.average_pooling(x, (2, 2, 2), pad=(1, 1, 0), channel_last=cl), 3),
    (lambda x, cl: F.sum_pooling(x, (2, 2), pad=(1, 1), channel_last=cl), 2),
    (lambda x, cl: F.unpooling(x, (2, 3), channel_last=cl), 2),
    (lambda x, cl: F.unpooling(x, (1, 2, 2), channel_last=cl), 3),
    (lambda x, cl: F.interpolate(x, scale=(2, 1.5), channel_last=cl), 2),
    (lambda x, cl: F.interpolate(x, output_size=(7,), mode="nearest", half_pixel=True,
                                 channel_last=cl), 1),
    (lambda x, cl: F.interpolate(x, output_size=(3, 5, 2), align_corners=True,
                                 channel_last=cl), 3),
]


@pytest.mark.parametrize("build, n", CHANNEL_LAST_CASES)
def test_channel_last_is_the_transposed_channel_first(rng, build, n):
    """nnabla's CPU code refuses channel_last here; its channel-first results are recorded,
    so channel_last must be exactly those, transposed."""
    x = distinct_values(rng, (2, 3, 4, 5, 4)[:2 + n]) + 0.01 * rng.rand(*(2, 3, 4, 5, 4)[:2 + n])
    y, gx, gy = forward_backward(lambda v: build(v, False), x)
    last = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    yl, gxl, _ = forward_backward(lambda v: build(v, True), last, np.moveaxis(gy, 1, -1))
    np.testing.assert_allclose(yl, np.moveaxis(y, 1, -1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gxl, np.moveaxis(gx, 1, -1), rtol=1e-12, atol=1e-12)
    check_grad(lambda v: build(v, True), [last])


def test_unpooling_repeats_each_element(rng):
    x = rng.randn(2, 3, 2, 4)
    y = check_grad(lambda x: F.unpooling(x, (3, 2)), [x])
    np.testing.assert_array_equal(y.d, x.repeat(3, axis=2).repeat(2, axis=3))
    y = check_grad(lambda x: F.unpooling(x, (2,)), [x])
    np.testing.assert_array_equal(y.d, x.repeat(2, axis=3))
    y = check_grad(lambda x: F.unpooling(x, (2, 1, 1, 2)), [x])
    np.testing.assert_array_equal(y.d, x.repeat(2, axis=0).repeat(2, axis=3))


def test_interpolate_sizes_from_scale_and_output_size():
    x = nn.Variable((1, 2, 5, 3))
    assert F.interpolate(x, scale=(1.5, 0.5)).shape == (1, 2, 7, 1)
    assert F.interpolate(x, scale=(2,)).shape == (1, 2, 5, 6)
    assert F.interpolate(x, scale=(2, 2), output_size=(3, 4)).shape == (1, 2, 3, 4)
    assert F.interpolate(x, scale=(2, 2), channel_last=True).shape == (1, 4, 10, 3)
    assert F.interpolate(x, output_size=(2, 2, 2), channel_last=True).shape == (2, 2, 2, 3)


def test_interpolate_linear_matches_a_direct_formula(rng):
    """Bilinear, align_corners: output (i, j) at input (i (h-1)/(H-1), j (w-1)/(W-1))."""
    x = rng.randn(1, 1, 3, 4)
    y = check_grad(lambda x: F.interpolate(x, output_size=(5, 7), align_corners=True), [x])
    expected = np.zeros((5, 7))
    for i in range(5):
        for j in range(7):
            r, c = i * 2 / 4, j * 3 / 6
            r0, c0 = min(int(r), 1), min(int(c), 2)
            fr, fc = r - r0, c - c0
            expected[i, j] = ((1 - fr) * (1 - fc) * x[0, 0, r0, c0] + (1 - fr) * fc
                              * x[0, 0, r0, c0 + 1] + fr * (1 - fc) * x[0, 0, r0 + 1, c0]
                              + fr * fc * x[0, 0, r0 + 1, c0 + 1])
    np.testing.assert_allclose(y.d[0, 0], expected, rtol=1e-6, atol=1e-6)


def test_unpooling_and_interpolate_errors():
    x = nn.Variable((2, 3, 4))
    with pytest.raises(DpnbError, match=r"kernel must have 1 to 3 entries .* got \(2, 2, 2, 2\)"):
        F.unpooling(x, (2, 2, 2, 2))
    with pytest.raises(DpnbError, match=r"kernel must have 1 to 2 entries .*channel_last=True"):
        F.unpooling(x, (2, 2, 2), channel_last=True)
    with pytest.raises(DpnbError, match=r"Unpooling: kernel must be one or more int\(s\) >= 1, one per spatial axis, got \(0, 2\)"):
        F.unpooling(x, (0, 2))
    with pytest.raises(DpnbError, match="mode must be 'linear' or 'nearest', got 'cubic'"):
        F.interpolate(x, output_size=(3, 3), mode="cubic")
    with pytest.raises(DpnbError, match="align_corners=True and half_pixel=True cannot be"):
        F.interpolate(x, output_size=(3, 3), align_corners=True, half_pixel=True)
    with pytest.raises(DpnbError, match="either scale or output_size must be given"):
        F.interpolate(x)
    with pytest.raises(DpnbError, match="output_size must have 1 to 2 entries"):
        F.interpolate(x, output_size=(2, 2, 2), channel_last=True)
    with pytest.raises(DpnbError, match="output_size must be a sequence of ints >= 0"):
        F.interpolate(x, output_size=(2, -1))
    with pytest.raises(DpnbError, match="scale must have 1 to 3 entries"):
        F.interpolate(x, scale=(2, 2, 2, 2))


@pytest.mark.parametrize("build, n", CHANNEL_LAST_CASES)
def test_channel_last_and_upsampling_gpu_match_cpu(rng, build, n, gpu):
    x = distinct_values(rng, (2, 3, 4, 5, 4)[:2 + n]).astype(np.float32)
    results = []
    for ctx in (nn.Context(), get_extension_context("cudnn")):
        with nn.context_scope(ctx):
            xv = nn.Variable.from_numpy_array(x, need_grad=True)
            y = build(xv, True)
            y.forward()
            y.backward(np.arange(y.size, dtype=np.float32).reshape(y.shape) / y.size)
            results.append([to_module(y.d, np), to_module(xv.g, np)])
    for cpu, gpu in zip(*results):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-5)


def test_caller_made_outputs_are_refused():
    """nnabla's n_outputs / outputs hand in output variables; dpnb makes its own."""
    x = nn.Variable((1, 2, 4, 4))
    for call in (lambda: F.max_pooling(x, (2, 2), outputs=[nn.Variable((1, 2, 2, 2))]),
                 lambda: F.sum_pooling(x, (2, 2), n_outputs=1),
                 lambda: F.unpooling(x, (2, 2), n_outputs=2),
                 lambda: F.global_average_pooling(x, n_outputs=1),
                 lambda: F.average_pooling(x, (2, 2), n_outputs=1)):
        with pytest.raises(DpnbError, match="leave them at -1 and None"):
            call()
