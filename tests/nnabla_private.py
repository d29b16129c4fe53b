"""nnabla's private helpers that its tests import to build their references: the nnabla
suite runner's shims (``nnabla_suite_plugin`` installs them under nnabla's names), as
they are not nnabla's public API and dpnb does not have them.

- ``nnabla.normalization_functions``: ``_force_list``, ``_get_axes_excluding``,
  ``_apply_affine``;
- ``nnabla.utils.rnn``: ``_create_fixed_length_rnn``, ``_lstm``, ``_gru``, the recurrent
  functions unrolled step by step into elementary functions, the reference of
  ``F.rnn``, ``F.lstm`` and ``F.gru``;
- ``nnabla.parameter._create_parameter_by_initializer`` and
  ``nnabla.core.graph_def._create_initializer`` (an initializer from a network file's
  variable)."""
from __future__ import annotations

from collections.abc import Callable

import dpnb as nn
import dpnb.functions as F


def force_list(axis):
    return axis if hasattr(axis, "__iter__") else [axis]


def axes_excluding(ndim, axes):
    axes = [a + ndim if a < 0 else a for a in force_list(axes)]
    return [i for i in range(ndim) if i not in axes]


def apply_affine(x, scale=None, bias=None):
    if scale is not None:
        x *= scale
    if bias is not None:
        x += bias
    return x


def create_parameter_by_initializer(initializer, shape, need_grad):
    """A variable of ``shape`` holding ``initializer(shape)`` (or the array given)."""
    v = nn.Variable(shape, need_grad=need_grad)
    v.d = initializer(shape) if callable(initializer) else initializer
    return v


def _rnn_cell(nonlinearity: str) -> Callable:
    """One Elman step: h = act(W [x, h] + b), W (H, I + H)."""
    activation = {"tanh": F.tanh, "relu": F.relu}[nonlinearity]

    def step(x, state, w, b):
        xh = F.concatenate(x, state[0], axis=1)
        return (activation(F.affine(xh, F.transpose(w, (1, 0)), b)),)
    return step


def _lstm_cell(x, state, w, b):
    """One LSTM step, W (4, H, I + H) and b (4, H) in nnabla's gate order i, f, g, o."""
    h, c = state
    gates, hidden = w.shape[0], w.shape[1]
    weight = F.transpose(F.reshape(w, (gates * hidden, w.shape[2])), (1, 0))
    bias = None if b is None else F.reshape(b, (gates * hidden,))
    a = F.reshape(F.affine(F.concatenate(x, h, axis=1), weight, bias), (x.shape[0], gates, hidden))
    i, f, g, o = F.split(a, axis=1)
    c = F.sigmoid(f) * c + F.sigmoid(i) * F.tanh(g)
    return F.sigmoid(o) * F.tanh(c), c


def _gru_cell(x, state, w, b):
    """One GRU step, W (3, H, I + H) for r, z, n and b (4, H) for b_r, b_z, b_in, b_hn:
    n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h = (1 - z) n + z h."""
    h = state[0]
    inputs = x.shape[1]
    b_r, b_z, b_in, b_hn = (None,) * 4 if b is None else F.split(b, axis=0)
    xh = F.concatenate(x, h, axis=1)
    r = F.sigmoid(F.affine(xh, F.transpose(w[0], (1, 0)), b_r))
    z = F.sigmoid(F.affine(xh, F.transpose(w[1], (1, 0)), b_z))
    w_in, w_hn = F.transpose(w[2, :, :inputs], (1, 0)), F.transpose(w[2, :, inputs:], (1, 0))
    n = F.tanh(F.affine(x, w_in, b_in) + r * F.affine(h, w_hn, b_hn))
    return ((1 - z) * n + z * h,)


def _unrolled(xs0, states, w0, w, b, num_layers, num_directions, with_bias, cell):
    """The layers and directions run step by step with ``cell``: ``states`` the initial
    states (h, and c for the LSTM), each (L, D, B, H).  Returns the outputs
    (T, B, D * H) and each state after the last step, (L, D, B, H)."""
    xs = [xs0[t] for t in range(xs0.shape[0])]
    finals = [[] for _ in states]
    for layer in range(num_layers):
        weights = w0 if layer == 0 else w[layer - 1]
        per_direction = []
        for d in range(num_directions):
            state = tuple(s[layer, d] for s in states)
            bias = b[layer, d] if with_bias else None
            hs = [None] * len(xs)
            for t in (range(len(xs)) if d == 0 else reversed(range(len(xs)))):
                state = cell(xs[t], state, weights[d], bias)
                hs[t] = state[0]
            per_direction.append(hs)
            for final, s in zip(finals, state):
                final.append(s)
        xs = [hs[0] if len(hs) == 1 else F.concatenate(*hs, axis=1)
              for hs in zip(*per_direction)]
    shape = (num_layers, num_directions) + states[0].shape[2:]
    return (F.stack(*xs, axis=0),) + tuple(F.reshape(F.stack(*f, axis=0), shape) for f in finals)


def create_fixed_length_rnn(xs0, h0, w0, w, b, num_layers, nonlinearity, num_directions,
                             with_bias):
    """``F.rnn`` unrolled: xs0 (T, B, I), h0 (L, D, B, H), w0 (D, H, I + H),
    w (L-1, D, H, D * H + H), b (L, D, H); returns ys (T, B, D * H) and hn."""
    return _unrolled(xs0, (h0,), w0, w, b, num_layers, num_directions, with_bias,
                     _rnn_cell(nonlinearity))


def create_fixed_length_lstm(xs0, h0, c0, w0, w, b, num_layers, num_directions, with_bias):
    """``F.lstm`` unrolled: xs0 (T, B, I), h0 and c0 (L, D, B, H), w0 (D, 4, H, I + H),
    w (L-1, D, 4, H, D * H + H), b (L, D, 4, H); returns ys (T, B, D * H), hn and cn."""
    return _unrolled(xs0, (h0, c0), w0, w, b, num_layers, num_directions, with_bias,
                     _lstm_cell)


def create_fixed_length_gru(xs0, h0, w0, w, b, num_layers, num_directions, with_bias):
    """``F.gru`` unrolled: xs0 (T, B, I), h0 (L, D, B, H), w0 (D, 3, H, I + H),
    w (L-1, D, 3, H, D * H + H), b (L, D, 4, H); returns ys (T, B, D * H) and hn."""
    return _unrolled(xs0, (h0,), w0, w, b, num_layers, num_directions, with_bias, _gru_cell)


def install() -> None:
    """Put the helpers where nnabla's tests import them from."""
    import dpnb.core.graph_def as graph_def
    import dpnb.core.proto_initializer as proto_initializer
    import dpnb.normalization_functions as normalization
    import dpnb.parameter as parameter
    import dpnb.utils.rnn as rnn

    normalization._force_list = force_list
    normalization._get_axes_excluding = axes_excluding
    normalization._apply_affine = apply_affine
    rnn._create_fixed_length_rnn = create_fixed_length_rnn
    rnn._create_fixed_length_lstm = create_fixed_length_lstm
    rnn._create_fixed_length_gru = create_fixed_length_gru
    parameter._create_parameter_by_initializer = create_parameter_by_initializer
    graph_def._create_initializer = proto_initializer.initializer_from_proto
