"""F.rnn / F.lstm / F.gru and their PF layers beyond the nnabla reference cases:
bad input, nnabla's default initialization, dropout, training=False, re-running a
graph, and the one-step LSTM cell against the whole-sequence layer."""
import re

import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
import dpnb.parametric_functions as PF
from dpnb.errors import DpnbError
from dpnb.initializer import calc_uniform_lim_glorot

T, B, I, H = 3, 2, 3, 2


@pytest.fixture(autouse=True)
def fresh_parameters():
    nn.clear_parameters()
    yield
    nn.clear_parameters()


def var(rng, *shape, need_grad=True):
    return nn.Variable.from_numpy_array(rng.uniform(-1, 1, shape).astype(np.float32),
                                        need_grad=need_grad)


def lstm_inputs(rng, layers=1, d=1):
    x, h, c = var(rng, T, B, I), var(rng, layers, d, B, H), var(rng, layers, d, B, H)
    w0 = var(rng, d, 4, H, I + H)
    w = var(rng, layers - 1, d, 4, H, d * H + H) if layers > 1 else None
    return x, h, c, w0, w, var(rng, layers, d, 4, H)


# -- bad input ----------------------------------------------------------------------
def test_x_must_be_3d(rng):
    _, h, c, w0, _, b = lstm_inputs(rng)
    with pytest.raises(DpnbError, match=r"x must have shape \(T, B, I\).*got \(2, 3\)"):
        F.lstm(var(rng, B, I), h, c, w0, bias=b)


@pytest.mark.parametrize("shape", [(2, 1, B, H), (1, 2, B, H), (1, 1, B + 1, H), (1, B, H)])
def test_h_must_match_layers_directions_and_batch(rng, shape):
    x, _, _, w0, _, _ = lstm_inputs(rng)
    with pytest.raises(DpnbError, match=r"LSTM: h must have shape \(num_layers, D, B, H\) = "
                                        r"\(1, 1, 2, H\) .*; got " + re.escape(str(shape))):
        F.lstm(x, var(rng, *shape), var(rng, *shape), w0)


def test_c_must_match_h(rng):
    x, h, _, w0, _, _ = lstm_inputs(rng)
    with pytest.raises(DpnbError, match=r"c must have the shape of h, \(1, 1, 2, 2\); "
                                        r"got \(1, 1, 2, 3\)"):
        F.lstm(x, h, var(rng, 1, 1, B, H + 1), w0)


@pytest.mark.parametrize("shape", [(1, 4, H, I + H + 1), (1, 3, H, I + H), (1, 4, H + 1, I + H)])
def test_weight_l0_must_fit_x_and_h(rng, shape):
    x, h, c, _, _, _ = lstm_inputs(rng)
    with pytest.raises(DpnbError, match=r"weight_l0 must have shape \(1, 4, 2, 5\) for x of "
                                        r"shape \(3, 2, 3\) and h of shape \(1, 1, 2, 2\); got"):
        F.lstm(x, h, c, var(rng, *shape))


def test_gru_and_rnn_weight_layouts(rng):
    x, h = var(rng, T, B, I), var(rng, 1, 1, B, H)
    with pytest.raises(DpnbError, match=r"GRU: weight_l0 must have shape \(1, 3, 2, 5\)"):
        F.gru(x, h, var(rng, 1, 4, H, I + H))
    with pytest.raises(DpnbError, match=r"RNN: weight_l0 must have shape \(1, 2, 5\)"):
        F.rnn(x, h, var(rng, 1, 1, H, I + H))
    with pytest.raises(DpnbError, match=r"RNN: bias must have shape \(1, 1, 2\).*"
                                        r"got \(1, 1, 4, 2\)"):
        F.rnn(x, h, var(rng, 1, H, I + H), bias=var(rng, 1, 1, 4, H))
    with pytest.raises(DpnbError, match=r"GRU: bias must have shape \(1, 1, 4, 2\).*"
                                        r"got \(1, 1, 3, 2\)"):
        F.gru(x, h, var(rng, 1, 3, H, I + H), bias=var(rng, 1, 1, 3, H))


def test_upper_layers_weight_shape(rng):
    x, h, c, w0, _, _ = lstm_inputs(rng, layers=2)
    with pytest.raises(DpnbError, match=r"weight must have shape \(1, 1, 4, 2, 4\).*"
                                        r"got \(1, 1, 4, 2, 5\)"):
        F.lstm(x, h, c, w0, var(rng, 1, 1, 4, H, H + 3), num_layers=2)


def test_weight_given_exactly_for_two_layers_or_more(rng):
    x, h, c, w0, _, _ = lstm_inputs(rng, layers=2)
    # nnabla 1.39 crashes the process on this one; dpnb says what is missing.
    with pytest.raises(DpnbError, match=r"weight .* must be given exactly when num_layers > 1; "
                                        r"got num_layers=2 and weight None"):
        F.lstm(x, h, c, w0, num_layers=2)
    x, h, c, w0, _, _ = lstm_inputs(rng)
    with pytest.raises(DpnbError, match=r"got num_layers=1 and weight given; drop weight"):
        F.lstm(x, h, c, w0, weight=var(rng, 1, 1, 4, H, 2 * H))


def test_bias_shape(rng):
    x, h, c, w0, _, _ = lstm_inputs(rng)
    with pytest.raises(DpnbError, match=r"bias must have shape \(1, 1, 4, 2\).*got \(1, 1, 4, 3\)"):
        F.lstm(x, h, c, w0, bias=var(rng, 1, 1, 4, H + 1))


def test_bidirectional_needs_two_directions_in_h(rng):
    x, h, c, w0, _, _ = lstm_inputs(rng)
    with pytest.raises(DpnbError, match=r"= \(1, 2, 2, H\) .* bidirectional=True; "
                                        r"got \(1, 1, 2, 2\)"):
        F.lstm(x, h, c, w0, bidirectional=True)


def test_nonlinearity_is_tanh_or_relu(rng):
    with pytest.raises(DpnbError, match=r"nonlinearity must be 'tanh' or 'relu', got 'sigmoid'"):
        F.rnn(var(rng, T, B, I), var(rng, 1, 1, B, H), var(rng, 1, H, I + H),
              nonlinearity="sigmoid")


@pytest.mark.parametrize("layers", [0, 1.5, True])
def test_num_layers_is_a_positive_int(rng, layers):
    with pytest.raises(DpnbError, match=r"num_layers must be an int >= 1"):
        F.rnn(var(rng, T, B, I), var(rng, 1, 1, B, H), var(rng, 1, H, I + H), num_layers=layers)


@pytest.mark.parametrize("dropout", [-0.1, 1.0, "half"])
def test_dropout_is_a_ratio(rng, dropout):
    with pytest.raises(DpnbError, match=r"dropout must be a number in \[0, 1\)"):
        F.gru(var(rng, T, B, I), var(rng, 1, 1, B, H), var(rng, 1, 3, H, I + H),
              dropout=dropout, training=False)


def test_dropout_in_training_is_refused(rng):
    x, h, c, w0, w, b = lstm_inputs(rng, layers=2)
    with pytest.raises(DpnbError, match=r"dropout=0.5 with training=True is not supported.*"
                                        r"pass dropout=0"):
        F.lstm(x, h, c, w0, w, b, num_layers=2, dropout=0.5)
    with pytest.raises(DpnbError, match=r"dropout=0.2 with training=True"):
        PF.lstm(x, h, c, dropout=0.2)


def test_dropout_without_training_changes_nothing(rng):
    inputs = lstm_inputs(rng, layers=2)
    results = []
    for dropout in (None, 0.5):
        outs = F.lstm(*inputs, num_layers=2, dropout=dropout, training=False)
        nn.forward_all(list(outs))
        results.append([o.d.copy() for o in outs])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_backward_needs_training(rng):
    x, h, c, w0, _, b = lstm_inputs(rng)
    y, _, _ = F.lstm(x, h, c, w0, bias=b, training=False)
    y.forward()
    with pytest.raises(DpnbError, match=r"LSTM: backward needs training=True"):
        y.backward()


def test_inputs_must_be_floating(rng):
    _, h, c, w0, _, _ = lstm_inputs(rng)
    ints = nn.Variable.from_numpy_array(np.zeros((T, B, I), np.int32))
    with pytest.raises(DpnbError, match=r"x must be floating point, got int32"):
        F.lstm(ints, h, c, w0)


def test_weight_must_be_a_variable(rng):
    x, h, c, w0, _, _ = lstm_inputs(rng)
    with pytest.raises(DpnbError, match=r"F.lstm: bias must be an nn.Variable or None, "
                                        r"got ndarray"):
        F.lstm(x, h, c, w0, bias=np.zeros((1, 1, 4, H)))


def test_pf_layers_check_h(rng):
    with pytest.raises(DpnbError, match=r"PF.gru expects h as an nn.Variable of shape "
                                        r"\(num_layers, D, B, H\), got \(2, 2\)"):
        PF.gru(var(rng, T, B, I), var(rng, B, H))
    with pytest.raises(DpnbError, match=r"PF.rnn expects an input of at least 3 dimensions"):
        PF.rnn(var(rng, B, I), var(rng, 1, 1, B, H))


def test_pf_lstm_refuses_a_parameter_of_another_layout(rng):
    x, h, c = var(rng, T, B, I), var(rng, 1, 1, B, H), var(rng, 1, 1, B, H)
    PF.lstm(x, h, c)
    with pytest.raises(DpnbError, match=r"parameter 'weight_l0' exists with shape "
                                        r"\(1, 4, 2, 5\), but this layer needs \(1, 4, 3, 6\)"):
        PF.lstm(x, var(rng, 1, 1, B, H + 1), var(rng, 1, 1, B, H + 1))


def test_lstm_cell_checks_states(rng):
    with pytest.raises(DpnbError, match=r"h and c of shape \(batch_size, state_size\) = "
                                        r"\(2, 2\), got h \(2, 3\) and c \(2, 2\)"):
        PF.lstm_cell(var(rng, B, I), var(rng, B, H + 1), var(rng, B, H), H)
    with pytest.raises(DpnbError, match=r"PF.lstm_cell expects x as an nn.Variable of shape "
                                        r"\(batch_size, size\), got \(3, 2, 3\)"):
        PF.lstm_cell(var(rng, T, B, I), var(rng, B, H), var(rng, B, H), H)


# -- nnabla's defaults ----------------------------------------------------------------
def glorot_pair(rng, lead, inputs, hidden):
    """The reference of nnabla's default recurrent weight: uniform input columns, then
    uniform recurrent columns, each with its Glorot limit."""
    ih = rng.uniform(*calc_uniform_lim_glorot(inputs, hidden), lead + (hidden, inputs))
    hh = rng.uniform(*calc_uniform_lim_glorot(hidden, hidden), lead + (hidden, hidden))
    return np.concatenate([ih, hh], axis=-1)


@pytest.mark.parametrize("fn, gates", [("rnn", ()), ("lstm", (4,)), ("gru", (3,))])
def test_default_initialization_is_nnabla_s(fn, gates):
    nn.seed(313)
    reference = np.random.RandomState(313)
    x, h = nn.Variable((T, B, I)), nn.Variable((2, 2, B, H))
    states = (h, nn.Variable(h.shape)) if fn == "lstm" else (h,)
    getattr(PF, fn)(x, *states, bidirectional=True)
    params = nn.get_parameters()
    assert list(params) == [f"{fn}/weight_l0", f"{fn}/weight", f"{fn}/bias"]
    want_w0 = glorot_pair(reference, (2,) + gates, I, H)
    want_w = glorot_pair(reference, (1, 2) + gates, 2 * H, H)
    np.testing.assert_allclose(params[f"{fn}/weight_l0"].d, want_w0, rtol=1e-6)
    np.testing.assert_allclose(params[f"{fn}/weight"].d, want_w, rtol=1e-6)
    bias_gates = () if fn == "rnn" else (4,)
    assert params[f"{fn}/bias"].shape == (2, 2) + bias_gates + (H,)
    assert not params[f"{fn}/bias"].d.any()


def test_layers_come_from_h_as_in_nnabla():
    x, h, c = nn.Variable((T, B, I)), nn.Variable((2, 1, B, H)), nn.Variable((2, 1, B, H))
    _, h_n, _ = PF.lstm(x, h, c)  # num_layers left at 1
    assert h_n.shape == (2, 1, B, H)
    assert nn.get_parameters()["lstm/weight"].shape == (1, 1, 4, H, 2 * H)


def test_num_layers_disagreeing_with_h_is_refused():
    x, h = nn.Variable((T, B, I)), nn.Variable((1, 1, B, H))
    with pytest.raises(DpnbError, match=r"PF.rnn: num_layers=2 but h has 1 layer\(s\) "
                                        r"\(shape \(1, 1, 2, 2\)\)"):
        PF.rnn(x, h, num_layers=2)
    _, h_n = PF.gru(x, nn.Variable((2, 1, B, H)), num_layers=2)
    assert h_n.shape == (2, 1, B, H)


def test_without_bias_and_fixed(rng):
    x, h = var(rng, T, B, I), var(rng, 1, 1, B, H)
    PF.gru(x, h, with_bias=False, fix_parameters=True, name="g")
    assert list(nn.get_parameters(grad_only=False)) == ["g/gru/weight_l0"]
    y, _ = PF.gru(x, h, with_bias=False, fix_parameters=True, name="g")
    assert not y.parent.inputs[2].need_grad


# -- behaviour ------------------------------------------------------------------------
def test_rerun_graph_uses_new_inputs(rng):
    """A graph run twice saves the second run's states for backward."""
    x, h, c, w0, w, b = lstm_inputs(rng, layers=2, d=2)
    outs = F.lstm(x, h, c, w0, w, b, num_layers=2, bidirectional=True)
    loss = F.sum(outs[0]) + F.sum(outs[1] * outs[2])
    loss.forward()
    new_x = rng.uniform(-1, 1, x.shape).astype(np.float32)
    x.d = new_x
    loss.forward()
    loss.backward()
    got = x.g.copy(), w.g.copy()
    fresh_x = nn.Variable.from_numpy_array(new_x, need_grad=True)
    w.grad.zero()
    outs = F.lstm(fresh_x, h, c, w0, w, b, num_layers=2, bidirectional=True)
    again = F.sum(outs[0]) + F.sum(outs[1] * outs[2])
    again.forward()
    again.backward()
    np.testing.assert_allclose(got[0], fresh_x.g, rtol=1e-6)
    np.testing.assert_allclose(got[1], w.g, rtol=1e-6)


def test_auto_forward_and_float64(rng):
    with nn.auto_forward():
        x = nn.Variable.from_numpy_array(rng.randn(T, B, I))
        h = nn.Variable.from_numpy_array(np.zeros((1, 1, B, H)))
        w0 = nn.Variable.from_numpy_array(rng.randn(1, 3, H, I + H))
        y, h_n = F.gru(x, h, w0)
    assert y.d.dtype == np.float64 and h_n.d.dtype == np.float64
    np.testing.assert_array_equal(y.d[-1], h_n.d[0, 0])


def test_bidirectional_output_halves_and_final_states(rng):
    """The forward half of y at the last step and the backward half at the first are
    the final states h_n, in nnabla's (L, D, B, H) layout."""
    x, h, w0 = var(rng, T, B, I), var(rng, 1, 2, B, H), var(rng, 2, H, I + H)
    y, h_n = F.rnn(x, h, w0, bidirectional=True)
    nn.forward_all([y, h_n])
    halves = y.d.reshape(T, B, 2, H)
    np.testing.assert_array_equal(halves[-1, :, 0], h_n.d[0, 0])
    np.testing.assert_array_equal(halves[0, :, 1], h_n.d[0, 1])


def test_lstm_cell_steps_equal_the_sequence_layer(rng):
    """LSTMCell run over a sequence equals F.lstm with the same weights, the gates
    moved from the cell's order (i, o, f, g) to the layer's (i, f, g, o)."""
    xs = rng.uniform(-1, 1, (T, B, I)).astype(np.float32)
    cell = PF.LSTMCell(B, H)
    for t in range(T):
        h_t = cell(nn.Variable.from_numpy_array(xs[t]))
    c_t = cell.c
    nn.forward_all([h_t, c_t])
    W = nn.get_parameters()["lstm/affine/W"].d  # (I + H, 4, H)
    bias = nn.get_parameters()["lstm/affine/b"].d  # (4, H)
    w0 = W.transpose(1, 2, 0)[[0, 2, 3, 1]][None]
    b = bias[[0, 2, 3, 1]][None, None]
    zeros = np.zeros((1, 1, B, H), np.float32)
    y, h_n, c_n = F.lstm(*(nn.Variable.from_numpy_array(a) for a in (xs, zeros, zeros, w0)),
                         bias=nn.Variable.from_numpy_array(b))
    nn.forward_all([y, h_n, c_n])
    np.testing.assert_allclose(h_t.d, h_n.d[0, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c_t.d, c_n.d[0, 0], rtol=1e-5, atol=1e-6)


def test_lstm_cell_reset_state(rng):
    cell = PF.LSTMCell(B, H, name="cell")
    h = cell(var(rng, B, I))
    h.forward()
    assert np.abs(cell.h.d).max() > 0
    cell.reset_state()
    assert not cell.h.d.any() and not cell.c.d.any()
    assert list(nn.get_parameters()) == ["cell/lstm/affine/W", "cell/lstm/affine/b"]


def test_backward_twice_accumulates(rng):
    """Backward may run again without a new forward: parameter gradients add up."""
    x, h = var(rng, T, B, I), var(rng, 2, 2, B, H)
    y, _ = PF.gru(x, h, bidirectional=True)
    loss = F.sum(y * y)
    loss.forward()
    loss.backward()
    once = {k: p.g.copy() for k, p in nn.get_parameters().items()}
    loss.backward()
    for k, p in nn.get_parameters().items():
        np.testing.assert_allclose(p.g, 2 * once[k], rtol=1e-6, atol=1e-7)
    assert all(np.abs(g).max() > 0 for g in once.values())


@pytest.mark.parametrize("dtype, tolerance", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_lstm_gradients_through_the_compiled_step_match_numpys(rng, dtype, tolerance):
    """Two bidirectional layers, backward once through dpnb.kernels' compiled step and
    once through NumPy's passes: the same gradients to the dtype's rounding."""
    from dpnb import kernels

    inputs = [nn.Variable.from_numpy_array(v.d.astype(dtype), need_grad=True)
              for v in lstm_inputs(rng, layers=2, d=2)]
    outputs = F.lstm(*inputs, num_layers=2, bidirectional=True, training=True)
    weights = [nn.Variable.from_numpy_array(np.linspace(-1, 1, y.size).reshape(y.shape))
               for y in outputs]   # every output (y, h_n, c_n) gets a gradient
    loss = sum(F.sum(y * w) for y, w in zip(outputs, weights))
    grads = {}
    for compiled in (True, False):
        before = kernels.use(compiled)
        try:
            for v in inputs:
                v.grad.zero()
            loss.forward()
            loss.backward()
            grads[compiled] = [v.g.copy() for v in inputs]
        finally:
            kernels.use(before)
    for compiled, numpy_only in zip(grads[True], grads[False]):
        assert compiled.dtype == dtype and np.abs(compiled).max() > 0
        np.testing.assert_allclose(compiled, numpy_only, rtol=tolerance, atol=tolerance)
