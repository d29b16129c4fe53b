import numpy as np
import pytest
from conftest import requires_gpu

import dpnb as nn
import dpnb.functions as F
from dpnb.context import to_module
from dpnb.errors import DpnbError
from dpnb.ext_utils import get_extension_context


def run(x, **options):
    y = F.image_augmentation(nn.Variable.from_numpy_array(x), **options)
    y.forward()
    return y.d


# -- dropout -----------------------------------------------------------------

def test_dropout_forward_and_backward_share_the_mask(rng):
    x = nn.Variable.from_numpy_array(rng.rand(50, 40) + 0.5, need_grad=True)
    y = F.dropout(x, p=0.3)
    y.forward()
    kept = y.d != 0
    np.testing.assert_allclose(y.d[kept], x.d[kept] / 0.7, rtol=1e-12)
    gy = rng.randn(50, 40)
    x.g = 0
    y.backward(gy)
    np.testing.assert_allclose(x.g, np.where(kept, gy / 0.7, 0), rtol=1e-12)


def test_dropout_rate_and_expectation(rng):
    x = nn.Variable.from_numpy_array(np.ones((200, 500), np.float32))
    y = F.dropout(x, p=0.25)
    y.forward()
    assert y.d.dtype == np.float32
    assert abs(np.mean(y.d == 0) - 0.25) < 0.01
    assert abs(y.d.mean() - 1) < 0.02


def test_dropout_finite_differences(rng):
    """With the mask held fixed (reseeding the function's generator), dropout is linear."""
    x = nn.Variable.from_numpy_array(rng.randn(3, 4), need_grad=True)
    y = F.dropout(x, p=0.5, seed=11)
    w = rng.randn(3, 4)

    def objective():
        y.parent.rng.seed(11)
        y.forward()
        return float(np.sum(y.d * w))

    objective()
    x.g = 0
    y.backward(w)
    numeric = np.zeros(x.shape)
    for i in np.ndindex(*x.shape):
        old = x.d[i]
        x.d[i] = old + 1e-6
        up = objective()
        x.d[i] = old - 1e-6
        numeric[i] = (up - objective()) / 2e-6
        x.d[i] = old
    np.testing.assert_allclose(x.g, numeric, atol=1e-7)


def test_dropout_seeds(rng):
    x = nn.Variable.from_numpy_array(rng.rand(20, 20) + 1)
    a, b = F.dropout(x, seed=5), F.dropout(x, seed=5)
    a.forward()
    b.forward()
    np.testing.assert_array_equal(a.d, b.d)
    first = a.d.copy()
    a.forward()
    assert not np.array_equal(first, a.d), "each forward draws a new mask"

    c = F.dropout(x)
    nn.seed(42)
    c.forward()
    first = c.d.copy()
    nn.seed(42)
    c.forward()
    np.testing.assert_array_equal(first, c.d)


def test_dropout_p_zero_is_identity(rng):
    x = nn.Variable.from_numpy_array(rng.randn(4, 5))
    y = F.dropout(x, p=0.0)
    y.forward()
    np.testing.assert_array_equal(y.d, x.d)


@pytest.mark.parametrize("p", [1.0, -0.1])
def test_dropout_bad_probability(p):
    with pytest.raises(DpnbError, match=r"must be in \[0, 1\)"):
        F.dropout(nn.Variable((2, 3)), p=p)


# -- image_augmentation ------------------------------------------------------

@pytest.mark.parametrize("shape", [(3, 2, 5, 6), (2, 4, 4), (7, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_neutral_options_give_the_input(rng, shape, dtype):
    x = rng.rand(*shape).astype(dtype)
    y = run(x)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, x)


def test_flip_lr_mirrors_exactly(rng):
    x = rng.rand(16, 3, 5, 6)
    y = run(x, flip_lr=True, seed=1)
    flipped = [np.array_equal(y[i], x[i, :, :, ::-1]) for i in range(16)]
    unchanged = [np.array_equal(y[i], x[i]) for i in range(16)]
    assert all(f != u for f, u in zip(flipped, unchanged))
    assert 0 < sum(flipped) < 16


def test_flip_ud_mirrors_exactly(rng):
    x = rng.rand(16, 2, 5, 6)
    y = run(x, flip_ud=True, seed=2)
    flipped = [np.array_equal(y[i], x[i, :, ::-1]) for i in range(16)]
    assert all(f or np.array_equal(y[i], x[i]) for i, f in enumerate(flipped))
    assert 0 < sum(flipped) < 16


def ramp(size, a=1.0, b=0.5):
    """a * (column - centre) + b * (row - centre): bilinear sampling reproduces it exactly."""
    d = np.arange(size) - (size - 1) / 2
    return a * d[None, :] + b * d[:, None]


def fit_plane(image, radius):
    """The plane through the image's central disk: (column slope, row slope, offset), residual."""
    size = image.shape[-1]
    d = np.arange(size) - (size - 1) / 2
    cols, rows = np.meshgrid(d, d)
    inside = cols ** 2 + rows ** 2 <= radius ** 2
    design = np.stack([cols[inside], rows[inside], np.ones(inside.sum())], axis=1)
    coef, *_ = np.linalg.lstsq(design, image[inside], rcond=None)
    return coef, np.abs(design @ coef - image[inside]).max()


def test_rotation_is_a_random_rotation_within_the_range():
    x = np.broadcast_to(ramp(17), (16, 1, 17, 17)).copy()
    y = run(x, angle=np.pi / 2, seed=3)
    angles = []
    for image in y[:, 0]:
        (p, q, _), residual = fit_plane(image, radius=5)
        assert residual < 1e-9
        # p = a cos + b sin, q = b cos - a sin for a rotation by theta (a=1, b=0.5).
        cos, sin = np.linalg.solve([[1.0, 0.5], [0.5, -1.0]], [p, q])
        assert abs(cos ** 2 + sin ** 2 - 1) < 1e-9
        angles.append(np.arctan2(sin, cos))
    angles = np.array(angles)
    assert np.all(np.abs(angles) <= np.pi / 2 + 1e-9)
    assert angles.min() < -0.5 and angles.max() > 0.5


def test_scale_and_aspect_ratio_stretch_the_sampling():
    x = np.broadcast_to(ramp(17), (8, 1, 17, 17)).copy()
    for image in run(x, min_scale=2.0, max_scale=2.0, seed=4)[:, 0]:
        (p, q, _), residual = fit_plane(image, radius=7)
        assert residual < 1e-9
        np.testing.assert_allclose([p, q], [0.5, 0.25], rtol=1e-9)
    for image in run(x, aspect_ratio=2.0, seed=5)[:, 0]:
        (p, q, _), residual = fit_plane(image, radius=3)
        assert residual < 1e-9
        assert abs(p * q - 0.5) < 1e-9 and 2 ** -0.5 - 1e-9 <= p <= 2 ** 0.5 + 1e-9


def test_crop_position_is_random_within_the_input():
    columns = np.broadcast_to(np.arange(10.0), (32, 1, 10, 10)).copy()
    y = run(columns, shape=(4, 6), seed=6)
    assert y.shape == (32, 1, 4, 6)
    left = y[:, 0, :, :1]
    np.testing.assert_allclose(y[:, 0], left + np.arange(6), atol=1e-12)
    assert left.min() >= 0 and left.max() <= 4
    assert np.ptp(left) > 2


def test_padding_widens_the_crop_range_and_clamps_at_the_border():
    columns = np.broadcast_to(np.arange(10.0), (64, 1, 10, 10)).copy()
    y = run(columns, pad=(0, 3), seed=7)
    assert y.min() == 0 and y.max() == 9
    assert np.any(y[:, 0, :, 0] == y[:, 0, :, 1]), "samples left of the image repeat its border"


def test_brightness_statistics():
    zeros = np.zeros((300, 3, 2, 2))
    y = run(zeros, brightness=0.3, seed=8)
    per_image = y[:, 0, 0, 0]
    np.testing.assert_array_equal(y, np.broadcast_to(per_image[:, None, None, None], y.shape))
    assert np.all(np.abs(per_image) <= 0.3) and per_image.min() < -0.25 and per_image.max() > 0.25
    assert abs(per_image.mean()) < 0.04
    y = run(zeros, brightness=0.3, brightness_each=True, seed=9)
    assert np.all(np.ptp(y[:, :, 0, 0], axis=1) > 0)


def test_contrast_statistics():
    x = np.zeros((300, 3, 2, 2))
    x[..., 0, 0] = 1.0
    y = run(x, contrast=2.0, contrast_center=0.5, seed=10)
    factor = 2 * (y[..., 0, 0] - 0.5)
    np.testing.assert_allclose(y[..., 1, 1], 0.5 - factor / 2, atol=1e-12)
    np.testing.assert_allclose(factor, factor[:, :1].repeat(3, axis=1), atol=1e-12)
    assert factor.min() >= 0.5 - 1e-12 and factor.max() <= 2 + 1e-12
    assert abs(np.log(factor[:, 0]).mean()) < 0.1 and np.ptp(factor) > 1.2
    y = run(x, contrast=2.0, contrast_each=True, seed=11)
    assert np.all(np.ptp(y[..., 0, 0], axis=1) > 0)


def test_noise_statistics():
    y = run(np.zeros((100, 1, 16, 16), np.float32), noise=0.2, seed=12)
    std = y.reshape(100, -1).std(axis=1)
    assert y.dtype == np.float32
    assert std.max() < 0.25 and std.min() < 0.05 and std.max() > 0.15


def test_distortion_changes_the_sampling():
    x = np.broadcast_to(ramp(17), (4, 1, 17, 17)).copy()
    y = run(x, distortion=0.5, seed=13)
    assert np.all(np.isfinite(y))
    assert not np.allclose(y, x)


def test_output_shape_and_seed_reproducibility(rng):
    x = rng.rand(4, 3, 8, 8).astype(np.float32)
    options = dict(shape=(3, 6, 5), pad=(2, 2), angle=0.3, flip_lr=True, contrast=1.5, noise=0.1,
                   seed=14)
    a, b = run(x, **options), run(x, **options)
    assert a.shape == (4, 3, 6, 5)
    np.testing.assert_array_equal(a, b)


def test_image_augmentation_is_not_differentiable(rng):
    x = nn.Variable.from_numpy_array(rng.rand(2, 3, 4, 4), need_grad=True)
    assert not F.image_augmentation(x, flip_lr=True).need_grad


def test_image_augmentation_errors():
    x = nn.Variable((2, 3, 8, 8))
    with pytest.raises(DpnbError, match="at least 2 axes"):
        F.image_augmentation(nn.Variable((8,)))
    with pytest.raises(DpnbError, match="leading entries match"):
        F.image_augmentation(x, shape=(4, 6, 6))
    with pytest.raises(DpnbError, match="pad must be two sizes"):
        F.image_augmentation(x, pad=(1,))
    with pytest.raises(DpnbError, match="min_scale <= max_scale"):
        F.image_augmentation(x, min_scale=1.5, max_scale=1.0)
    with pytest.raises(DpnbError, match="contrast must be > 0"):
        F.image_augmentation(x, contrast=0.0)


# -- GPU ---------------------------------------------------------------------

@requires_gpu
def test_stochastic_gpu_matches_cpu_with_the_same_seed(rng):
    x = rng.rand(4, 3, 8, 8).astype(np.float32)
    options = dict(shape=(6, 6), pad=(1, 1), min_scale=0.8, max_scale=1.2, angle=0.5, flip_lr=True,
                   flip_ud=True, brightness=0.2, contrast=1.5, contrast_each=True, noise=0.05,
                   distortion=0.1, aspect_ratio=1.2, seed=15)
    results = []
    for ctx in (nn.Context(), get_extension_context("cudnn")):
        with nn.context_scope(ctx):
            xv = nn.Variable.from_numpy_array(x, need_grad=True)
            augmented = F.image_augmentation(xv, **options)
            dropped = F.dropout(xv, p=0.3, seed=16)
            augmented.forward()
            dropped.forward()
            dropped.backward(np.ones(x.shape, np.float32))
            results.append([to_module(a, np) for a in (augmented.d, dropped.d, xv.g)])
    for cpu, gpu in zip(*results):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-5)
