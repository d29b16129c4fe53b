"""Initializers: values drawn as nnabla draws them, the Glorot/He formulas, and
the default generator that ``nn.seed`` controls."""
import numpy as np
import pytest

import dpnb as nn
import dpnb.initializer as I
from dpnb.errors import DpnbError


def test_uniform_initializer_draws_from_its_rng():
    init = I.UniformInitializer((-0.5, 2.0), rng=np.random.RandomState(3))
    value = init((4, 5))
    np.testing.assert_array_equal(value, np.random.RandomState(3).uniform(-0.5, 2.0, size=(4, 5)))
    assert value.shape == (4, 5) and value.dtype == np.float64
    assert value.min() >= -0.5 and value.max() < 2.0


def test_uniform_initializer_takes_one_number_as_a_symmetric_limit():
    init = I.UniformInitializer(0.25, rng=np.random.RandomState(1))
    assert init.lim == (-0.25, 0.25)
    np.testing.assert_array_equal(init((3,)),
                                  np.random.RandomState(1).uniform(-0.25, 0.25, size=(3,)))
    assert I.UniformInitializer().lim == (-1.0, 1.0)


@pytest.mark.parametrize("lim", [(1.0, -1.0), (0.0, 1.0, 2.0), "wide", (np.nan, 1.0)])
def test_uniform_initializer_rejects_bad_limits(lim):
    with pytest.raises(DpnbError, match="expects lim as \\(low, high\\) with low <= high"):
        I.UniformInitializer(lim)


def test_normal_initializer_scales_standard_normals():
    value = I.NormalInitializer(0.1, rng=np.random.RandomState(7))((2, 3, 4))
    np.testing.assert_allclose(value, np.random.RandomState(7).randn(2, 3, 4) * 0.1, rtol=0)
    assert value.shape == (2, 3, 4) and value.dtype == np.float64


def test_random_initializers_accept_a_numpy_generator():
    value = I.NormalInitializer(2.0, rng=np.random.default_rng(0))((3,))
    np.testing.assert_array_equal(value, np.random.default_rng(0).standard_normal(3) * 2.0)
    value = I.UniformInitializer((0, 1), rng=np.random.default_rng(0))((3,))
    np.testing.assert_array_equal(value, np.random.default_rng(0).uniform(0, 1, size=3))


def test_constant_initializer():
    value = I.ConstantInitializer(0.5)((2, 3))
    np.testing.assert_array_equal(value, np.full((2, 3), 0.5))
    assert value.dtype == np.float64
    np.testing.assert_array_equal(I.ConstantInitializer()((4,)), np.zeros(4))


@pytest.mark.parametrize("cls", [I.UniformInitializer, I.NormalInitializer])
def test_default_rng_is_the_seeded_process_generator_looked_up_at_call_time(cls):
    init = cls()  # created before seeding: the generator is looked up when called
    nn.seed(11)
    first = init((3, 2))
    nn.seed(11)
    np.testing.assert_array_equal(init((3, 2)), first)
    nn.seed(12)
    assert not np.array_equal(init((3, 2)), first)
    np.testing.assert_array_equal(cls(rng=np.random.RandomState(11))((3, 2)), first)


def test_glorot_and_he_formulas():
    # nnabla: K (product of kernel sizes) times the sum of the maps for Glorot.
    n, m, kernel = 16, 8, (3, 3)
    b = np.sqrt(6 / (9 * (16 + 8)))
    assert I.calc_uniform_lim_glorot(n, m, kernel) == pytest.approx((-b, b))
    assert I.calc_normal_std_glorot(n, m, kernel) == pytest.approx(np.sqrt(2 / (9 * (16 + 8))))
    assert I.calc_normal_std_he_forward(n, m, kernel) == pytest.approx(np.sqrt(2 / (16 * 9)))
    assert I.calc_normal_std_he_backward(n, m, kernel) == pytest.approx(np.sqrt(2 / (8 * 9)))
    assert I.calc_uniform_lim_glorot(10, 5) == pytest.approx((-0.6324555, 0.6324555))
    assert I.calc_normal_std_he_forward(8, 3) == pytest.approx(0.5)
    low, high = I.calc_uniform_lim_glorot(4, 2, ())
    assert type(low) is type(high) is np.float64 and high == -low == 1.0
    assert type(I.calc_normal_std_glorot(4, 2)) is np.float64


def test_seed_tutorial_usage_creates_a_glorot_uniform_parameter():
    C = 16
    rng = np.random.RandomState(0)
    w_init = I.UniformInitializer(I.calc_uniform_lim_glorot(C, C / 2, kernel=(1, 1)), rng=rng)
    w = nn.get_parameter_or_create("W", (C // 2, C, 1, 1), w_init)
    low, high = I.calc_uniform_lim_glorot(C, C / 2)
    expected = np.random.RandomState(0).uniform(low, high, size=(C // 2, C, 1, 1))
    assert w.d.dtype == np.float32
    np.testing.assert_allclose(w.d, expected.astype(np.float32), rtol=0)
    assert np.abs(w.d).max() <= high


@pytest.mark.parametrize("gain, shape", [(1.0, (3, 3)), (1.5, (2, 5)), (2.0, (5, 2)),
                                         (1.0, (4, 2, 3, 3)), (0.5, (6,)), (1.0, (3, 7, 2))])
def test_orthogonal_initializer_gives_orthonormal_rows_or_columns_times_gain(gain, shape):
    value = I.OrthogonalInitializer(gain, rng=np.random.RandomState(4))(shape)
    assert value.shape == shape and value.dtype == np.float32
    m = value.reshape(shape[0], -1).astype(np.float64)
    gram = m @ m.T if m.shape[0] <= m.shape[1] else m.T @ m
    np.testing.assert_allclose(gram, gain ** 2 * np.eye(len(gram)), atol=1e-5)


def test_orthogonal_initializer_is_random_but_seeded():
    first = I.OrthogonalInitializer(rng=np.random.RandomState(1))((4, 4))
    np.testing.assert_array_equal(I.OrthogonalInitializer(rng=np.random.RandomState(1))((4, 4)),
                                  first)
    assert not np.allclose(I.OrthogonalInitializer(rng=np.random.RandomState(2))((4, 4)), first)
    init = I.OrthogonalInitializer()  # the default generator, which nn.seed decides
    nn.seed(5)
    again = init((3, 3))
    nn.seed(5)
    np.testing.assert_array_equal(init((3, 3)), again)
    # Haar-distributed: a column's first entry is as often negative as positive.
    rng = np.random.RandomState(0)
    signs = [np.sign(I.OrthogonalInitializer(rng=rng)((3, 3))[0, 0]) for _ in range(400)]
    assert 150 < sum(s > 0 for s in signs) < 250


def test_uniform_int_initializer_draws_integers_in_its_half_open_range():
    value = I.UniformIntInitializer((-3, 4), rng=np.random.RandomState(0))((2000,))
    assert value.dtype == np.int64
    assert value.min() == -3 and value.max() == 3
    assert set(np.unique(value)) == set(range(-3, 4))
    assert I.UniformIntInitializer().lim == (0, 10)
    np.testing.assert_array_equal(I.UniformIntInitializer(rng=np.random.default_rng(0))((5,)),
                                  np.random.default_rng(0).integers(0, 10, size=5))
    init = I.UniformIntInitializer((0, 100))
    nn.seed(3)
    first = init((6,))
    nn.seed(3)
    np.testing.assert_array_equal(init((6,)), first)


@pytest.mark.parametrize("lim", [(3, 3), (4, 1), 5, (0.5, 3), (0, 1, 2), (True, 3), "ab"])
def test_uniform_int_initializer_rejects_bad_limits(lim):
    with pytest.raises(DpnbError, match=r"expects lim as two integers \(low, high\) with low < "
                                        r"high"):
        I.UniformIntInitializer(lim)


def test_range_initializer_counts_along_the_last_axis():
    np.testing.assert_array_equal(I.RangeInitializer(1, 2)((2, 3)), [[1, 3, 5], [1, 3, 5]])
    assert I.RangeInitializer()((4,)).dtype == np.int64
    assert I.RangeInitializer(0.5)((4,)).dtype == np.float64
    with pytest.raises(DpnbError, match=r"needs a shape with at least one axis; got .* \(\)"):
        I.RangeInitializer()(())
    with pytest.raises(DpnbError, match="expects step to be a number, got 'x'"):
        I.RangeInitializer(0, "x")


def test_weight_normalization_scale_keeps_the_weight_s_magnitude():
    w = nn.Variable.from_numpy_array(np.arange(24.0).reshape(2, 3, 4) - 5)
    value = I.WeightNormalizationScaleInitializer(w, dim=1, eps=0.0)((3,))
    np.testing.assert_allclose(value, np.sqrt((w.d ** 2).sum(axis=(0, 2))), rtol=1e-12)
    assert value.dtype == np.float64  # the weight's
    np.testing.assert_allclose(I.WeightNormalizationScaleInitializer(w, 1)((1, 3, 1)),
                               value.reshape(1, 3, 1))
    g = nn.get_parameter_or_create("g", (2,), I.WeightNormalizationScaleInitializer(w))
    np.testing.assert_allclose(g.d, np.sqrt((w.d ** 2).sum(axis=(1, 2)) + 1e-12), rtol=1e-6)


def test_weight_normalization_scale_rejects_bad_input():
    w = nn.Variable.from_numpy_array(np.ones((2, 3)))
    for dim in (-1, 2, 1.0, True):
        with pytest.raises(DpnbError, match=r"expects dim in \[0, 2\) for a weight of shape "
                                            r"\(2, 3\)"):
            I.WeightNormalizationScaleInitializer(w, dim=dim)
    with pytest.raises(DpnbError, match="expects w to be the weight nn.Variable, got ndarray"):
        I.WeightNormalizationScaleInitializer(np.ones((2, 3)))
    with pytest.raises(DpnbError, match=r"3 values, but shape \(2,\) was asked for; create the "
                                        r"scale with shape \(3,\)"):
        I.WeightNormalizationScaleInitializer(w, dim=1)((2,))


def test_orthogonal_initializer_rejects_bad_input():
    with pytest.raises(DpnbError, match="expects gain to be a number, got 'big'"):
        I.OrthogonalInitializer("big")
    with pytest.raises(DpnbError, match=r"needs a shape with at least one axis"):
        I.OrthogonalInitializer()(())
