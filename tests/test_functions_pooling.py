import itertools

import numpy as np
import pytest
from conftest import requires_gpu
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
        y[(Ellipsis,) + position] = values.max(-1) if mode == "max" else values.sum(-1) / size
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
    with pytest.raises(DpnbError, match="kernel, stride and pad must have the same length"):
        F.average_pooling(x, (2, 2), stride=(1,))
    with pytest.raises(DpnbError, match="kernel must have between 1 and 4 entries"):
        F.max_pooling(x, (1, 1, 1, 1, 1))
    with pytest.raises(DpnbError, match="pad must be smaller than the kernel"):
        F.max_pooling(x, (2, 2), pad=(2, 0))
    with pytest.raises(DpnbError, match="larger than the padded input"):
        F.average_pooling(x, (5, 2))
    with pytest.raises(DpnbError, match="kernel and stride must be >= 1"):
        F.max_pooling(x, (2, 2), stride=(0, 1))
    with pytest.raises(DpnbError, match=r"2 to 4 dimensions \(B, C\[, H\[, W\]\]\), got shape \(3,\)"):
        F.global_average_pooling(nn.Variable((3,)))
    # nnabla 1.39 averages the wrong elements beyond 4 axes: dpnb refuses.
    with pytest.raises(DpnbError, match="reshape the spatial axes into one"):
        F.global_average_pooling(nn.Variable((1, 2, 2, 3, 2)))
    with pytest.raises(DpnbError, match="kernel must be a tuple of ints"):
        F.max_pooling(x, (2.0, 2))


@requires_gpu
@pytest.mark.parametrize("options", POOL_CASES)
def test_pooling_gpu_matches_cpu(rng, options):
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
