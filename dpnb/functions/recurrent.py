"""Recurrent layers over whole sequences: Elman RNN, LSTM and GRU, as nnabla has them.

Each is one Function: forward runs the time loop of every layer and direction, backward
runs back through time.  The input projections of all steps are one matrix product
per layer, both directions together; a step costs one (batched) product with the
recurrent weights and a few elementwise operations over the batch.  Directions run
side by side in "step order": the backward direction's arrays are stored reversed in
time, so that step ``s`` of every direction is ``[:, s]``."""
from __future__ import annotations

import numpy as np

from .. import kernels
from ..graph import Function, Variable
from .base import argument_error, default_outputs
from .graph_module import composite_backward_graph
from .specs import FunctionSpec, Params, plain, public

__all__ = ["rnn", "lstm", "gru"]


def _sigmoid_(xp, a) -> None:
    """a = 1 / (1 + exp(-a)) in place, as 0.5 tanh(a / 2) + 0.5 (no overflow)."""
    a *= 0.5
    xp.tanh(a, out=a)
    a *= 0.5
    a += 0.5


def _bmm(xp, a, b):
    """a @ b per direction (leading axis); one plain product where there is one direction."""
    if a.shape[0] == 1:
        return xp.matmul(a[0], b[0])[None]
    return xp.matmul(a, b)


def _step_product(xp, a, w):
    """a @ w^T per direction (leading axis), for a step's few samples: computed as
    (w @ a^T)^T, a transposed view, as BLAS multiplies faster with the long side as rows
    (twice as fast for a batch of 16 against 1024 gate rows)."""
    return _bmm(xp, w, a.swapaxes(-1, -2)).swapaxes(-1, -2)


def _to_steps(xp, a):
    """(T, B, D, K) in time order -> (D, T, B, K) in step order (direction 1 reversed);
    a view of ``a`` for one direction."""
    if a.shape[2] == 1:
        return a.transpose(2, 0, 1, 3)
    steps = xp.empty((a.shape[2], a.shape[0], a.shape[1], a.shape[3]), a.dtype)
    steps[0] = a[:, :, 0]
    if a.shape[2] == 2:
        steps[1] = a[::-1, :, 1]
    return steps


def _to_time(xp, steps):
    """(D, T, B, K) in step order -> (T, B, D, K) in time order; a view of ``steps`` for
    one direction."""
    d, t, b, k = steps.shape
    if d == 1:
        return steps.transpose(1, 2, 0, 3)
    a = xp.empty((t, b, d, k), steps.dtype)
    a[:, :, 0] = steps[0]
    if d == 2:
        a[:, :, 1] = steps[1][::-1]
    return a


def _at(F, v, *index):
    """``v[index]`` for leading integer indices, as a slice and a reshape (functions with
    graph backwards)."""
    n = len(index)
    piece = F.slice(v, list(index) + [0] * (v.ndim - n),
                    [i + 1 for i in index] + list(v.shape[n:]), [1] * v.ndim)
    return F.reshape(piece, v.shape[n:], inplace=False)


def _cols(F, v, begin: int, end: int):
    """``v[..., begin:end]``, as a slice."""
    return F.slice(v, [0] * (v.ndim - 1) + [begin], list(v.shape[:-1]) + [end], [1] * v.ndim)


class _Recurrent(Function):
    """What the three layers share: argument checks, the weights of each layer in the
    internal gate order, the input projections, the layer loop and the gradients of
    weights and inputs.  A subclass gives the gate counts and one layer's time loop
    (``run_layer``) and its way back (``back_layer``)."""

    gates = 1        # blocks of H rows per weight matrix
    bias_gates = 1   # blocks of H per bias (GRU keeps a 4th, the recurrent bias of n)
    order = (0,)     # nnabla's gate index of each internal block
    has_cell = False

    def __init__(self, num_layers: int, dropout: float | None, bidirectional: bool,
                 training: bool, has_weight: bool, has_bias: bool):
        self.num_layers = num_layers
        self.dropout = 0.0 if dropout is None else dropout
        self.bidirectional = bidirectional
        self.training = training
        self.has_weight = has_weight
        self.has_bias = has_bias

    # -- setup --------------------------------------------------------------
    def check_arguments(self) -> None:
        L = self.num_layers
        if not isinstance(L, (int, np.integer)) or isinstance(L, bool) or L < 1:
            raise self.error(f"num_layers must be an int >= 1, got {L!r}")
        try:
            dropout = float(self.dropout)
        except (TypeError, ValueError):
            raise self.error(f"dropout must be a number in [0, 1), got {self.dropout!r}") from None
        if not 0.0 <= dropout < 1.0:
            raise self.error(f"dropout must be a number in [0, 1), got {self.dropout!r}")
        if dropout != 0.0 and self.training:
            raise self.error(
                f"dropout={dropout} with training=True is not supported: nnabla's CPU backend "
                "ignores it and its cuDNN backend drops randomly between layers, and dpnb does "
                "neither; pass dropout=0 (or training=False), or stack single-layer calls with "
                "F.dropout between them")
        if self.has_weight != (L > 1):
            raise self.error(
                f"weight (the layers above the first) must be given exactly when num_layers > 1; "
                f"got num_layers={L} and weight {'given' if self.has_weight else 'None'}; "
                + ("drop weight or raise num_layers" if self.has_weight
                   else "pass weight of shape (num_layers - 1, D, ..., D * H + H)"))

    def weight_shape(self, lead: tuple, inputs: int) -> tuple:
        """The shape of a weight with ``lead`` axes before (D, G, H, inputs + H)."""
        return lead + (self.D, self.gates, self.H, inputs + self.H)

    def bias_shape(self) -> tuple:
        return (self.num_layers, self.D, self.bias_gates, self.H)

    def output_specs(self, inputs):
        self.check_arguments()
        names = ["x", "h"] + (["c"] if self.has_cell else []) + ["weight_l0"]
        names += (["weight"] if self.has_weight else []) + (["bias"] if self.has_bias else [])
        v = dict(zip(names, inputs))
        x, h = v["x"], v["h"]
        for name, var in v.items():
            if not np.issubdtype(var.dtype, np.floating):
                raise self.error(f"{name} must be floating point, got {var.dtype}")
        if x.ndim != 3:
            raise self.error(f"x must have shape (T, B, I) (steps, batch, inputs), got {x.shape}")
        T, B, I = x.shape
        self.D = D = 2 if self.bidirectional else 1
        L = self.num_layers
        if h.ndim != 4 or h.shape[:3] != (L, D, B):
            raise self.error(
                f"h must have shape (num_layers, D, B, H) = ({L}, {D}, {B}, H) for x of shape "
                f"{x.shape}, num_layers={L} and bidirectional={self.bidirectional}; got {h.shape}")
        self.T, self.B, self.H = T, B, h.shape[3]
        if self.has_cell and v["c"].shape != h.shape:
            raise self.error(f"c must have the shape of h, {h.shape}; got {v['c'].shape}")
        expected = {"weight_l0": self.weight_shape((), I)}
        if self.has_weight:
            expected["weight"] = self.weight_shape((L - 1,), D * self.H)
        if self.has_bias:
            expected["bias"] = self.bias_shape()
        for name, shape in expected.items():
            if v[name].shape != shape:
                raise self.error(f"{name} must have shape {shape} for x of shape {x.shape} and "
                                 f"h of shape {h.shape}; got {v[name].shape}")
        self.names = names
        self.dtype = np.result_type(*(var.dtype for var in inputs))
        state = ((L, D, B, self.H), self.dtype)
        return [((T, B, D * self.H), self.dtype)] + [state] * (2 if self.has_cell else 1)

    # -- the parameters of one layer ---------------------------------------------
    def layer_weights(self, xp, v: dict, layer: int):
        """Layer ``layer``'s weights in internal gate order: the input part as one
        (D * G * H, In) matrix and the recurrent part as a (D, G * H, H) view."""
        w = v["weight_l0"] if layer == 0 else v["weight"][layer - 1]
        inputs = w.shape[-1] - self.H
        w = w.reshape(self.D, self.gates, self.H, inputs + self.H)[:, list(self.order)]
        w = w.reshape(self.D, self.gates * self.H, inputs + self.H)
        wx = w[:, :, :inputs].reshape(self.D * self.gates * self.H, inputs)
        return wx, w[:, :, inputs:]

    def layer_bias(self, xp, v: dict, layer: int):
        """Layer ``layer``'s bias as (D, bias_gates * H) in internal order, or None."""
        if not self.has_bias:
            return None
        b = v["bias"][layer].reshape(self.D, self.bias_gates, self.H)
        order = list(self.order) + list(range(self.gates, self.bias_gates))
        return b[:, order].reshape(self.D, self.bias_gates * self.H)

    def to_nnabla_order(self, xp, g, blocks: int):
        """Undo the internal gate order along axis 1 of ``g`` (D, blocks * H, ...)."""
        rest = g.shape[2:]
        g = g.reshape((self.D, blocks, self.H) + rest)
        out = xp.empty_like(g)
        order = list(self.order) + list(range(self.gates, blocks))
        out[:, order] = g
        return out

    # -- passes ----------------------------------------------------------
    def forward_arrays(self, xp, xs):
        v = {n: a.astype(self.dtype, copy=False) for n, a in zip(self.names, xs)}
        T, B, D, H, G = self.T, self.B, self.D, self.H, self.gates
        layer_input = v["x"]
        h_n = xp.empty((self.num_layers, D, B, H), self.dtype)
        c_n = xp.empty_like(h_n) if self.has_cell else None
        self.saved = [] if self.training else None
        for layer in range(self.num_layers):
            wx, wh = self.layer_weights(xp, v, layer)
            bias = self.layer_bias(xp, v, layer)
            flat = layer_input.reshape(T * B, -1)
            proj = xp.matmul(flat, wx.T).reshape(T, B, D, G * H)
            proj = _to_steps(xp, proj)
            if bias is not None:
                proj += bias[:, None, None, :G * H]
            c0 = v["c"][layer] if self.has_cell else None
            hs, cs, saved = self.run_layer(xp, proj, wh, bias, v["h"][layer], c0)
            h_n[layer] = hs[:, T]
            if self.has_cell:
                c_n[layer] = cs[:, T]
            if self.saved is not None:
                self.saved.append((flat, hs, cs, saved))
            layer_input = _to_time(xp, hs[:, 1:]).reshape(T, B, D * H)
        # One direction's y is a view of the states kept for backward: hand out a copy.
        y = layer_input.copy() if D == 1 else layer_input
        return (y, h_n) + ((c_n,) if self.has_cell else ())

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        if not self.training:
            raise self.error(_NO_GRADIENT_IN_INFERENCE)
        v = {n: a.astype(self.dtype, copy=False) for n, a in zip(self.names, xs)}
        need = dict(zip(self.names, need_grads))
        T, B, D, H = self.T, self.B, self.D, self.H
        grads = {n: xp.zeros(v[n].shape, self.dtype) for n in self.names if need[n]}
        g_out = gys[0].reshape(T, B, D, H)
        for layer in reversed(range(self.num_layers)):
            flat, hs, cs, saved = self.saved[layer]
            wx, wh = self.layer_weights(xp, v, layer)
            gc_n = gys[2][layer] if self.has_cell else None
            dx_side, dh_side, dh0, dc0 = self.back_layer(
                xp, _to_steps(xp, g_out), gys[1][layer], gc_n, hs, cs, saved, wh.swapaxes(1, 2))
            if need["h"]:
                grads["h"][layer] = dh0
            if self.has_cell and need["c"]:
                grads["c"][layer] = dc0
            rows = _to_time(xp, dx_side).reshape(T * B, -1)
            w_name = "weight_l0" if layer == 0 else "weight"
            if need[w_name]:
                gwx = xp.matmul(rows.T, flat).reshape(D, -1, flat.shape[1])
                gwh = _bmm(xp, dh_side.reshape(D, T * B, -1).transpose(0, 2, 1),
                           hs[:, :T].reshape(D, T * B, H))
                gw = self.to_nnabla_order(xp, xp.concatenate([gwx, gwh], axis=2), self.gates)
                target = grads[w_name] if layer == 0 else grads[w_name][layer - 1]
                target[...] = gw.reshape(target.shape)
            if self.has_bias and need["bias"]:
                gb = self.bias_grad(xp, dx_side, dh_side)
                grads["bias"][layer] = self.to_nnabla_order(
                    xp, gb, self.bias_gates).reshape(grads["bias"][layer].shape)
            if layer > 0:
                g_out = xp.matmul(rows, wx).reshape(T, B, D, H)
            elif need["x"]:
                grads["x"][...] = xp.matmul(rows, wx).reshape(T, B, -1)
        return tuple(grads.get(n) for n in self.names)

    def bias_grad(self, xp, dx_side, dh_side):
        """The bias gradient (D, bias_gates * H) from the pre-activation gradients."""
        return dx_side.sum(axis=(1, 2))

    # -- the same computation as a graph of functions: the second-order gradient --------
    def composite(self, F, xs):
        """What it computes, written with dpnb functions (its graph backward differentiates
        it): per layer and direction, the input projection of every step in one affine,
        then each step's cell (``cell``) in the direction's time order; a layer's input is
        the one below's states, directions side by side.  Gates stay in nnabla's order.
        No dropout: a layer with a gradient is built for training, where check_arguments
        refuses it (with training=False, nnabla applies none)."""
        v = dict(zip(self.names, xs))
        T, B, D, H, L = self.T, self.B, self.D, self.H, self.num_layers
        rows = self.gates * H
        layer_input = v["x"]
        last_h, last_c = [], []
        for layer in range(L):
            states = []
            for d in range(D):
                w = (_at(F, v["weight_l0"], d) if layer == 0
                     else _at(F, v["weight"], layer - 1, d))
                w = F.reshape(w, (rows, w.shape[-1]), inplace=False)
                inputs = w.shape[1] - H
                wx = F.transpose(_cols(F, w, 0, inputs), (1, 0))
                wh = F.transpose(_cols(F, w, inputs, inputs + H), (1, 0))
                bias = (F.reshape(_at(F, v["bias"], layer, d), (self.bias_gates * H,),
                                  inplace=False) if self.has_bias else None)
                bias_x = None if bias is None else (bias if self.bias_gates == self.gates
                                                    else _cols(F, bias, 0, rows))
                proj = F.affine(layer_input, wx, bias_x, base_axis=2)  # (T, B, gates * H)
                params = self.cell_params(F, wh, bias)
                h = _at(F, v["h"], layer, d)
                c = _at(F, v["c"], layer, d) if self.has_cell else None
                hs = [None] * T
                for t in (range(T) if d == 0 else reversed(range(T))):
                    h, c = self.cell(F, _at(F, proj, t), h, c, params)
                    hs[t] = h
                states.append(hs)
                last_h.append(h)
                last_c.append(c)
            steps = [at_t[0] if D == 1 else F.concatenate(*at_t, axis=1)
                     for at_t in zip(*states)]
            layer_input = F.stack(*steps, axis=0)  # (T, B, D * H)
        shape = (L, D, B, H)
        out = [layer_input, F.reshape(F.stack(*last_h, axis=0), shape, inplace=False)]
        if self.has_cell:
            out.append(F.reshape(F.stack(*last_c, axis=0), shape, inplace=False))
        return out

    def cell_params(self, F, wh, bias) -> tuple:
        """What every step of one layer and direction reads besides its input projection:
        the recurrent weights transposed, (H, gates * H)."""
        return (wh,)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Its composite differentiated (as backward, only a layer built for training has
        one)."""
        if not self.training:
            raise self.error(_NO_GRADIENT_IN_INFERENCE)
        return composite_backward_graph(self, F, xs, ys, gys, need_grads)


_NO_GRADIENT_IN_INFERENCE = (
    "backward needs training=True (nnabla computes no gradient of a layer built with "
    "training=False); build it with training=True, or set need_grad=False on its inputs and "
    "parameters")


def _recurrent_params(fn) -> Params:
    return plain({"num_layers": fn.num_layers, "dropout": fn.dropout,
                  "bidirectional": fn.bidirectional, "training": fn.training})


def _recurrent(function: str, states: int, nonlinearity: bool):
    """x, the states, weight_l0, then weight where there are several layers and bias where
    the file has one more input (nnabla's input order)."""
    def build(xs, p, n):
        rest = list(xs[2 + states:])
        weight = rest.pop(0) if p["num_layers"] > 1 and rest else None
        bias = rest.pop(0) if rest else None
        options = {"nonlinearity": p["nonlinearity"]} if nonlinearity else {}
        return public(function)(*xs[:2 + states], weight=weight, bias=bias,
                                num_layers=p["num_layers"], dropout=p["dropout"],
                                bidirectional=p["bidirectional"], training=p["training"],
                                **options)
    return build


class RNN(_Recurrent):
    """Elman RNN: h_t = act(W_x x_t + W_h h_{t-1} + b), act tanh or relu."""

    nnabla_spec = FunctionSpec("RNN", "rnn_param",
                               ("num_layers", "nonlinearity", "dropout", "bidirectional",
                                "training"),
                               lambda fn: {**_recurrent_params(fn),
                                           "nonlinearity": fn.nonlinearity},
                               _recurrent("rnn", 1, True))

    def __init__(self, nonlinearity: str, *args):
        super().__init__(*args)
        self.nonlinearity = nonlinearity

    def check_arguments(self):
        if self.nonlinearity not in ("tanh", "relu"):
            raise self.error(f"nonlinearity must be 'tanh' or 'relu', got {self.nonlinearity!r}")
        super().check_arguments()

    def weight_shape(self, lead, inputs):
        return lead + (self.D, self.H, inputs + self.H)

    def bias_shape(self):
        return (self.num_layers, self.D, self.H)

    def cell(self, F, p, h, c, params):
        a = p + F.affine(h, params[0])
        return (F.relu(a) if self.nonlinearity == "relu" else F.tanh(a)), None

    def run_layer(self, xp, proj, wh, bias, h0, c0):
        T = proj.shape[1]
        hs = xp.empty((self.D, T + 1) + h0.shape[1:], self.dtype)
        hs[:, 0] = h0
        relu = self.nonlinearity == "relu"
        for s in range(T):
            a = proj[:, s]
            a += _step_product(xp, hs[:, s], wh)
            if relu:
                xp.maximum(a, 0, out=hs[:, s + 1])
            else:
                xp.tanh(a, out=hs[:, s + 1])
        return hs, None, None

    def back_layer(self, xp, g_steps, gh_n, gc_n, hs, cs, saved, wht):
        T = g_steps.shape[1]
        out = hs[:, 1:]
        slope = (out > 0).astype(self.dtype) if self.nonlinearity == "relu" else 1 - out * out
        da = xp.empty(g_steps.shape, self.dtype)
        dh = gh_n.copy()
        for s in reversed(range(T)):
            dh += g_steps[:, s]
            xp.multiply(dh, slope[:, s], out=da[:, s])
            dh = _step_product(xp, da[:, s], wht)
        return da, da, dh, None


class LSTM(_Recurrent):
    """LSTM with nnabla's gates i, f, g (cell input), o; kept internally as o, i, f, g
    so that the sigmoid gates and the gates the cell gradient drives are contiguous."""

    nnabla_spec = FunctionSpec("LSTM", "lstm_param",
                               ("num_layers", "dropout", "bidirectional", "training"),
                               _recurrent_params, _recurrent("lstm", 2, False))

    gates = 4
    bias_gates = 4
    order = (3, 0, 1, 2)
    has_cell = True

    def cell(self, F, p, h, c, params):
        H = self.H
        a = p + F.affine(h, params[0])
        i, f, o = (F.sigmoid(_cols(F, a, k * H, (k + 1) * H)) for k in (0, 1, 3))
        g = F.tanh(_cols(F, a, 2 * H, 3 * H))
        c = f * c + i * g
        return o * F.tanh(c), c

    def run_layer(self, xp, proj, wh, bias, h0, c0):
        T, H = proj.shape[1], self.H
        hs = xp.empty((self.D, T + 1) + h0.shape[1:], self.dtype)
        cs = xp.empty_like(hs)
        tcs = xp.empty((self.D, T) + h0.shape[1:], self.dtype)
        hs[:, 0], cs[:, 0] = h0, c0
        for s in range(T):
            a = proj[:, s]
            a += _step_product(xp, hs[:, s], wh)
            _sigmoid_(xp, a[..., :3 * H])
            g = a[..., 3 * H:]
            xp.tanh(g, out=g)
            c = cs[:, s + 1]
            xp.multiply(a[..., 2 * H:3 * H], cs[:, s], out=c)
            c += a[..., H:2 * H] * g
            xp.tanh(c, out=tcs[:, s])
            xp.multiply(a[..., :H], tcs[:, s], out=hs[:, s + 1])
        return hs, cs, (proj, tcs)

    def back_layer(self, xp, g_steps, gh_n, gc_n, hs, cs, saved, wht):
        gates, tcs = saved
        T, H = g_steps.shape[1], self.H
        if kernels.for_arrays(xp, gates, g_steps, gh_n, gc_n):  # each step one loop
            da = xp.empty(gates.shape, self.dtype)
            dh, dc = gh_n.copy(), gc_n.copy()
            for s in reversed(range(T)):
                kernels.lstm_step_grads(dh, dc, g_steps[:, s], gates[:, s], tcs[:, s],
                                        cs[:, s], da[:, s])
                dh = _step_product(xp, da[:, s], wht)
            return da, da, dh, dc
        o, i, f, g = (gates[..., k * H:(k + 1) * H] for k in range(4))
        # Coefficients of every step at once: dc += dh * q; da_o = dh * k_o;
        # (da_i, da_f, da_g) = dc * k_c.
        q = o * (1 - tcs * tcs)
        k_o = tcs * o * (1 - o)
        k_c = xp.stack([g * i * (1 - i), cs[:, :T] * f * (1 - f), i * (1 - g * g)], axis=3)
        da = xp.empty(gates.shape, self.dtype)
        da_c = da.reshape(da.shape[:3] + (4, H))[:, :, :, 1:]
        dh, dc = gh_n.copy(), gc_n.copy()
        for s in reversed(range(T)):
            dh += g_steps[:, s]
            dc += dh * q[:, s]
            xp.multiply(dh, k_o[:, s], out=da[:, s, :, :H])
            xp.multiply(dc[:, :, None, :], k_c[:, s], out=da_c[:, s])
            dh = _step_product(xp, da[:, s], wht)
            dc *= f[:, s]
        return da, da, dh, dc


class GRU(_Recurrent):
    """GRU with nnabla's gates r, z, n and biases b_r, b_z, b_in, b_hn."""

    nnabla_spec = FunctionSpec("GRU", "gru_param",
                               ("num_layers", "dropout", "bidirectional", "training"),
                               _recurrent_params, _recurrent("gru", 1, False))

    gates = 3
    bias_gates = 4
    order = (0, 1, 2)

    def cell_params(self, F, wh, bias):
        """The recurrent weights of r and z, of n, and n's recurrent bias b_hn."""
        H = self.H
        return (_cols(F, wh, 0, 2 * H), _cols(F, wh, 2 * H, 3 * H),
                None if bias is None else _cols(F, bias, 3 * H, 4 * H))

    def cell(self, F, p, h, c, params):
        H = self.H
        wh_rz, wh_n, b_hn = params
        rz = F.sigmoid(_cols(F, p, 0, 2 * H) + F.affine(h, wh_rz))
        r, z = _cols(F, rz, 0, H), _cols(F, rz, H, 2 * H)
        n = F.tanh(_cols(F, p, 2 * H, 3 * H) + r * F.affine(h, wh_n, b_hn))
        return n + z * (h - n), None

    def run_layer(self, xp, proj, wh, bias, h0, c0):
        T, H = proj.shape[1], self.H
        hs = xp.empty((self.D, T + 1) + h0.shape[1:], self.dtype)
        hn = xp.empty((self.D, T) + h0.shape[1:], self.dtype)
        hs[:, 0] = h0
        b_hn = None if bias is None else bias[:, None, 3 * H:]
        for s in range(T):
            a = proj[:, s]
            hh = _step_product(xp, hs[:, s], wh)
            a[..., :2 * H] += hh[..., :2 * H]
            _sigmoid_(xp, a[..., :2 * H])
            n_h = hn[:, s]
            n_h[...] = hh[..., 2 * H:]
            if b_hn is not None:
                n_h += b_hn
            n = a[..., 2 * H:]
            n += a[..., :H] * n_h
            xp.tanh(n, out=n)
            step = hs[:, s] - n
            step *= a[..., H:2 * H]
            xp.add(n, step, out=hs[:, s + 1])
        return hs, None, (proj, hn)

    def back_layer(self, xp, g_steps, gh_n, gc_n, hs, cs, saved, wht):
        gates, hn = saved
        T, H = g_steps.shape[1], self.H
        r, z, n = (gates[..., k * H:(k + 1) * H] for k in range(3))
        k_n = (1 - z) * (1 - n * n)
        k_z = (hs[:, :T] - n) * z * (1 - z)
        k_r = hn * r * (1 - r)
        dh_side = xp.empty(gates.shape, self.dtype)
        dn = xp.empty(g_steps.shape, self.dtype)
        dh = gh_n.copy()
        for s in reversed(range(T)):
            dh += g_steps[:, s]
            da_n = dn[:, s]
            xp.multiply(dh, k_n[:, s], out=da_n)
            xp.multiply(da_n, k_r[:, s], out=dh_side[:, s, :, :H])
            xp.multiply(dh, k_z[:, s], out=dh_side[:, s, :, H:2 * H])
            xp.multiply(da_n, r[:, s], out=dh_side[:, s, :, 2 * H:])
            dh = dh * z[:, s] + _step_product(xp, dh_side[:, s], wht)
        dx_side = dh_side.copy()
        dx_side[..., 2 * H:] = dn
        return dx_side, dh_side, dh, None

    def bias_grad(self, xp, dx_side, dh_side):
        return xp.concatenate([dx_side.sum(axis=(1, 2)),
                               dh_side[..., 2 * self.H:].sum(axis=(1, 2))], axis=1)


def _inputs(owner: str, required: list, weight, bias) -> list:
    for name, var in (("weight", weight), ("bias", bias)):
        if var is not None and not isinstance(var, Variable):
            raise argument_error(owner, f"{name} must be an nn.Variable or None, got "
                                        f"{type(var).__name__}")
    return required + [w for w in (weight, bias) if w is not None]


def rnn(x: Variable, h: Variable, weight_l0: Variable, weight: Variable | None = None,
        bias: Variable | None = None, num_layers: int = 1, nonlinearity: str = "tanh",
        dropout: float | None = None, bidirectional: bool = False,
        training: bool = True, n_outputs: int = -1, outputs=None) -> tuple[Variable, Variable]:
    """Elman RNN over x (T, B, I) from h (L, D, B, H): returns y (T, B, D * H) and
    h_n (L, D, B, H).  weight_l0 (D, H, I + H), weight (L-1, D, H, D * H + H),
    bias (L, D, H)."""
    default_outputs("F.rnn", n_outputs, outputs)
    inputs = _inputs("F.rnn", [x, h, weight_l0], weight, bias)
    return RNN(nonlinearity, num_layers, dropout, bidirectional, training,
               weight is not None, bias is not None)(*inputs)


def lstm(x: Variable, h: Variable, c: Variable, weight_l0: Variable,
         weight: Variable | None = None, bias: Variable | None = None, num_layers: int = 1,
         dropout: float | None = None, bidirectional: bool = False,
         training: bool = True,
         n_outputs: int = -1, outputs=None) -> tuple[Variable, Variable, Variable]:
    """LSTM over x (T, B, I) from h, c (L, D, B, H): returns y (T, B, D * H), h_n and
    c_n.  weight_l0 (D, 4, H, I + H), weight (L-1, D, 4, H, D * H + H), bias
    (L, D, 4, H), gates in nnabla's order i, f, g, o."""
    default_outputs("F.lstm", n_outputs, outputs)
    inputs = _inputs("F.lstm", [x, h, c, weight_l0], weight, bias)
    return LSTM(num_layers, dropout, bidirectional, training,
                weight is not None, bias is not None)(*inputs)


def gru(x: Variable, h: Variable, weight_l0: Variable, weight: Variable | None = None,
        bias: Variable | None = None, num_layers: int = 1, dropout: float | None = None,
        bidirectional: bool = False, training: bool = True,
        n_outputs: int = -1, outputs=None) -> tuple[Variable, Variable]:
    """GRU over x (T, B, I) from h (L, D, B, H): returns y (T, B, D * H) and h_n.
    weight_l0 (D, 3, H, I + H) and weight (L-1, D, 3, H, D * H + H) with gates r, z, n;
    bias (L, D, 4, H) holds b_r, b_z, b_in, b_hn."""
    default_outputs("F.gru", n_outputs, outputs)
    inputs = _inputs("F.gru", [x, h, weight_l0], weight, bias)
    return GRU(num_layers, dropout, bidirectional, training,
               weight is not None, bias is not None)(*inputs)
