"""The masked, search, sequence, resizing, fused and correlation functions beyond their
nnabla cases: what nnabla cannot record (its CPU build lacks channel_last convolution,
1-D pooling, onnx_resize's gradient, unique's default axis), dpnb's deliberate
differences, re-runs with new data, and bad input."""
import numpy as np
import pytest
from gradcheck import check_grad

import dpnb as nn
import dpnb.functions as F
from dpnb import DpnbError


def _v(a, need_grad=False):
    return nn.Variable.from_numpy_array(np.asarray(a), need_grad=need_grad)


# -- masks -------------------------------------------------------------------

def test_bool_gather_follows_a_new_mask_on_the_next_forward(rng):
    x = _v(rng.randn(3, 2))
    mask = _v(np.array([1.0, 0.0, 1.0]))
    y = F.bool_gather(x, mask)
    y.forward()
    assert y.shape == (2, 2)
    mask.d = [0.0, 1.0, 0.0]
    y.forward()
    np.testing.assert_array_equal(y.d, x.d[1:2])


def test_bool_functions_gradients_by_finite_differences(rng):
    mask = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    check_grad(lambda d, m: F.bool_fill(d, m, 2.0), [rng.randn(2, 3, 2), mask[:, :, None]],
               need_grad=[True, False])
    check_grad(lambda x, m: F.bool_gather(x, m), [rng.randn(2, 3, 2), mask],
               need_grad=[True, False])
    check_grad(lambda x, m, o: F.bool_scatter(x, m, o), [rng.randn(4), mask, rng.randn(2, 3)],
               need_grad=[True, False, True])


def test_bool_scatter_updates_output_in_place():
    out = _v(np.full((2, 2), 7.0))
    y = F.bool_scatter(_v([1.0, 2.0]), _v([[1, 0], [0, 1]]), out)
    y.forward()
    np.testing.assert_array_equal(out.d, [[1.0, 7.0], [7.0, 2.0]])


def test_bad_masks_are_refused(rng):
    with pytest.raises(DpnbError, match=r"must broadcast to data's shape \(2, 3\)"):
        F.bool_fill(_v(rng.randn(2, 3)), _v(np.ones(2)))
    with pytest.raises(DpnbError, match=r"leading axes of input \(2, 3\)"):
        F.bool_gather(_v(rng.randn(2, 3)), _v(np.ones(3)))
    with pytest.raises(DpnbError, match=r"output of shape \(3,\) must have the mask's shape"):
        F.bool_scatter(_v(rng.randn(1)), _v([1.0, 0.0]), _v(np.zeros(3)))
    with nn.auto_forward(), pytest.raises(DpnbError, match="input holds 3 rows but the mask "
                                                           "has 1 non-zero"):
        F.bool_scatter(_v(rng.randn(3)), _v([1.0, 0.0]))
    with pytest.raises(DpnbError, match="value must be a number"):
        F.bool_fill(_v(rng.randn(2)), _v([1.0, 0.0]), value="x")
    with pytest.raises(DpnbError, match="leave them at -1 and None"):
        F.bool_gather(_v(rng.randn(2)), _v([1.0, 0.0]), n_outputs=1)


# -- reductions and searches ---------------------------------------------------

def test_reduce_warns_and_refuses_other_ops(rng):
    x = _v(rng.randn(2, 3))
    with pytest.warns(DeprecationWarning, match="use F.sum or F.mean"):
        y = F.reduce(x, "mean")
    y.forward()
    assert y.shape == () and np.isclose(y.d, x.d.mean())
    with pytest.warns(DeprecationWarning), pytest.raises(DpnbError, match="'sum' or 'mean'"):
        F.reduce(x, "max")


def test_searchsorted_matches_numpy_and_has_no_gradient(rng):
    seq = np.sort(rng.randn(3, 6), axis=1)
    values = np.concatenate([rng.randn(3, 4), seq[:, :2]], axis=1)
    for right, side in ((False, "left"), (True, "right")):
        y = F.searchsorted(_v(seq, need_grad=True), _v(values), right=right)
        y.forward()
        want = [np.searchsorted(s, v, side=side) for s, v in zip(seq, values)]
        np.testing.assert_array_equal(y.d, want)
        assert not y.need_grad and y.dtype == np.float32
    with pytest.raises(DpnbError, match="same shape except the innermost axis"):
        F.searchsorted(_v(seq), _v(values[:2]))


def test_unique_of_the_default_axis_matches_numpy(rng):
    x = rng.randint(0, 5, (4, 3)).astype(np.float32)
    with nn.auto_forward():
        y, index, inverse, counts = F.unique(_v(x), with_index=True, with_inverse=True,
                                             with_counts=True)
    want = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    for got, expected in zip((y, index, inverse, counts), want):
        np.testing.assert_array_equal(got.d, expected.reshape(-1))
    assert index.dtype == inverse.dtype == counts.dtype == np.int32


def test_unique_rows_follow_new_data(rng):
    x = _v(np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 3.0]]))
    y = F.unique(x, flatten=False, axis=0)
    y.forward()
    np.testing.assert_array_equal(y.d, [[0.0, 3.0], [1.0, 2.0]])
    x.d = [[5.0, 5.0], [4.0, 4.0], [3.0, 3.0]]
    y.forward()
    np.testing.assert_array_equal(y.d, [[3.0, 3.0], [4.0, 4.0], [5.0, 5.0]])


def test_unique_counts_each_nan_apart():
    with nn.auto_forward():
        y, counts = F.unique(_v([3.0, np.nan, 1.0, np.nan]), with_counts=True)
    np.testing.assert_array_equal(y.d, [1.0, 3.0, np.nan, np.nan])
    np.testing.assert_array_equal(counts.d, [1, 1, 1, 1])


def test_unique_refuses_slices_without_an_axis():
    with pytest.raises(DpnbError, match="flatten=False finds distinct slices along an axis"):
        F.unique(_v(np.ones((2, 2))), flatten=False)


# -- confusion matrix and VAT noise ----------------------------------------------

def test_confusion_matrix_refuses_labels_outside_the_classes(rng):
    x = _v(rng.rand(3, 2))
    with nn.auto_forward(), pytest.raises(DpnbError, match=r"labels must be integers in \[0, 2\)"):
        F.confusion_matrix(x, _v([[0], [2], [1]]))
    with pytest.raises(DpnbError, match=r"target must have shape \(3, 1\)"):
        F.confusion_matrix(x, _v([0, 1, 1]))


def test_vat_noise_backward_writes_the_gradient_into_w(rng):
    x = _v(rng.randn(2, 3), need_grad=True)
    w = _v(np.zeros((2, 3)), need_grad=True)
    y = F.vat_noise(x, w, eps=3.0)
    y.forward()
    np.testing.assert_allclose(np.sqrt((y.d ** 2).sum(axis=1)), 3.0, rtol=1e-6)
    g = rng.randn(2, 3)
    y.backward(g)
    np.testing.assert_allclose(w.d, 3.0 * g)
    np.testing.assert_array_equal(x.g, 0)


def test_vat_noise_base_axis_0_normalizes_the_whole_array(rng):
    # nnabla reads uninitialised memory here; dpnb takes the one sample the axes make
    a = rng.randn(2, 3)
    with nn.auto_forward():
        y = F.vat_noise(_v(a), _v(np.zeros((2, 3))), base_axis=0)
    np.testing.assert_allclose(y.d, a / np.sqrt((a ** 2).sum() + 1e-8))


def test_vat_noise_needs_w_of_x_shape():
    with pytest.raises(DpnbError, match=r"w must have x's shape \(2, 3\)"):
        F.vat_noise(_v(np.ones((2, 3))), _v(np.ones(3)))


# -- packed sequences --------------------------------------------------------------

def test_padding_value_fills_the_padding():
    # nnabla 1.39 pads with zeros whatever padding_value says; dpnb honours it
    with nn.auto_forward():
        y, lengths = F.pad_packed_sequence(_v(np.arange(1.0, 5.0)), _v([2, 1, 1]),
                                           padding_value=-1.0, total_length=4)
    np.testing.assert_array_equal(y.d, [[1.0, 2.0], [3.0, -1.0], [4.0, -1.0], [-1.0, -1.0]])
    np.testing.assert_array_equal(lengths.d, [3, 1])


def test_pack_then_pad_in_a_graph_follows_new_lengths(rng):
    x = _v(rng.randn(3, 2, 2))
    lengths = _v(np.array([3, 1]))
    y, out_lengths = F.pad_packed_sequence(*F.pack_padded_sequence(x, lengths))
    nn.forward_all([y, out_lengths])
    np.testing.assert_array_equal(y.d[:, 0], x.d[:, 0])
    np.testing.assert_array_equal(y.d[1:, 1], 0)
    lengths.d = [2, 2]
    nn.forward_all([y, out_lengths])
    assert y.shape == (3, 2, 2)
    np.testing.assert_array_equal(y.d[:2], x.d[:2])
    np.testing.assert_array_equal(y.d[2], 0)
    np.testing.assert_array_equal(out_lengths.d, [2, 2])


def test_a_total_length_shorter_than_the_longest_sequence_pads_to_the_longest(rng):
    """As nnabla 1.39 (its test_pad_packed_sequence.py uses total_length 3 for 4 steps)."""
    with nn.auto_forward():
        padded, lengths = F.pad_packed_sequence(_v([1.0, 2.0, 3.0]), _v([2, 1]), total_length=1)
    np.testing.assert_array_equal(padded.d, [[1.0, 2.0], [3.0, 0.0]])
    np.testing.assert_array_equal(lengths.d, [2, 1])


def test_bad_sequences_are_refused(rng):
    padded = _v(rng.randn(3, 2))
    with nn.auto_forward():
        with pytest.raises(DpnbError, match="lengths must not increase"):
            F.pack_padded_sequence(padded, _v([1, 3]))
        with pytest.raises(DpnbError, match=r"lengths must be integers in \[0, 3\]"):
            F.pack_padded_sequence(padded, _v([4, 1]))
        with pytest.raises(DpnbError, match="batch_sizes add up to 3, but packed_sequence holds 4"):
            F.pad_packed_sequence(_v(rng.randn(4)), _v([2, 1]))
    with pytest.raises(DpnbError, match="lengths holds 3 entries for a batch of 2"):
        F.pack_padded_sequence(padded, _v([3, 2, 1]))
    with pytest.raises(DpnbError, match="lengths must be 1-D"):
        F.pack_padded_sequence(padded, _v([[3], [2]]))


# -- max pooling's gradient and resizing -------------------------------------------------

@pytest.mark.parametrize("shape, options", [
    ((2, 3, 7), {"kernel": (2,)}),
    ((1, 5, 6, 2), {"kernel": (2, 3), "stride": (1, 2), "pad": (1, 1), "channel_last": True}),
    ((1, 2, 5, 5), {"kernel": (3, 3), "stride": (2, 2), "ignore_border": False}),
])
def test_max_pooling_backward_is_max_pooling_s_gradient(rng, shape, options):
    x = _v(rng.permutation(int(np.prod(shape))).reshape(shape) * 0.1, need_grad=True)
    y = F.max_pooling(x, **options)
    y.forward()
    dy = rng.randn(*y.shape)
    y.backward(dy)
    dx = F.max_pooling_backward(_v(dy), x, **options)
    dx.forward()
    np.testing.assert_array_equal(dx.d, x.g)
    check_grad(lambda g, v: F.max_pooling_backward(g, v, **options), [dy, x.d.copy()])


def test_max_pooling_backward_needs_dy_of_the_pooled_shape():
    with pytest.raises(DpnbError, match=r"dy must have the shape of the max pooling of x, "
                                        r"\(1, 1, 2, 2\)"):
        F.max_pooling_backward(nn.Variable((1, 1, 3, 3)), nn.Variable((1, 1, 4, 4)), (2, 2))


@pytest.mark.parametrize("options", [
    {"scales": (1, 1, 1.5, 0.75), "mode": "linear"},
    {"sizes": (1, 2, 5, 7), "mode": "cubic", "exclude_outside": 1},
    {"scales": (1, 1, 2, 2), "mode": "nearest", "coordinate_transformation_mode": "asymmetric"},
    {"scales": (1, 1, 1.5, 1.5), "mode": "linear", "extrapolation_value": 3.0,
     "coordinate_transformation_mode": "tf_crop_and_resize",
     "roi": (0, 0, -0.2, 0.1, 1, 1, 1, 1.3)},
])
def test_onnx_resize_gradient_by_finite_differences(rng, options):
    # nnabla has no backward for onnx_resize; dpnb's is the transposed resampling
    check_grad(lambda x: F.onnx_resize(x, **options), [rng.randn(1, 2, 3, 4)])


def test_onnx_resize_over_four_axes_is_separable(rng):
    # nnabla resizes at most 3 axes; dpnb resizes any, one after the other
    x = rng.randn(2, 3, 2, 2)
    with nn.auto_forward():
        y = F.onnx_resize(_v(x), scales=(2, 2, 2, 2))
    np.testing.assert_array_equal(y.d, x.repeat(2, 0).repeat(2, 1).repeat(2, 2).repeat(2, 3))


@pytest.mark.parametrize("options, message", [
    ({"scales": (1, 2), "sizes": (1, 4)}, "exactly one of scales and sizes"),
    ({}, "exactly one of scales and sizes"),
    ({"scales": (2,)}, r"scales needs one entry per axis of the 2-D input"),
    ({"scales": (1, 2), "mode": "area"}, "mode must be one of nearest, linear, cubic"),
    ({"scales": (1, 2), "coordinate_transformation_mode": "half_pixel_symmetric"},
     "coordinate_transformation_mode must be one of"),
    ({"scales": (1, 2), "nearest_mode": "round"}, "nearest_mode must be one of"),
    ({"scales": (1, 2), "coordinate_transformation_mode": "tf_crop_and_resize"},
     "needs roi with 4 entries"),
    ({"scales": (1, -2)}, "scales must be positive"),
])
def test_onnx_resize_refuses_bad_options(options, message):
    with pytest.raises(DpnbError, match=message):
        F.onnx_resize(nn.Variable((2, 3)), **options)


# -- fused convolution and patch correlation -------------------------------------------

def test_fused_convolution_channel_last_matches_channel_first(rng):
    x, w, z = rng.randn(2, 2, 5, 5), rng.randn(3, 2, 3, 3), rng.randn(2, 3, 5, 5)
    stats = [rng.randn(1, 3, 1, 1) for _ in range(3)] + [rng.rand(1, 3, 1, 1) + 0.5]
    last = [s.transpose(0, 2, 3, 1) for s in stats]
    with nn.auto_forward():
        first = F.fused_convolution(_v(x), _v(w), None, *map(_v, stats), z=_v(z), pad=(1, 1),
                                    pad_mode="reflect", nonlinearity="elu",
                                    nonlinearity_args=[0.3])
        other = F.fused_convolution(_v(x.transpose(0, 2, 3, 1)), _v(w.transpose(0, 2, 3, 1)),
                                    None, *map(_v, last), z=_v(z.transpose(0, 2, 3, 1)),
                                    pad=(1, 1), pad_mode="reflect", channel_last=True,
                                    nonlinearity="elu", nonlinearity_args=[0.3])
    np.testing.assert_allclose(other.d, first.d.transpose(0, 2, 3, 1), rtol=1e-10)


def test_fused_convolution_is_one_function_that_updates_the_statistics_once(rng):
    x, w, z = _v(rng.randn(2, 2, 5, 5), True), _v(rng.randn(4, 2, 3, 3), True), _v(rng.randn(2, 4, 5, 5))
    beta, gamma = _v(rng.randn(1, 4, 1, 1), True), _v(rng.rand(1, 4, 1, 1) + 0.5, True)
    mean, var = _v(np.zeros((1, 4, 1, 1))), _v(np.ones((1, 4, 1, 1)))
    y = F.fused_convolution(x, w, None, beta, gamma, mean, var, z, pad=(1, 1), decay_rate=0.5,
                            nonlinearity="leaky_relu", nonlinearity_args=[0.2])
    assert y.parent.name == "FusedConvolution" and len(y.parent.inputs) == 7
    # nnabla 1.39's y.parent.info.args for this call (its floats are float32's)
    assert y.parent.info.args == (
        {"base_axis": 1, "pad": [1, 1], "stride": [1, 1], "dilation": [1, 1], "group": 1,
         "channel_last": False, "decay_rate": 0.5, "eps": 1e-05, "batch_stat": True,
         "nonlinearity": "leaky_relu", "nonlinearity_args": [0.2], "pad_mode": "constant",
         "constant_value": 0.0})
    y.forward()
    conv = F.convolution(x, w, pad=(1, 1))
    conv.forward()
    batch_mean = conv.d.mean(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(mean.d, 0.5 * batch_mean, rtol=1e-12)
    y.backward(rng.randn(*y.shape))  # computes the stages again: the statistics stay
    np.testing.assert_allclose(mean.d, 0.5 * batch_mean, rtol=1e-12)


def test_fused_convolution_gradients_by_finite_differences(rng):
    stats = [rng.randn(1, 3, 1, 1), rng.rand(1, 3, 1, 1) + 0.5, rng.randn(1, 3, 1, 1),
             rng.rand(1, 3, 1, 1) + 0.5]
    check_grad(lambda x, w, beta, gamma, mean, var, z: F.fused_convolution(
        x, w, None, beta, gamma, mean, var, z, pad=(1, 0, 2, 1), pad_mode="reflect",
        batch_stat=False, nonlinearity="tanh"),
        [rng.randn(2, 2, 4, 4), rng.randn(3, 2, 3, 3), *stats, rng.randn(2, 3, 3, 5)],
        need_grad=[True] * 4 + [False] * 2 + [True])  # running statistics: no gradient, as nnabla's
    check_grad(lambda x, w, b: F.fused_convolution(x, w, b, stride=(2, 1), nonlinearity="elu",
                                                   nonlinearity_args=[0.7]),
               [rng.randn(2, 2, 5, 5), rng.randn(3, 2, 3, 3), rng.randn(3)])


@pytest.mark.parametrize("options, message", [
    ({"bias": True, "bn": True}, "bias and a batch normalization cannot be combined"),
    ({"gamma_only": True}, "beta, gamma, mean and variance together"),
    ({"nonlinearity": "swish"}, "nonlinearity must be one of identity, relu"),
    ({"nonlinearity": "leaky_relu"}, r"'leaky_relu' takes 1 nonlinearity_args, got \[\]"),
    ({"nonlinearity_args": [1.0]}, r"'relu' takes 0 nonlinearity_args"),
    ({"pad": (1, 1, 1)}, "pad must have 2 entries .* or 4"),
])
def test_fused_convolution_refuses_bad_options(options, message):
    x, w = nn.Variable((1, 2, 4, 4)), nn.Variable((3, 2, 3, 3))
    stats = [nn.Variable((1, 3, 1, 1)) for _ in range(4)]
    bias = nn.Variable((3,)) if options.pop("bias", False) else None
    norm = stats if options.pop("bn", False) else [None] * 4
    if options.pop("gamma_only", False):
        norm = [None, stats[1], None, None]
    with pytest.raises(DpnbError, match=message):
        F.fused_convolution(x, w, bias, *norm, **options)


def test_patch_correlation_matches_nnabla_s_documented_examples():
    x = _v(np.ones((1, 2, 3, 4)))
    with nn.auto_forward():
        np.testing.assert_array_equal(F.patch_correlation(x, x, patch=(3, 4)).d, [[[[[24.0]]]]])
        np.testing.assert_array_equal(F.patch_correlation(x, x, (3, 1), shift=(0, 1)).d,
                                      [[[[[0, 6, 6, 6]], [[6, 6, 6, 6]], [[6, 6, 6, 0]]]]])
        y = F.patch_correlation(x, x, patch=(3, 4), padding=(0, 1, 4, 4))
    np.testing.assert_array_equal(y.d, [[[[[0, 6, 12, 18, 24, 18, 12, 6, 0],
                                           [0, 4, 8, 12, 16, 12, 8, 4, 0]]]]])


def test_patch_correlation_gradients_by_finite_differences(rng):
    check_grad(lambda a, b: F.patch_correlation(a, b, patch=2, shift=(1, 2), shift_step=(1, 2),
                                                padding=(1, 0, 0, 1), channel_last=True),
               [rng.randn(1, 3, 4, 2), rng.randn(1, 3, 4, 2)])


def test_patch_correlation_refuses_bad_input():
    with pytest.raises(DpnbError, match="4-D arrays of one shape"):
        F.patch_correlation(nn.Variable((1, 2, 3, 4)), nn.Variable((1, 2, 3, 5)))
    with pytest.raises(DpnbError, match=r"the patch \(4, 4\) is larger than the padded input"):
        F.patch_correlation(nn.Variable((1, 2, 3, 4)), nn.Variable((1, 2, 3, 4)), patch=4)
    with pytest.raises(DpnbError, match="shift must be 2 int"):
        F.patch_correlation(nn.Variable((1, 2, 3, 4)), nn.Variable((1, 2, 3, 4)), shift=-1)
