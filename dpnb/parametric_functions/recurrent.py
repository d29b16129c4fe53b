"""Recurrent layers and their parameters: ``rnn/weight_l0``, ``rnn/weight``, ``rnn/bias``
(likewise ``lstm/...`` and ``gru/...``) for the whole-sequence layers, and
``lstm/affine/W`` and ``lstm/affine/b`` for the one-step ``lstm_cell`` and ``LSTMCell``."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import functions as F
from ..errors import DpnbError
from ..graph import Variable, get_no_grad
from ..initializer import ConstantInitializer, UniformInitializer, calc_uniform_lim_glorot
from ..parameter import get_parameter, get_parameter_or_create
from ._common import check_input, scope
from .linear import affine

__all__ = ["rnn", "lstm", "gru", "lstm_cell", "LSTMCell"]

Init = Callable | np.ndarray | None


def _default_weight(shape: tuple, inputs: int, rng) -> np.ndarray:
    """nnabla's default recurrent weight of ``shape`` (..., H, inputs + H): the input
    and the recurrent columns Glorot-uniform, each part with its own limit."""
    hidden = shape[-2]
    ih = UniformInitializer(calc_uniform_lim_glorot(inputs, hidden), rng)(shape[:-1] + (inputs,))
    hh = UniformInitializer(calc_uniform_lim_glorot(hidden, hidden), rng)(shape[:-1] + (hidden,))
    return np.concatenate((ih, hh), axis=-1)


def _sizes(fn_name: str, x, h, num_layers: int,
           bidirectional: bool) -> tuple[int, int, int, int]:
    """(input size, hidden size, layers, directions).  nnabla takes the layers from h
    and does not read ``num_layers``; dpnb refuses a ``num_layers`` other than the
    default that disagrees with h."""
    check_input(fn_name, x, 3)
    if not isinstance(h, Variable) or h.ndim != 4:
        raise DpnbError(f"PF.{fn_name} expects h as an nn.Variable of shape "
                        f"(num_layers, D, B, H), got "
                        f"{h.shape if isinstance(h, Variable) else type(h).__name__}")
    if num_layers != 1 and num_layers != h.shape[0]:
        raise DpnbError(f"PF.{fn_name}: num_layers={num_layers!r} but h has {h.shape[0]} "
                        f"layer(s) (shape {h.shape}); the layers are h's first axis, so give h "
                        "one state per layer, or leave num_layers out")
    return x.shape[2], h.shape[3], h.shape[0], 2 if bidirectional else 1


def _made(name: str, shape: tuple, init: Init, fix_parameters: bool) -> Variable:
    return get_parameter_or_create(name, shape, init, True, not fix_parameters)


def _reused_or_made(fn_name: str, name: str, shape: tuple, init: Init, default: Callable,
                    fix_parameters: bool) -> Variable:
    """An existing parameter as it is (as nnabla's lstm and gru do), else a new one from
    ``init`` or, where that is None, ``default()`` (drawn only then)."""
    existing = get_parameter(name)
    if existing is None:
        return _made(name, shape, default() if init is None else init, fix_parameters)
    if existing.shape != shape:
        raise DpnbError(f"PF.{fn_name}: parameter {name!r} exists with shape {existing.shape}, "
                        f"but this layer needs {shape}; load parameters saved for this layout, "
                        "or use another parameter_scope")
    return existing.get_unlinked_variable(need_grad=not fix_parameters and not get_no_grad())


def _gated_parameters(fn_name: str, gates: int, bias_gates: int, x, h, w0_init, w_init, b_init,
                      num_layers, bidirectional, rng, with_bias, fix_parameters) -> tuple:
    """weight_l0, weight (None for one layer) and bias (None without) of lstm or gru."""
    inputs, hidden, layers, d = _sizes(fn_name, x, h, num_layers, bidirectional)
    w0_shape = (d, gates, hidden, inputs + hidden)
    w0 = _reused_or_made(fn_name, "weight_l0", w0_shape, w0_init,
                         lambda: _default_weight(w0_shape, inputs, rng), fix_parameters)
    w = None
    if layers > 1:
        w_shape = (layers - 1, d, gates, hidden, d * hidden + hidden)
        w = _reused_or_made(fn_name, "weight", w_shape, w_init,
                            lambda: _default_weight(w_shape, d * hidden, rng), fix_parameters)
    b = None
    if with_bias:
        b = _reused_or_made(fn_name, "bias", (layers, d, bias_gates, hidden), b_init,
                            ConstantInitializer, fix_parameters)
    return w0, w, b, layers


def rnn(x: Variable, h: Variable, w0_init: Init = None, w_init: Init = None, b_init: Init = None,
        num_layers: int = 1, nonlinearity: str = "tanh", dropout: float = 0.0,
        bidirectional: bool = False, training: bool = True, rng=None, with_bias: bool = True,
        fix_parameters: bool = False, name: str | None = None) -> tuple[Variable, Variable]:
    """Elman RNN layer owning ``rnn/weight_l0`` (D, H, I + H), ``rnn/weight``
    (L-1, D, H, D * H + H; two layers or more) and ``rnn/bias`` (L, D, H).  As in
    nnabla, the number of layers is h's first axis."""
    with scope(name, "rnn"):
        inputs, hidden, layers, d = _sizes("rnn", x, h, num_layers, bidirectional)
        # nnabla draws both default weights before looking the parameters up.
        if w0_init is None:
            w0_init = _default_weight((d, hidden, inputs + hidden), inputs, rng)
        if w_init is None:
            w_init = _default_weight((layers - 1, d, hidden, d * hidden + hidden), d * hidden, rng)
        if with_bias and b_init is None:
            b_init = ConstantInitializer()
        w0 = _made("weight_l0", (d, hidden, inputs + hidden), w0_init, fix_parameters)
        w = None
        if layers > 1:
            w = _made("weight", (layers - 1, d, hidden, d * hidden + hidden), w_init,
                      fix_parameters)
        b = _made("bias", (layers, d, hidden), b_init, fix_parameters) if with_bias else None
        return F.rnn(x, h, weight_l0=w0, weight=w, bias=b, num_layers=layers,
                     nonlinearity=nonlinearity, dropout=dropout, bidirectional=bidirectional,
                     training=training)


def lstm(x: Variable, h: Variable, c: Variable, w0_init: Init = None, w_init: Init = None,
         b_init: Init = None, num_layers: int = 1, dropout: float = 0.0,
         bidirectional: bool = False, training: bool = True, rng=None, with_bias: bool = True,
         fix_parameters: bool = False,
         name: str | None = None) -> tuple[Variable, Variable, Variable]:
    """LSTM layer owning ``lstm/weight_l0`` (D, 4, H, I + H), ``lstm/weight``
    (L-1, D, 4, H, D * H + H) and ``lstm/bias`` (L, D, 4, H); the number of layers
    is h's first axis, as in nnabla."""
    with scope(name, "lstm"):
        w0, w, b, layers = _gated_parameters("lstm", 4, 4, x, h, w0_init, w_init, b_init,
                                             num_layers, bidirectional, rng, with_bias,
                                             fix_parameters)
        return F.lstm(x, h, c, weight_l0=w0, weight=w, bias=b, num_layers=layers,
                      dropout=dropout, bidirectional=bidirectional, training=training)


def gru(x: Variable, h: Variable, w0_init: Init = None, w_init: Init = None, b_init: Init = None,
        num_layers: int = 1, dropout: float = 0.0, bidirectional: bool = False,
        training: bool = True, rng=None, with_bias: bool = True, fix_parameters: bool = False,
        name: str | None = None) -> tuple[Variable, Variable]:
    """GRU layer owning ``gru/weight_l0`` (D, 3, H, I + H), ``gru/weight``
    (L-1, D, 3, H, D * H + H) and ``gru/bias`` (L, D, 4, H); the number of layers is
    h's first axis, as in nnabla."""
    with scope(name, "gru"):
        w0, w, b, layers = _gated_parameters("gru", 3, 4, x, h, w0_init, w_init, b_init,
                                             num_layers, bidirectional, rng, with_bias,
                                             fix_parameters)
        return F.gru(x, h, weight_l0=w0, weight=w, bias=b, num_layers=layers, dropout=dropout,
                     bidirectional=bidirectional, training=training)


def lstm_cell(x: Variable, h: Variable, c: Variable, state_size: int, w_init: Init = None,
              b_init: Init = None, fix_parameters: bool = False,
              name: str | None = None) -> tuple[Variable, Variable]:
    """One LSTM step from x (B, I), h and c (B, state_size): returns (h, c).  One
    affine of [x, h] owns ``lstm/affine/W`` (I + state_size, 4, state_size) and
    ``lstm/affine/b`` (4, state_size), gates in nnabla's order i, o, f, cell input."""
    for label, var in (("x", x), ("h", h), ("c", c)):
        if not isinstance(var, Variable) or var.ndim != 2:
            raise DpnbError(f"PF.lstm_cell expects {label} as an nn.Variable of shape "
                            f"(batch_size, size), got "
                            f"{var.shape if isinstance(var, Variable) else type(var).__name__}")
    if h.shape != (x.shape[0], state_size) or c.shape != h.shape:
        raise DpnbError(f"PF.lstm_cell expects h and c of shape (batch_size, state_size) = "
                        f"{(x.shape[0], state_size)}, got h {h.shape} and c {c.shape}")
    with scope(name, "lstm"):
        gates = affine(F.concatenate(x, h, axis=1), (4, state_size), w_init=w_init,
                       b_init=b_init, fix_parameters=fix_parameters)
        batch = x.shape[0]
        i, o, f, g = (F.reshape(F.slice(gates, (0, k, 0), (batch, k + 1, state_size)),
                                (batch, state_size)) for k in range(4))
        c_t = F.sigmoid(f) * c + F.sigmoid(i) * F.tanh(g)
        return F.sigmoid(o) * F.tanh(c_t), c_t


class LSTMCell:
    """A stateful LSTM cell: each call runs ``lstm_cell`` on x from the states the
    last call left (zeros at first, unless ``h`` and ``c`` are given)."""

    def __init__(self, batch_size: int, state_size: int, h: Variable | None = None,
                 c: Variable | None = None, name: str | None = None):
        self.batch_size = batch_size
        self.state_size = state_size
        self.name = name
        self.h = self._state(h)
        self.c = self._state(c)

    def _state(self, given: Variable | None) -> Variable:
        if given is not None:
            return given
        v = Variable((self.batch_size, self.state_size))
        v.data.zero()
        return v

    def reset_state(self) -> None:
        """Zero the states h and c."""
        self.h.data.zero()
        self.c.data.zero()

    def __call__(self, x: Variable, w_init: Init = None, b_init: Init = None,
                 fix_parameters: bool = False) -> Variable:
        """One step: updates and returns h (c is updated too)."""
        self.h, self.c = lstm_cell(x, self.h, self.c, self.state_size, w_init, b_init,
                                   fix_parameters=fix_parameters, name=self.name)
        return self.h
