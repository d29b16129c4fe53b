"""Recomputation: forward frees the intermediates flagged ``recompute`` and backward computes
them again, with gradients equal to NumPy's; and what the clearing passes free and keep."""
import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
from dpnb.errors import DpnbError


def test_forward_frees_recompute_variables_and_backward_gives_numpys_gradient():
    rng = np.random.RandomState(0)
    x = nn.Variable.from_numpy_array(rng.randn(2, 3).astype(np.float64), need_grad=True)
    h1 = F.sin(x).apply(recompute=True)
    h2 = F.sin(h1)
    y = F.sin(h2).apply(recompute=True)  # a root is never freed
    y.forward()
    assert h1.data.clear_called and not h2.data.clear_called and not y.data.clear_called
    with pytest.raises(DpnbError, match="recompute flag"):
        h1.d
    x.grad.zero()
    y.backward()
    a = x.d
    expected = np.cos(np.sin(np.sin(a))) * np.cos(np.sin(a)) * np.cos(a)
    np.testing.assert_allclose(x.g, expected, rtol=1e-12)
    np.testing.assert_allclose(h1.d, np.sin(a), rtol=1e-12)  # computed again for sin(h1)


def test_backward_computes_only_what_a_function_needs_back_to_data_that_is_there():
    x = nn.Variable.from_numpy_array(np.full((2,), 0.5), need_grad=True)
    h1 = F.sin(x).apply(recompute=True)
    h2 = F.sin(h1).apply(recompute=True)
    h3 = F.sin(h2)                                   # kept: a checkpoint
    h4 = F.sin(h3).apply(recompute=True)
    y = F.sin(h4)
    y.forward(clear_no_need_grad=True)
    seen = []
    y.backward(function_post_hook=lambda f: seen.append(
        (h1.data.clear_called, h2.data.clear_called, h4.data.clear_called)))
    # sin(h4) computes h4 again from h3 and stops there; sin(h2) needs h2, which needs h1.
    assert seen == [(True, True, False), (True, True, False), (False, False, False),
                    (False, False, False), (False, False, False)]


def test_recomputed_dropout_draws_the_same_mask():
    rng = np.random.RandomState(1)
    x = nn.Variable.from_numpy_array(rng.rand(4, 5), need_grad=True)
    h = F.dropout(F.identity(x), p=0.5, seed=7).apply(recompute=True)
    y = F.sin(h)
    y.forward(clear_no_need_grad=True)
    mask = y.d != 0
    x.grad.zero()
    y.backward()
    np.testing.assert_allclose(x.g, np.where(mask, 2 * np.cos(2 * x.d), 0), rtol=1e-12)


def test_recompute_blocks_and_decorator_set_the_flag_of_new_variables():
    x = nn.Variable((2,))
    with nn.recompute():
        a = F.relu(x)
        with nn.recompute(False):
            b = F.relu(a)
        c = F.relu(b)

    @nn.recompute_fn()
    def block(v):
        return F.relu(v)

    d = block(x)
    assert (x.recompute, a.recompute, b.recompute, c.recompute, d.recompute) == (
        False, True, False, True, True)
    assert not F.relu(x).recompute


def test_clear_no_need_grad_frees_the_bias_and_beta_backward_never_reads():
    x = nn.Variable((1, 1, 4), need_grad=True)
    w = nn.Variable((1, 1, 2), need_grad=True)
    b = nn.Variable((1,), need_grad=True)
    x.d, w.d, b.d = np.arange(4.0).reshape(1, 1, 4), [[[1.0, -1.0]]], [0.5]
    xi, wi, bi = F.identity(x), F.identity(w), F.identity(b)
    y = F.convolution(xi, wi, bi)
    y.forward(clear_no_need_grad=True)
    assert [v.data.clear_called for v in (xi, wi, bi)] == [False, False, True]
    for v in (x, w, b):
        v.grad.zero()
    y.backward()
    np.testing.assert_allclose(b.g, [3.0])           # sum of the ones over 3 outputs
    np.testing.assert_allclose(w.g, [[[3.0, 6.0]]])  # sums of x[0:3] and x[1:4]


def test_backward_clear_buffer_frees_intermediates_but_keeps_the_inputs_of_sink():
    x = nn.Variable.from_numpy_array(np.array([0.3, -0.2]), need_grad=True)
    h = F.tanh(x)
    a, b = F.add_scalar(h, 1.0), F.mul_scalar(h, 2.0)
    s = F.sink(a, b)
    s.forward()
    x.grad.zero()
    s.backward(clear_buffer=True)
    np.testing.assert_allclose(a.d, np.tanh(x.d) + 1)   # sink's inputs stay
    assert h.data.clear_called and h.grad.clear_called
    with pytest.raises(DpnbError, match="backward\\(clear_buffer=True\\)"):
        h.g
    np.testing.assert_allclose(x.g, 3 * (1 - np.tanh(x.d) ** 2))
