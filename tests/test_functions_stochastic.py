import numpy as np
import pytest

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

def test_stochastic_gpu_matches_cpu_with_the_same_seed(rng, gpu):
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


# -- samplers -----------------------------------------------------------------

def draw(fn, **options):
    y = fn(**options)
    y.forward()
    return y.d.copy()


SAMPLERS = {
    # name: (function, options, dtype, mean, variance, low, high)
    "rand": (F.rand, dict(low=-2, high=3), np.float32, 0.5, 25 / 12, -2, 3),
    "randn": (F.randn, dict(mu=1.5, sigma=2), np.float32, 1.5, 4.0, -np.inf, np.inf),
    "randint": (F.randint, dict(low=-3, high=4), np.int32, 0.0, (7 ** 2 - 1) / 12, -3, 3),
    "rand_binomial": (F.rand_binomial, dict(n=5, p=0.3), np.float32, 1.5, 1.05, 0, 5),
    "rand_beta": (F.rand_beta, dict(alpha=2.0, beta=3.0), np.float32, 0.4, 0.04, 0, 1),
    "rand_gamma": (F.rand_gamma, dict(k=2.0, theta=1.5), np.float32, 3.0, 4.5, 0, np.inf),
}


@pytest.mark.parametrize("name", SAMPLERS)
def test_sampler_moments_range_and_dtype(name):
    fn, options, dtype, mean, variance, low, high = SAMPLERS[name]
    n = 40000
    y = fn(shape=(200, 200), seed=3, **options)
    assert y.shape == (200, 200) and y.dtype == dtype and not y.need_grad
    y.forward()
    d = y.d.astype(np.float64)
    assert d.min() >= low and d.max() <= high
    if name == "rand":
        assert d.max() < high
    # mean within 5 standard errors; variance within 5 of its standard errors (4th moment bound)
    assert abs(d.mean() - mean) < 5 * np.sqrt(variance / n)
    assert abs(d.var() - variance) < 5 * np.sqrt(((d - mean) ** 4).mean() / n)
    if name in ("randint", "rand_binomial"):
        assert set(np.unique(d)) == set(range(int(low), int(high) + 1))


@pytest.mark.parametrize("name", SAMPLERS)
def test_sampler_seeds(name):
    fn, options = SAMPLERS[name][:2]
    assert fn(**options).shape == ()
    a, b = fn(shape=(50,), seed=7, **options), fn(shape=(50,), seed=7, **options)
    a.forward()
    b.forward()
    np.testing.assert_array_equal(a.d, b.d)
    first = a.d.copy()
    a.forward()
    assert not np.array_equal(first, a.d), "each forward draws anew"
    c = fn(shape=(50,), **options)
    nn.seed(9)
    c.forward()
    first = c.d.copy()
    nn.seed(9)
    c.forward()
    np.testing.assert_array_equal(c.d, first)


def test_samplers_follow_the_context_float_type():
    with nn.context_scope(get_extension_context("cpu", type_config="double")):
        assert F.rand(shape=(2,)).dtype == np.float64
        assert F.randint(high=3, shape=(2,)).dtype == np.int32


@pytest.mark.parametrize("fn, options, message", [
    (F.rand, dict(low=1, high=1), r"Rand: expected low < high, got low=1.0, high=1.0"),
    (F.randn, dict(sigma=0), r"Randn: sigma must not be 0"),
    (F.randint, dict(low=2, high=1), r"Randint: expected low < high, got low=2, high=1"),
    (F.randint, dict(low=0.5, high=3), r"Randint: low must be an int, got 0.5"),
    (F.rand, dict(low=0, high=float("inf")), r"Rand: high must be a finite number, got inf"),
    (F.rand_binomial, dict(n=0), r"RandBinomial: expected n >= 1 trials and a probability 0 < p < 1"),
    (F.rand_binomial, dict(p=1.0), r"RandBinomial: expected n >= 1 .* got n=1, p=1.0"),
    (F.rand_beta, dict(beta=0), r"RandBeta: alpha and beta must be > 0, got alpha=0.5, beta=0.0"),
    (F.rand_gamma, dict(k=-1), r"RandGamma: k and theta must be > 0, got k=-1.0, theta=1.0"),
    (F.rand, dict(shape=(2, -1)), r"Rand: shape must be a sequence of ints >= 0, got \(2, -1\)"),
    (F.rand, dict(seed=-2), r"Rand: seed must be an int >= 0, or -1 for the default generator; got -2"),
])
def test_sampler_errors(fn, options, message):
    with pytest.raises(DpnbError, match=message):
        fn(**options)


# -- random_choice ------------------------------------------------------------

def test_random_choice_frequencies_follow_the_weights():
    x = nn.Variable.from_numpy_array(np.array([[11.0, 22, 33], [110, 220, 330]]))
    w = nn.Variable.from_numpy_array(np.array([[1.0, 2, 7], [7, 0, 3]]))
    y = F.random_choice(x, w, shape=(100, 100), seed=4)
    assert y.shape == (2, 100, 100)
    y.forward()
    n = 10000
    for row, values, weights in zip(y.d, x.d, w.d):
        p = weights / weights.sum()
        freq = np.array([(row == v).mean() for v in values])
        assert freq.sum() == 1
        assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n))
    assert not (y.d[1] == 220).any(), "a zero weight is never drawn"


def test_random_choice_shapes():
    x, w = nn.Variable.from_numpy_array(np.arange(3.0)), nn.Variable.from_numpy_array(np.ones(3))
    assert F.random_choice(x, w).shape == (1,)
    assert F.random_choice(x, w, shape=(2, 2)).shape == (2, 2)
    xs = nn.Variable.from_numpy_array(np.arange(24.0).reshape(2, 3, 4))
    assert F.random_choice(xs, nn.Variable.from_numpy_array(np.ones((2, 3, 4))), shape=(5,)).shape == (2, 3, 5)


def test_random_choice_of_integer_indices_gives_floats():
    x = nn.Variable.from_numpy_array(np.arange(5, dtype=np.int32))
    y = F.random_choice(x, nn.Variable.from_numpy_array(np.array([1, 2, 3, 2, 1])), shape=(20,))
    y.forward()
    assert y.dtype == np.float32 and set(np.unique(y.d)) <= set(range(5))


def test_random_choice_without_replacement_draws_each_member_once():
    x = nn.Variable.from_numpy_array(np.arange(12.0).reshape(3, 4))
    w = nn.Variable.from_numpy_array(np.array([[1.0, 1, 1, 1], [5, 1, 0, 1], [1, 2, 3, 4]]))
    y = F.random_choice(x, w, shape=(3,), replace=False, seed=2)
    for _ in range(20):
        y.forward()
        for row, values in zip(y.d, x.d):
            assert len(set(row)) == 3 and set(row) <= set(values)
        assert 6.0 not in y.d[1], "a zero weight is never drawn"
    full = F.random_choice(x, nn.Variable.from_numpy_array(np.ones((3, 4))), shape=(4,), replace=False)
    full.forward()
    np.testing.assert_array_equal(np.sort(full.d, axis=1), x.d)


def test_random_choice_gradients_count_the_draws(rng):
    x = nn.Variable.from_numpy_array(rng.randn(2, 4), need_grad=True)
    w = nn.Variable.from_numpy_array(rng.uniform(0.5, 1, (2, 4)), need_grad=True)
    y = F.random_choice(x, w, shape=(3, 5), seed=6)
    y.forward()
    gy = rng.randn(2, 3, 5)
    x.g, w.g = 0, 0
    y.backward(gy)
    expected = np.zeros((2, 4))
    for i in range(2):
        for j in range(4):
            expected[i, j] = gy[i][y.d[i] == x.d[i, j]].sum()
    np.testing.assert_allclose(x.g, expected, rtol=1e-12)
    np.testing.assert_allclose(w.g, expected, rtol=1e-12)


def test_random_choice_errors():
    x = nn.Variable.from_numpy_array(np.arange(6.0).reshape(2, 3))
    with pytest.raises(DpnbError, match=r"RandomChoice: x and w must have one shape .* got x \(2, 3\) "
                                        r"and w \(2, 2\)"):
        F.random_choice(x, nn.Variable((2, 2)))
    with pytest.raises(DpnbError, match=r"without replacement at most 3 samples can be drawn from "
                                        r"populations of 3, but shape \(4,\) asks for 4"):
        F.random_choice(x, nn.Variable((2, 3)), shape=(4,), replace=False)
    for weights, replace, message in [([[1, -1, 1], [1, 1, 1]], True, "weights must not be negative"),
                                      ([[0, 0, 0], [1, 1, 1]], True, "needs a weight > 0"),
                                      ([[1, 0, 0], [1, 1, 1]], False, "at least 2 non-zero weights")]:
        y = F.random_choice(x, nn.Variable.from_numpy_array(np.array(weights, float)), shape=(2,),
                            replace=replace)
        with pytest.raises(DpnbError, match=message):
            y.forward()


# -- random_crop, random_flip, random_shift ----------------------------------

def test_random_crop_takes_a_window_per_sample(rng):
    a = rng.randn(60, 2, 6, 7)
    x = nn.Variable.from_numpy_array(a, need_grad=True)
    y = F.random_crop(x, shape=(4, 3), seed=1)
    assert y.shape == (60, 2, 4, 3)
    y.forward()
    corners = set()
    for s in range(60):
        found = [(i, j) for i in range(3) for j in range(5)
                 if np.array_equal(y.d[s], a[s, :, i:i + 4, j:j + 3])]
        assert len(found) == 1, "each sample is one window, the same for all its channels"
        corners.add(found[0])
    assert len(corners) > 8, "the window moves from sample to sample"
    gy = rng.randn(*y.shape)
    x.g = 0
    y.backward(gy)
    for s in range(60):
        i, j = next((i, j) for i in range(3) for j in range(5)
                    if np.array_equal(y.d[s], a[s, :, i:i + 4, j:j + 3]))
        expected = np.zeros((2, 6, 7))
        expected[:, i:i + 4, j:j + 3] = gy[s]
        np.testing.assert_array_equal(x.g[s], expected)


def test_random_crop_base_axis_and_default_shape(rng):
    a = rng.randn(3, 4, 5, 5)
    x = nn.Variable.from_numpy_array(a)
    same = F.random_crop(x)
    same.forward()
    np.testing.assert_array_equal(same.d, a)
    per_channel = F.random_crop(x, shape=(2, 2), base_axis=2, seed=3)
    per_channel.forward()
    offsets = set()
    for n in range(3):
        for c in range(4):
            found = [(i, j) for i in range(4) for j in range(4)
                     if np.array_equal(per_channel.d[n, c], a[n, c, i:i + 2, j:j + 2])]
            offsets.add(found[0])
    assert len(offsets) > 3, "with base_axis=2 every (sample, channel) has its own window"
    whole = F.random_crop(x, shape=(2, 3, 3), base_axis=0, seed=3)
    whole.forward()
    hits = [(c, i, j) for c in range(3) for i in range(3) for j in range(3)
            if np.array_equal(whole.d, a[:, c:c + 2, i:i + 3, j:j + 3])]
    assert len(hits) == 1, "base_axis=0 crops all samples alike"


def test_random_flip_reverses_with_probability_one_half(rng):
    a = rng.randn(400, 3, 5)
    x = nn.Variable.from_numpy_array(a, need_grad=True)
    y = F.random_flip(x, axes=(1, 2), seed=2)
    y.forward()
    flips = np.zeros((400, 2), bool)
    for s in range(400):
        options = {(f1, f2): a[s][::-1 if f1 else 1, ::-1 if f2 else 1]
                   for f1 in (False, True) for f2 in (False, True)}
        found = [k for k, v in options.items() if np.array_equal(y.d[s], v)]
        assert len(found) == 1
        flips[s] = found[0]
    assert np.all(np.abs(flips.mean(axis=0) - 0.5) < 5 * np.sqrt(0.25 / 400))
    gy = rng.randn(*y.shape)
    x.g = 0
    y.backward(gy)
    for s in range(400):
        f1, f2 = flips[s]
        np.testing.assert_array_equal(x.g[s], gy[s][::-1 if f1 else 1, ::-1 if f2 else 1])


def test_random_flip_default_axis_and_sample_axes(rng):
    a = rng.randn(50, 4)
    y = F.random_flip(nn.Variable.from_numpy_array(a), seed=1)
    y.forward()
    assert all(np.array_equal(y.d[s], a[s]) or np.array_equal(y.d[s], a[s, ::-1]) for s in range(50))
    outcomes = set()
    for seed in range(12):
        whole = F.random_flip(nn.Variable.from_numpy_array(a), axes=(0,), seed=seed)
        whole.forward()
        assert np.array_equal(whole.d, a) or np.array_equal(whole.d, a[::-1]), \
            "a sample axis flips as a whole, as in nnabla"
        outcomes.add(np.array_equal(whole.d, a))
    assert outcomes == {True, False}


def _shift_reference(row, shift, mode, fill):
    n = len(row)
    out = np.empty(n)
    for j in range(n):
        i = j - shift
        if 0 <= i < n:
            out[j] = row[i]
        elif mode == "nearest":
            out[j] = row[min(max(i, 0), n - 1)]
        elif mode == "reflect":
            out[j] = row[-i - 1] if i < 0 else row[2 * n - 1 - i]
        else:
            out[j] = fill
    return out


@pytest.mark.parametrize("mode", ["nearest", "reflect", "constant"])
def test_random_shift_per_sample(mode, rng):
    a = rng.randn(200, 7)
    x = nn.Variable.from_numpy_array(a, need_grad=True)
    y = F.random_shift(x, shifts=(0, 3), border_mode=mode, constant_value=-5.0, seed=4)
    y.forward()
    shifts = []
    for s in range(200):
        found = [k for k in range(-3, 4)
                 if np.array_equal(y.d[s], _shift_reference(a[s], k, mode, -5.0))]
        assert len(found) == 1
        shifts.append(found[0])
    counts = np.bincount(np.array(shifts) + 3, minlength=7)
    assert np.all(np.abs(counts / 200 - 1 / 7) < 5 * np.sqrt((1 / 7) * (6 / 7) / 200))
    gy = rng.randn(*y.shape)
    x.g = 0
    y.backward(gy)
    for s in range(200):
        # The gradient of sum(y * gy) by x: each input element collects the gy of every
        # output that read it; found with the reference applied to unit vectors.
        jac = np.stack([_shift_reference(np.eye(7)[i], shifts[s], mode, 0.0) for i in range(7)])
        np.testing.assert_allclose(x.g[s], jac @ gy[s], rtol=1e-12, atol=1e-12)


def test_random_shift_every_axis_and_defaults(rng):
    a = rng.randn(3, 4, 5)
    same = F.random_shift(nn.Variable.from_numpy_array(a))
    same.forward()
    np.testing.assert_array_equal(same.d, a)
    y = F.random_shift(nn.Variable.from_numpy_array(a), shifts=(0, 1, 2), base_axis=2, seed=5)
    seen = set()
    for _ in range(5):
        y.forward()
        for n in range(3):
            # axis 1 moves once per sample n; axis 2 once per (sample, channel)
            fits = [k1 for k1 in range(-1, 2)
                    if all(any(np.array_equal(y.d[n, c], _shift_reference(
                        a[n, min(max(c - k1, 0), 3)], k2, "nearest", 0)) for k2 in range(-2, 3))
                        for c in range(4))]
            assert len(fits) == 1, "one shift of axis 1 per sample, one of axis 2 per channel"
            seen.add(fits[0])
    assert len(seen) > 1


@pytest.mark.parametrize("fn, options, message", [
    (F.random_crop, dict(shape=(3, 9)), (r"RandomCrop: shape must be at most 3 sizes, each no larger "
                                        r"than the input's last axes \(2, 4, 5\), got \(3, 9\)")),
    (F.random_crop, dict(shape=(1, 2, 4, 5)), r"RandomCrop: shape must be at most 3 sizes"),
    (F.random_crop, dict(base_axis=3), r"RandomCrop: base_axis must lie in \[-3, 3\)"),
    (F.random_flip, dict(axes=(3,)), r"RandomFlip: axes must be an int in \[-3, 3\)"),
    (F.random_flip, dict(axes=(1, 1)), r"RandomFlip: axes \(1, 1\) names an axis more than once"),
    (F.random_shift, dict(shifts=(1, 2)), r"RandomShift: shifts must be 3 ints >= 0"),
    (F.random_shift, dict(shifts=(0, -1, 1)), r"RandomShift: shifts must be 3 ints >= 0"),
    (F.random_shift, dict(border_mode="wrap"), (r"RandomShift: border_mode must be one of nearest, "
                                               r"reflect, constant, got 'wrap'")),
    (F.random_flip, dict(seed=1.5), r"RandomFlip: seed must be an int >= 0, or -1"),
])
def test_geometric_errors(fn, options, message):
    with pytest.raises(DpnbError, match=message):
        fn(nn.Variable((2, 4, 5)), **options)


# -- random_erase -------------------------------------------------------------

def _boxes(mask2d):
    """The bounding rows and columns of the True region of a 2-D mask."""
    rows, cols = np.nonzero(mask2d.any(axis=1))[0], np.nonzero(mask2d.any(axis=0))[0]
    return rows, cols


def test_random_erase_patches_and_gradients():
    x = nn.Variable.from_numpy_array(np.full((3000, 2, 10, 10), -1.0, np.float32), need_grad=True)
    y = F.random_erase(x, prob=0.3, replacements=(2.0, 3.0), seed=3)
    y.forward()
    erased = y.d != -1
    assert np.all((y.d[erased] >= 2) & (y.d[erased] < 3))
    np.testing.assert_array_equal(erased[:, 0], erased[:, 1])  # share=True: one box per sample
    assert not np.array_equal(y.d[:, 0][erased[:, 0]], y.d[:, 1][erased[:, 1]]), \
        "the replacement values are drawn per pixel"
    hit = erased[:, 0].any(axis=(1, 2))
    assert abs(hit.mean() - 0.3) < 5 * np.sqrt(0.21 / 3000)
    for s in np.nonzero(hit)[0][:200]:
        rows, cols = _boxes(erased[s, 0])
        assert erased[s, 0].sum() == len(rows) * len(cols), "a patch is a rectangle"
    x.g = 0
    y.backward(np.ones(y.shape, np.float32))
    np.testing.assert_array_equal(x.g, ~erased)
    loose = F.random_erase(x, prob=0.3, ste_fine_grained=False, seed=3)
    loose.forward()
    x.g = 0
    loose.backward(np.ones(y.shape, np.float32))
    np.testing.assert_array_equal(x.g, 1)


def test_random_erase_patch_geometry_follows_nnabla():
    """Area 0.2 of 10 x 10 at ratio 1: int(sqrt(20)) = 4, so 5 rows from a corner uniform
    in 0..6, clipped at the border; nnabla 1.39 gives the same."""
    x = nn.Variable.from_numpy_array(np.zeros((4000, 1, 10, 10), np.float32))
    y = F.random_erase(x, prob=1.0, area_ratios=(0.2, 0.2), aspect_ratios=(1.0, 1.0),
                       replacements=(1.0, 1.0), seed=5)
    y.forward()
    rows = y.d[:, 0].any(axis=2)
    top, count = rows.argmax(axis=1), rows.sum(axis=1)
    np.testing.assert_array_equal(count, np.where(top == 6, 4, 5))
    freq = np.bincount(top, minlength=7) / 4000
    assert freq.size == 7 and np.all(np.abs(freq - 1 / 7) < 5 * np.sqrt((1 / 7) * (6 / 7) / 4000))


def test_random_erase_options():
    x = nn.Variable.from_numpy_array(np.zeros((500, 3, 8, 8), np.float32))
    per_channel = F.random_erase(x, prob=1.0, share=False, replacements=(1.0, 2.0), seed=1)
    per_channel.forward()
    e = per_channel.d != 0
    assert not np.array_equal(e[:, 0], e[:, 1]), "share=False: a box per channel"
    several = F.random_erase(x, prob=1.0, n=3, area_ratios=(0.02, 0.05), replacements=(1.0, 2.0),
                             seed=1)
    several.forward()
    single = F.random_erase(x, prob=1.0, n=1, area_ratios=(0.02, 0.05), replacements=(1.0, 2.0),
                            seed=1)
    single.forward()
    assert (several.d != 0).sum() > 1.5 * (single.d != 0).sum()
    xl = nn.Variable.from_numpy_array(np.zeros((500, 8, 8, 3), np.float32))
    last = F.random_erase(xl, prob=1.0, channel_last=True, replacements=(1.0, 2.0), seed=1)
    last.forward()
    el = last.d != 0
    np.testing.assert_array_equal(el[..., 0], el[..., 2])
    assert el[..., 0].any(axis=(1, 2)).all()
    flat = F.random_erase(nn.Variable.from_numpy_array(np.zeros((3, 8, 8), np.float32)), prob=1.0,
                          base_axis=0, replacements=(1.0, 2.0))
    flat.forward()
    assert (flat.d != 0).any()
    never = F.random_erase(x, prob=0.0)
    never.forward()
    np.testing.assert_array_equal(never.d, 0)


@pytest.mark.parametrize("options, message", [
    (dict(prob=1.5), r"RandomErase: prob must be in \[0, 1\], got 1.5"),
    (dict(area_ratios=(0.5,)), r"area_ratios must be two numbers \(low, high\), got \(0.5,\)"),
    (dict(area_ratios=(0.5, 0.2)), r"area_ratios must be \(low, high\) with 0 < low <= high"),
    (dict(aspect_ratios=(0, 1)), r"aspect_ratios must be \(low, high\) with 0 < low <= high"),
    (dict(replacements=(3, 1)), r"replacements must be \(low, high\) with low <= high"),
    (dict(n=0), r"n, the most patches per image, must be >= 1, got 0"),
    (dict(base_axis=2), (r"expected images \(C, H, W\) after the sample axes: 3 axes from "
                        r"base_axis=2 on, got shape \(2, 3, 4, 4\)")),
])
def test_random_erase_errors(options, message):
    with pytest.raises(DpnbError, match=message):
        F.random_erase(nn.Variable((2, 3, 4, 4)), **options)


GPU_RANDOM = {
    "rand": lambda x: F.rand(-1, 2, shape=(3, 4), seed=3),
    "randn": lambda x: F.randn(shape=(3, 4), seed=3),
    "randint": lambda x: F.randint(0, 9, shape=(3, 4), seed=3),
    "rand_binomial": lambda x: F.rand_binomial(4, 0.3, shape=(3, 4), seed=3),
    "rand_beta": lambda x: F.rand_beta(shape=(3, 4), seed=3),
    "rand_gamma": lambda x: F.rand_gamma(shape=(3, 4), seed=3),
    "random_choice": lambda x: F.random_choice(x, F.abs(x) + 0.1, shape=(5,), seed=3),
    "random_choice no replacement": lambda x: F.random_choice(x, F.abs(x) + 0.1, shape=(4,),
                                                              replace=False, seed=3),
    "random_crop": lambda x: F.random_crop(x, shape=(3, 3), seed=3),
    "random_flip": lambda x: F.random_flip(x, axes=(2, 3), seed=3),
    "random_shift": lambda x: F.random_shift(x, shifts=(0, 1, 2, 2), border_mode="reflect", seed=3),
    "random_shift constant": lambda x: F.random_shift(x, shifts=(0, 0, 2, 2), border_mode="constant",
                                                      constant_value=0.5, seed=3),
    "random_erase": lambda x: F.random_erase(x, prob=0.8, n=2, share=False, seed=3),
    "random_erase channel_last": lambda x: F.random_erase(x, prob=0.8, channel_last=True, seed=3),
}


@pytest.mark.parametrize("name", GPU_RANDOM)
def test_random_functions_on_gpu_match_cpu_with_the_same_seed(name, rng, gpu):
    a = rng.rand(3, 4, 5, 6).astype(np.float32)
    results = []
    for ctx in (nn.Context(), get_extension_context("cudnn")):
        with nn.context_scope(ctx):
            x = nn.Variable.from_numpy_array(a, need_grad=True)
            y = GPU_RANDOM[name](x)
            y.forward()
            arrays = [to_module(y.d, np)]
            if y.need_grad:
                x.g = 0
                y.backward(np.arange(y.size, dtype=np.float32).reshape(y.shape))
                arrays.append(to_module(x.g, np))
            results.append(arrays)
    assert len(results[0]) == len(results[1])
    for cpu, gpu in zip(*results):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("build", [lambda **kw: F.rand(**kw), lambda **kw: F.random_choice(
    nn.Variable((3,)), nn.Variable((3,)), **kw), lambda **kw: F.random_erase(nn.Variable((1, 1, 4, 4)), **kw)])
def test_random_output_arguments_only_take_their_defaults(build):
    with pytest.raises(DpnbError, match=r"n_outputs and outputs hand in output variables"):
        build(n_outputs=2)
