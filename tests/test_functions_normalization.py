import numpy as np
import pytest
from gradcheck import check_grad

import dpnb as nn
import dpnb.functions as F
import dpnb.parametric_functions as PF
from dpnb.context import to_module
from dpnb.errors import DpnbError
from dpnb.ext_utils import get_extension_context


@pytest.fixture(autouse=True)
def backend(kernel_backend):
    """Every test here twice: batch normalization through the compiled kernels and through
    NumPy alone (as without Numba)."""
    return kernel_backend


def stat_shape(x_shape, axes):
    return tuple(s if a in axes else 1 for a, s in enumerate(x_shape))


def reference_batch_norm(x, beta, gamma, mean, variance, axes, decay_rate=0.9, eps=1e-5):
    """Explicit loops over the channels: the output and the updated running statistics."""
    shape = stat_shape(x.shape, axes)
    y = np.empty_like(x)
    new_mean, new_var = mean.copy(), variance.copy()
    for index in np.ndindex(*shape):
        select = tuple(i if s != 1 else slice(None) for i, s in zip(index, shape))
        values = x[select]
        m, v = values.mean(), values.var()
        y[select] = (values - m) / np.sqrt(v + eps) * gamma[index] + beta[index]
        new_mean[index] = decay_rate * mean[index] + (1 - decay_rate) * m
        unbiased = v * values.size / (values.size - 1)
        new_var[index] = decay_rate * variance[index] + (1 - decay_rate) * unbiased
    return y, new_mean, new_var


def make_inputs(rng, x_shape, axes, dtype=np.float64):
    shape = stat_shape(x_shape, axes)
    return [(rng.randn(*x_shape) * 2 + 1).astype(dtype), rng.randn(*shape).astype(dtype),
            (rng.rand(*shape) + 0.5).astype(dtype), rng.randn(*shape).astype(dtype),
            (rng.rand(*shape) + 0.5).astype(dtype)]


@pytest.mark.parametrize("x_shape, axes", [((4, 3, 2, 2), [1]), ((5, 3), [1]), ((2, 3, 4), [2]),
                                           ((3, 2, 4, 2), [1, 3]), ((4, 3, 2), [-2])])
def test_batch_statistics_and_running_update(rng, x_shape, axes):
    arrays = make_inputs(rng, x_shape, [a % len(x_shape) for a in axes], np.float32)
    vs = [nn.Variable.from_numpy_array(a) for a in arrays]
    y = F.batch_normalization(*vs, axes=axes, decay_rate=0.8, eps=1e-3)
    y.forward()
    expected, new_mean, new_var = reference_batch_norm(
        *[a.astype(np.float64) for a in arrays], [a % len(x_shape) for a in axes], 0.8, 1e-3)
    assert y.d.dtype == np.float32
    np.testing.assert_allclose(y.d, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(vs[3].d, new_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(vs[4].d, new_var, rtol=1e-5, atol=1e-6)


def test_inference_uses_running_statistics(rng):
    x, beta, gamma, mean, var = make_inputs(rng, (4, 3, 2, 2), [1])
    vs = [nn.Variable.from_numpy_array(a) for a in (x, beta, gamma, mean, var)]
    y = F.batch_normalization(*vs, batch_stat=False)
    y.forward()
    np.testing.assert_allclose(y.d, (x - mean) / np.sqrt(var + 1e-5) * gamma + beta, rtol=1e-12)
    np.testing.assert_array_equal(vs[3].d, mean)
    np.testing.assert_array_equal(vs[4].d, var)


@pytest.mark.parametrize("x_shape, axes",
                         [((4, 3, 2, 2), [1]), ((3, 2, 3), [2]), ((3, 2, 2, 2), [1, 2]),
                          ((3, 2, 2, 2), [1, 3])])
def test_batch_stat_gradients(rng, x_shape, axes):
    check_grad(lambda x, b, g, m, v: F.batch_normalization(x, b, g, m, v, axes=axes),
               make_inputs(rng, x_shape, axes), need_grad=[True, True, True, False, False])


def test_inference_gradients(rng):
    check_grad(lambda x, b, g, m, v: F.batch_normalization(x, b, g, m, v, batch_stat=False),
               make_inputs(rng, (3, 2, 2, 2), [1]), need_grad=[True, True, True, False, False])


@pytest.mark.parametrize("batch_stat", [True, False])
def test_fused_batch_normalization_is_one_function_with_numpys_gradients(rng, batch_stat):
    inputs = make_inputs(rng, (4, 3, 2, 2), [1])
    z = rng.randn(4, 3, 2, 2)
    y = check_grad(lambda x, b, g, m, v, z: F.fused_batch_normalization(
        x, b, g, m, v, z, batch_stat=batch_stat), [*inputs, z],
        need_grad=[True, True, True, False, False, True])
    assert y.parent.name == "FusedBatchNormalization" and len(y.parent.inputs) == 6
    x, beta, gamma, mean, var = inputs
    if batch_stat:
        mean, var = x.mean(axis=(0, 2, 3), keepdims=True), x.var(axis=(0, 2, 3), keepdims=True)
    bn = (x - mean) / np.sqrt(var + 1e-5) * gamma + beta
    np.testing.assert_allclose(y.d, np.maximum(bn + z, 0), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("batch_stat", [True, False])
def test_without_beta_and_gamma(rng, batch_stat):
    x, beta, gamma, mean, var = make_inputs(rng, (4, 3, 2), [1])
    y = check_grad(
        lambda x, g, m, v: F.batch_normalization(x, None, g, m, v, batch_stat=batch_stat),
        [x, gamma, mean, var], need_grad=[True, True, False, False])
    full = F.batch_normalization(*[nn.Variable.from_numpy_array(a) for a in
                                   (x, np.zeros_like(beta), gamma, mean, var)],
                                 batch_stat=batch_stat)
    full.forward()
    np.testing.assert_allclose(y.d, full.d, rtol=1e-12)
    check_grad(lambda x, b, m, v: F.batch_normalization(x, b, None, m, v, batch_stat=batch_stat),
               [x, beta, mean, var], need_grad=[True, True, False, False])


def test_without_running_statistics(rng):
    x, beta, gamma, _, _ = make_inputs(rng, (4, 3, 2), [1])
    y = check_grad(lambda x, b, g: F.batch_normalization(x, b, g, None, None), [x, beta, gamma])
    expected, _, _ = reference_batch_norm(x, beta, gamma, 0 * beta, 0 * beta + 1, [1])
    np.testing.assert_allclose(y.d, expected, rtol=1e-10)


def test_output_stat(rng):
    x, beta, gamma, mean, var = make_inputs(rng, (4, 3, 2), [1])
    vs = [nn.Variable.from_numpy_array(a) for a in (x, beta, gamma, mean, var)]
    y, m, v = F.batch_normalization(*vs, output_stat=True)
    y.forward()
    m.forward()
    np.testing.assert_allclose(m.d, x.mean(axis=(0, 2), keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(v.d, x.var(axis=(0, 2), keepdims=True), rtol=1e-12)

    def build(x, b, g, m, v):
        y, bm, bv = F.batch_normalization(x, b, g, m, v, output_stat=True)
        return F.add2(F.add2(y, bm), bv)
    check_grad(build, [x, beta, gamma, mean, var], need_grad=[True, True, True, False, False])


def test_running_statistics_get_no_gradient(rng):
    vs = [nn.Variable.from_numpy_array(a, need_grad=True) for a in make_inputs(rng, (4, 3), [1])]
    y = F.batch_normalization(*vs)
    y.forward()
    for v in vs:
        v.g = 0
    y.backward(np.ones((4, 3)))
    np.testing.assert_array_equal(vs[3].g, 0)
    np.testing.assert_array_equal(vs[4].g, 0)
    np.testing.assert_allclose(vs[1].g, 4 * np.ones((1, 3)))


def test_float32_gradients_stay_float32(rng):
    vs = [nn.Variable.from_numpy_array(a, need_grad=True)
          for a in make_inputs(rng, (4, 3, 2, 2), [1], np.float32)]
    y = F.batch_normalization(*vs)
    y.forward()
    y.backward(np.ones(y.shape, np.float32))
    assert all(v.g.dtype == np.float32 for v in vs[:3])


def test_large_mean_float32_matches_float64(rng):
    """Statistics from centred values: a mean 1000 times the spread costs no accuracy
    beyond that of the float32 mean (E[x^2] - mean^2 would lose the variance)."""
    x = (1000 + rng.randn(16, 3, 8, 8)).astype(np.float32)
    beta, gamma = rng.randn(1, 3, 1, 1), rng.rand(1, 3, 1, 1) + 0.5
    gy = rng.randn(*x.shape)
    results = []
    for dtype in (np.float32, np.float64):
        vs = [nn.Variable.from_numpy_array(a.astype(dtype), need_grad=True)
              for a in (x, beta, gamma)]
        y = F.batch_normalization(vs[0], vs[1], vs[2], None, None)
        y.forward()
        y.backward(gy.astype(dtype))
        results.append([y.d] + [v.g for v in vs])
    (y32, gx32, gb32, gg32), (y64, gx64, gb64, gg64) = results
    np.testing.assert_allclose(y32, y64, atol=5e-4)
    np.testing.assert_allclose(gx32, gx64, atol=1e-4)
    np.testing.assert_allclose(gb32, gb64, rtol=1e-5)
    np.testing.assert_allclose(gg32, gg64, rtol=1e-3, atol=1e-3)


def test_gradients_do_not_alias_the_workspace(rng):
    """x - mean lives in the buffer that convolutions reuse for their columns."""
    arrays = make_inputs(rng, (4, 3, 5, 5), [1], np.float32)[:3]
    y = F.batch_normalization(*(nn.Variable.from_numpy_array(a) for a in arrays), None, None)
    y.forward()
    gy = rng.randn(*y.shape).astype(np.float32)
    grads = y.parent.backward_arrays(np, arrays, None, [gy], [True] * 3)
    saved = [g.copy() for g in grads]
    x, w = (nn.Variable.from_numpy_array(rng.randn(*shape).astype(np.float32), need_grad=True)
            for shape in ((4, 3, 5, 5), (2, 3, 3, 3)))
    conv = F.convolution(x, w, pad=(1, 1))
    conv.forward()
    conv.backward(rng.randn(*conv.shape).astype(np.float32))
    for g, before in zip(grads, saved):
        np.testing.assert_array_equal(g, before)


def test_batch_normalization_errors():
    x = nn.Variable((4, 3, 2, 2))
    param = nn.Variable((1, 3, 1, 1))
    assert len(F.batch_normalization(x, param, param, param, param, output_stat=True,
                                     n_outputs=3)) == 3
    with pytest.raises(DpnbError, match=r"n_outputs=3 disagrees with output_stat=False"):
        F.batch_normalization(x, param, param, param, param, n_outputs=3)
    with pytest.raises(DpnbError, match=r"gamma must have shape \(1, 3, 1, 1\)"):
        F.batch_normalization(x, param, nn.Variable((3,)), param, param)
    with pytest.raises(DpnbError, match="both must be given"):
        F.batch_normalization(x, param, param, None, param, batch_stat=False)
    with pytest.raises(DpnbError, match="output_stat=True needs batch_stat=True"):
        F.batch_normalization(x, param, param, param, param, batch_stat=False, output_stat=True)
    with pytest.raises(DpnbError, match="must be a leaf variable"):
        F.batch_normalization(x, param, param, F.add2(param, param), param)
    with pytest.raises(DpnbError, match=r"axes must be an int in \[-4, 4\)"):
        F.batch_normalization(x, param, param, param, param, axes=[4])


@pytest.mark.parametrize("batch_stat", [True, False])
def test_batch_normalization_gpu_matches_cpu(rng, batch_stat, gpu):
    arrays = make_inputs(rng, (8, 3, 4, 4), [1], np.float32)
    gy = rng.randn(8, 3, 4, 4).astype(np.float32)
    results = []
    for ctx in (nn.Context(), get_extension_context("cudnn")):
        with nn.context_scope(ctx):
            vs = [nn.Variable.from_numpy_array(a, need_grad=i < 3) for i, a in enumerate(arrays)]
            y = F.batch_normalization(*vs, batch_stat=batch_stat)
            y.forward()
            y.backward(gy)
            arrays_out = [y.d] + [v.g for v in vs[:3]] + [vs[3].d, vs[4].d]
            results.append([to_module(a, np) for a in arrays_out])
    for cpu, gpu in zip(*results):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-4)


def test_layer_normalization_errors():
    x = nn.Variable((2, 3, 4))
    with pytest.raises(DpnbError, match=r"LayerNormalization: beta must have shape \(1, 3, 4\) "
                                        r"for an input of shape \(2, 3, 4\), got \(3, 4\)"):
        F.layer_normalization(x, nn.Variable((3, 4)), None)
    with pytest.raises(DpnbError, match=r"gamma must have shape \(2, 1, 4\)"):
        F.layer_normalization(x, None, nn.Variable((1, 3, 4)), batch_axis=1)
    with pytest.raises(DpnbError, match=r"batch_axis must be an int in \[-3, 3\) for an input "
                                        r"of 3 dimensions, got 3"):
        F.layer_normalization(x, None, None, batch_axis=3)
    with pytest.raises(DpnbError, match="batch_axis must be an int or a list of ints"):
        F.layer_normalization(x, None, None, batch_axis=None)
    with pytest.raises(DpnbError, match="x must be a float array, got dtype int"):
        F.layer_normalization(nn.Variable.from_numpy_array(np.arange(6).reshape(2, 3)),
                              None, None)


def test_pf_layer_normalization_parameters():
    nn.clear_parameters()
    x = nn.Variable((2, 3, 4))
    PF.layer_normalization(x, batch_axis=[0, 2])
    params = nn.get_parameters(grad_only=False)
    assert {k: v.shape for k, v in params.items()} == {"layer_normalization/beta": (1, 3, 1),
                                                       "layer_normalization/gamma": (1, 3, 1)}
    np.testing.assert_array_equal(params["layer_normalization/beta"].d, 0)
    np.testing.assert_array_equal(params["layer_normalization/gamma"].d, 1)
    nn.clear_parameters()
    PF.layer_normalization(x, param_init={"gamma": np.full((1, 3, 4), 2.0)}, no_bias=True,
                           name="ln")
    params = nn.get_parameters(grad_only=False)
    assert list(params) == ["ln/layer_normalization/gamma"]
    np.testing.assert_array_equal(params["ln/layer_normalization/gamma"].d, 2)
    with pytest.raises(DpnbError, match=r"param_init keys must be among \['beta', 'gamma'\], "
                                        r"got \['mean'\]"):
        PF.layer_normalization(x, param_init={"mean": np.zeros((1, 3, 4))}, name="other")
    nn.clear_parameters()


def test_instance_and_group_normalization_errors():
    x = nn.Variable((2, 4, 3))
    with pytest.raises(DpnbError, match=r"InstanceNormalization: beta must have shape \(1, 4, 1\)"
                                        r" for an input of shape \(2, 4, 3\), got \(1, 4, 3\)"):
        F.instance_normalization(x, nn.Variable((1, 4, 3)), None)
    with pytest.raises(DpnbError, match="channel_axis 0 is also in batch_axis 0"):
        F.instance_normalization(x, None, None, channel_axis=0)
    with pytest.raises(DpnbError, match=r"channel_axis must be an int in \[-3, 3\)"):
        F.instance_normalization(x, None, None, channel_axis=3)
    with pytest.raises(DpnbError, match="num_groups must be a positive int dividing the 4 "
                                        "channels on axis 1, got 3"):
        F.group_normalization(x, None, None, 3)
    with pytest.raises(DpnbError, match=r"gamma must have shape \(1, 4, 1\)"):
        F.group_normalization(x, None, nn.Variable((1, 2, 1)), 2)
    with pytest.raises(DpnbError, match="batch_axis 1 must come before channel_axis 0"):
        F.group_normalization(x, None, None, 2, channel_axis=0, batch_axis=1)


def test_pf_instance_and_group_normalization_parameters():
    nn.clear_parameters()
    x = nn.Variable((2, 4, 3))
    PF.instance_normalization(x, channel_axis=2)
    PF.group_normalization(x, 2, name="g")
    assert {k: v.shape for k, v in nn.get_parameters(grad_only=False).items()} == {
        "instance_normalization/beta": (1, 1, 3), "instance_normalization/gamma": (1, 1, 3),
        "g/group_normalization/beta": (1, 4, 1), "g/group_normalization/gamma": (1, 4, 1)}
    nn.clear_parameters()


def test_tensor_norm_and_weight_normalization_errors():
    x = nn.Variable((2, 3))
    with pytest.raises(DpnbError, match=r"TensorNormalization: axes must name at least one axis"):
        F.tensor_normalization(x, [])
    with pytest.raises(DpnbError, match=r"gamma must have shape \(1, 3\) .* got \(3,\)"):
        F.tensor_normalization(x, 1, gamma=nn.Variable((3,)))
    with pytest.raises(DpnbError, match=r"channel_axis must be an int in \[-2, 2\)"):
        F.weight_standardization(x, channel_axis=2)
    with pytest.raises(DpnbError, match="NormNormalization: p must be a number >= 1 .* got 0.5"):
        F.norm_normalization(x, p=0.5)
    with pytest.raises(DpnbError, match=r"axes must be an int in \[-2, 2\)"):
        F.norm_normalization(x, axes=[2])
    with pytest.raises(DpnbError, match=r"WeightNormalization: g must have shape \(2,\) .* "
                                        r"got \(3,\)"):
        F.weight_normalization(x, nn.Variable((3,)))
    with pytest.raises(DpnbError, match=r"dim must be an int in \[-2, 2\)"):
        F.weight_normalization(x, nn.Variable((3,)), dim=5)


def test_norm_normalization_adds_eps_before_the_root():
    x = np.array([[0.01, -0.02], [0.5, 0.3]])
    y = F.norm_normalization(nn.Variable.from_numpy_array(x), 3, 1, eps=1.0)
    y.forward()
    np.testing.assert_allclose(y.d, x / ((np.abs(x) ** 3).sum(1, keepdims=True) + 1) ** (1 / 3))


def test_pf_weight_normalization_starts_at_the_weight(rng):
    nn.clear_parameters()
    w = nn.Variable.from_numpy_array(rng.randn(4, 3).astype(np.float32))
    y = PF.weight_normalization(w, dim=1)
    params = nn.get_parameters(grad_only=False)
    assert {k: v.shape for k, v in params.items()} == {"wn/g": (3,)}
    np.testing.assert_allclose(params["wn/g"].d, np.sqrt((w.d.astype(np.float64) ** 2).sum(0)),
                               rtol=1e-6)
    y.forward()
    np.testing.assert_allclose(y.d, w.d, rtol=1e-5)
    nn.clear_parameters()
    PF.weight_normalization(w, g_init=np.full(4, 3.0), name="a")
    np.testing.assert_array_equal(nn.get_parameters()["a/wn/g"].d, 3)
    nn.clear_parameters()


def test_mean_subtraction_errors():
    x = nn.Variable((4, 3))
    with pytest.raises(DpnbError, match=r"MeanSubtraction: mean must have shape \(3,\) .* "
                                        r"got \(2,\)"):
        F.mean_subtraction(x, nn.Variable((2,)), nn.Variable((1,)))
    with pytest.raises(DpnbError, match=r"t \(the count of batches seen\) must have one element"):
        F.mean_subtraction(x, nn.Variable((3,)), nn.Variable((2,)))
    with pytest.raises(DpnbError, match="must be leaf variables"):
        F.mean_subtraction(x, F.identity(nn.Variable((3,))), nn.Variable((1,)))
    with pytest.raises(DpnbError, match=r"base_axis must lie in \[-2, 2\)"):
        F.mean_subtraction(x, nn.Variable((3,)), nn.Variable((1,)), base_axis=2)


def test_pf_mean_subtraction_running_mean_over_steps(rng):
    nn.clear_parameters()
    x = nn.Variable((4, 2))
    y = PF.mean_subtraction(x)
    params = nn.get_parameters(grad_only=False)
    assert {k: (v.shape, v.need_grad) for k, v in params.items()} == {
        "mean_subtraction/mean": ((2,), False), "mean_subtraction/t": ((1,), False)}
    batches = [rng.randn(4, 2).astype(np.float32) for _ in range(3)]
    for batch in batches:
        x.d = batch
        y.forward()
    np.testing.assert_allclose(params["mean_subtraction/mean"].d, np.mean(batches, axis=(0, 1)),
                               rtol=1e-5)
    assert params["mean_subtraction/t"].d[0] == 3
    np.testing.assert_allclose(y.d, batches[-1] - np.mean(batches, axis=(0, 1)), rtol=1e-5)
    nn.clear_parameters()


def test_fused_batch_normalization_errors():
    x, param = nn.Variable((4, 3)), nn.Variable((1, 3))
    with pytest.raises(DpnbError, match='nonlinearity must be "relu" .* got \'sigmoid\''):
        F.fused_batch_normalization(x, param, param, param, param, nonlinearity="sigmoid")
    with pytest.raises(DpnbError, match=r"z must be an nn.Variable of x's shape \(4, 3\) .* "
                                        r"got \(1, 3\)"):
        F.fused_batch_normalization(x, param, param, param, param, z=nn.Variable((1, 3)))
    with pytest.raises(DpnbError, match="output_stat=True needs batch_stat=True"):
        F.fused_batch_normalization(x, param, param, param, param, batch_stat=False,
                                    output_stat=True)


def test_spectral_norm_errors():
    w = nn.Variable((3, 4))
    with pytest.raises(DpnbError, match=r"SpectralNorm: u must have shape \(3,\) .* got \(4,\)"):
        F.spectral_norm(w, nn.Variable((4,)))
    with pytest.raises(DpnbError, match=r"dim must be an int in \[0, 2\) .* got -1"):
        F.spectral_norm(w, nn.Variable((4,)), dim=-1)
    with pytest.raises(DpnbError, match="itr .* must be an int >= 1, got 0"):
        F.spectral_norm(w, nn.Variable((3,)), itr=0)
    with pytest.raises(DpnbError, match="eps must be > 0, got 0.0"):
        F.spectral_norm(w, nn.Variable((3,)), eps=0.0)
    with pytest.raises(DpnbError, match="must be a leaf variable"):
        F.spectral_norm(w, F.identity(nn.Variable((3,))))
    with pytest.raises(DpnbError, match=r"PF.spectral_norm: dim must be an int in \[0, 2\)"):
        PF.spectral_norm(w, dim=2)


def test_spectral_norm_test_mode_keeps_u_and_has_the_training_gradient(rng):
    """nnabla 1.39's backward gives NaN with test=True; dpnb's equals the training one."""
    w_data, u_data = rng.randn(4, 3), rng.randn(4)
    gy = rng.randn(4, 3)
    grads = []
    for test in (False, True):
        w = nn.Variable.from_numpy_array(w_data, need_grad=True)
        u = nn.Variable.from_numpy_array(u_data.copy())
        y = F.spectral_norm(w, u, itr=2, test=test)
        y.forward()
        y.backward(gy)
        grads.append(w.g.copy())
        assert np.array_equal(u.d, u_data) == test
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-12)
    sigma = np.linalg.svd(w_data, compute_uv=False)[0]
    w = nn.Variable.from_numpy_array(w_data)
    y = F.spectral_norm(w, nn.Variable.from_numpy_array(u_data.copy()), itr=100)
    y.forward()
    np.testing.assert_allclose(y.d, w_data / sigma, rtol=1e-10)


def test_spectral_norm_nn_grad_follows_the_u_each_forward_started_from(rng):
    """nn.grad's gradient is backward's at every forward, its power iteration starting
    from the u that forward started from, though forward has updated u by then."""
    w_data, u_data, gy = rng.randn(4, 3), rng.randn(4), rng.randn(4, 3)
    w = nn.Variable.from_numpy_array(w_data, need_grad=True)
    u = nn.Variable.from_numpy_array(u_data)
    y = F.spectral_norm(w, u, itr=1)
    (gw,) = nn.grad([y], [w], grad_outputs=[gy])
    for _ in range(2):  # forwarding gw forwards y; the second starts from the updated u
        gw.forward()
        w.grad.zero()
        y.backward(gy)
        np.testing.assert_allclose(gw.d, w.g, rtol=1e-12)
    for _ in range(2):
        v = w_data.T @ u_data
        v /= np.linalg.norm(v)
        u_data = w_data @ v / np.linalg.norm(w_data @ v)
    np.testing.assert_allclose(u.d, u_data, rtol=1e-12)


def test_pf_spectral_norm_parameter():
    nn.clear_parameters()
    PF.spectral_norm(nn.Variable((2, 5, 3)), dim=1)
    params = nn.get_parameters(grad_only=False)
    assert {k: (v.shape, v.need_grad) for k, v in params.items()} == {
        "spectral-norm/u": ((5,), False)}
    assert nn.get_parameters() == {}
    nn.clear_parameters()


def test_batch_stat_false_without_running_statistics_is_a_value_error():
    """nnabla raises ValueError here (its test_batch_normalization.py expects one)."""
    x = nn.Variable((2, 3, 4))
    with pytest.raises(ValueError, match="batch_stat=False normalizes with the running mean"):
        F.batch_normalization(x, None, None, None, None, batch_stat=False)


def test_batch_normalization_in_out_adapter_flattens_the_kept_axes_last(rng):
    """nnabla's adapter: reduced axes first, the kept ones (1 and 3) flattened into the last
    axis; inv restores the input's layout; a one-axis batch normalization over the adapted
    input normalizes over the reduced axes of the original."""
    x = nn.Variable.from_numpy_array(rng.randn(2, 3, 4, 5))
    adapter = F.BatchNormalizationInOutAdapter(4, [1, 3])
    y = adapter(x)
    y.forward()
    np.testing.assert_array_equal(y.d, x.d.transpose(0, 2, 1, 3).reshape(2, 4, 15))
    assert adapter.transposed_shape == (2, 4, 3, 5)
    back = adapter.inv(y)
    back.forward()
    np.testing.assert_array_equal(back.d, x.d)

    normalized = adapter.inv(F.batch_normalization(y, None, None, None, None, axes=[2]))
    normalized.forward()
    mean = x.d.mean(axis=(0, 2), keepdims=True)
    var = x.d.var(axis=(0, 2), keepdims=True)
    np.testing.assert_allclose(normalized.d, (x.d - mean) / np.sqrt(var + 1e-5), rtol=1e-6)


def test_batch_normalization_in_out_adapter_errors():
    with pytest.raises(DpnbError, match="not one alone"):
        F.BatchNormalizationInOutAdapter(4, [1])
    with pytest.raises(DpnbError, match="distinct axes"):
        F.BatchNormalizationInOutAdapter(3, [1, 3])
    adapter = F.BatchNormalizationInOutAdapter(4, [1, 3])
    with pytest.raises(DpnbError, match="call the adapter on an input first"):
        adapter.inv(nn.Variable((2, 4, 15)))
    adapter(nn.Variable((2, 3, 4, 5)))
    with pytest.raises(DpnbError, match=r"transposed shape is \(2, 4, 3, 5\), got \(2, 4, 3, 6\)"):
        adapter(nn.Variable((2, 3, 4, 6)))
