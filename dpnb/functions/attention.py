"""Attention: multi_head_attention, as nnabla composes it (query, key and value
projections, scaled dot products per head, softmax, weighted sum of the values,
output projection), with the heads batched through one matmul over stacked arrays.

Sequences are laid out ``(L, B, E)`` as in nnabla; head ``h`` of sample ``b`` owns
columns ``h * E / H`` to ``(h + 1) * E / H`` and is row ``b * H + h`` of the
attention weights ``(B * H, L_T, L_S)``."""
from __future__ import annotations

import numpy as np

from ..graph import Function, Variable
from .base import argument_error
from .graph_module import composite_backward_graph, on_variables
from .nn import affine
from .stochastic import dropout as _dropout

__all__ = ["multi_head_attention"]

_NAME = "F.multi_head_attention"

_FUSED = ("a fused step of dpnb's multi_head_attention, which nnabla builds from its primitive "
          "functions and has no type of its own for")  # why these have no nnabla_spec


def _heads(x, num_heads: int):
    """(L, B, E) -> a (B, H, L, E / H) view: one matrix per sample and head."""
    length, batch, embed = x.shape
    return x.reshape(length, batch, num_heads, embed // num_heads).transpose(1, 2, 0, 3)


def _unheads(x):
    """(B, H, L, D) -> (L, B, H * D), the inverse of ``_heads``."""
    batch, heads, length, dim = x.shape
    return x.transpose(2, 0, 1, 3).reshape(length, batch, heads * dim)


class AppendKey(Function):
    """(L, B, E) sequence with one more position at the end, ``bias`` (E elements)
    for every sample: nnabla's attention bias of the keys and values."""

    no_nnabla_spec = _FUSED

    grad_depends_on_inputs = False

    def output_specs(self, inputs):
        x, bias = inputs
        self.bias_shape = bias.shape
        length, batch, embed = x.shape
        return [((length + 1, batch, embed), x.dtype)]

    def forward_arrays(self, xp, xs):
        x, bias = xs
        y = xp.empty((x.shape[0] + 1,) + x.shape[1:], x.dtype)
        y[:-1] = x
        y[-1] = bias.reshape(1, -1)
        return (y,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        g = gys[0]
        gx = g[:-1].copy() if need_grads[0] else None
        gb = g[-1].sum(axis=0).reshape(self.bias_shape) if need_grads[1] else None
        return gx, gb


class AttentionWeights(Function):
    """softmax over keys of ``scale * q_h k_h^T + additive_mask`` per sample and head,
    where keys marked in ``key_padding_mask`` get no weight: shape (B * H, L_T, L_S).

    The masks cover the first ``L_S - extra`` keys; the ``extra`` keys appended
    after them (the attention bias) are never masked."""

    no_nnabla_spec = _FUSED

    grad_depends_on_outputs = True

    def __init__(self, num_heads: int, scale: float, has_additive: bool, has_padding: bool,
                 extra: int):
        self.num_heads = num_heads
        self.scale = scale
        self.has_additive = has_additive
        self.has_padding = has_padding
        self.extra = extra

    def output_specs(self, inputs):
        q, k = inputs[0], inputs[1]
        batch, heads = q.shape[1], self.num_heads
        self.scores_shape = (batch, heads, q.shape[0], k.shape[0])
        self.masked = k.shape[0] - self.extra
        return [((batch * heads, q.shape[0], k.shape[0]), q.dtype)]

    def _scores(self, xp, q, k, *masks):
        """``scale * q_h k_h^T`` with the masks applied, (B, H, L_T, L_S): on arrays for
        forward, on variables for the composite."""
        s = xp.matmul(_heads(q * self.scale, self.num_heads),
                      _heads(k, self.num_heads).swapaxes(-1, -2))
        masks = iter(masks)
        if self.has_additive:
            s = s + self._all_keys(xp, next(masks))
        if self.has_padding:
            padded = (self._all_keys(xp, next(masks)) != 0).reshape(s.shape[0], 1, 1, -1)
            s = xp.where(padded, -np.inf, s)
        return s

    def _all_keys(self, xp, mask):
        """A mask over the first L_S - extra keys extended to all keys: the extra ones
        (the attention bias) are never masked."""
        if not self.extra:
            return mask
        rest = xp.zeros(mask.shape[:-1] + (self.extra,), mask.dtype)
        return xp.concatenate([mask, rest], axis=-1)

    def forward_arrays(self, xp, xs):
        s = self._scores(xp, *xs)
        s -= s.max(axis=-1, keepdims=True)
        xp.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
        return (s.reshape(-1, s.shape[2], s.shape[3]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        w = ys[0].reshape(self.scores_shape)
        g = gys[0].reshape(self.scores_shape)
        gs = g * w
        dot = gs.sum(axis=-1, keepdims=True)
        gs -= w * dot
        grads: list = [None] * len(need_grads)
        for i, other in ((0, 1), (1, 0)):
            if need_grads[i]:
                scores = gs if i == 0 else gs.swapaxes(-1, -2)
                g_heads = xp.matmul(scores, _heads(xs[other], self.num_heads))
                g_heads *= self.scale
                grads[i] = _unheads(g_heads)
        if self.has_additive and need_grads[2]:
            grads[2] = gs[..., :self.masked].sum(axis=(0, 1))
        return tuple(grads)

    def composite(self, F, xs):
        """What it computes, as a graph of functions (its graph backward differentiates it)."""
        weights = F.softmax(on_variables(self._scores, *xs), axis=-1)
        return F.reshape(weights, self.outputs[0].shape, inplace=False)

    backward_graph = composite_backward_graph


class AttentionOutput(Function):
    """The values weighted by the attention weights, per sample and head:
    (B * H, L_T, L_S) and (L_S, B, E_v) -> (L_T, B, E_v)."""

    no_nnabla_spec = _FUSED

    def __init__(self, num_heads: int):
        self.num_heads = num_heads

    def output_specs(self, inputs):
        w, v = inputs
        self.weights_shape = (v.shape[1], self.num_heads) + w.shape[1:]
        return [((w.shape[1],) + v.shape[1:], np.result_type(w.dtype, v.dtype))]

    def forward_arrays(self, xp, xs):
        w = xs[0].reshape(self.weights_shape)
        return (_unheads(xp.matmul(w, _heads(xs[1], self.num_heads))),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        w = xs[0].reshape(self.weights_shape)
        v = _heads(xs[1], self.num_heads)
        g = _heads(gys[0], self.num_heads)
        gw = xp.matmul(g, v.swapaxes(-1, -2)).reshape(xs[0].shape) if need_grads[0] else None
        gv = _unheads(xp.matmul(w.swapaxes(-1, -2), g)) if need_grads[1] else None
        return gw, gv


def _check_shape(condition: bool, message: str) -> None:
    if not condition:
        raise argument_error(_NAME, message)


def _checked_inputs(query, key, value, num_heads, weights, attn_bias_k, attn_bias_v,
                    dropout, additive_mask, key_padding_mask) -> None:
    """nnabla's requirements on the arguments, each failing with a DpnbError."""
    for label, v in (("query", query), ("key", key), ("value", value)) + tuple(
            zip(("q_weight", "k_weight", "v_weight", "out_weight"), weights)):
        if not isinstance(v, Variable):
            raise argument_error(_NAME, f"{label} must be an nn.Variable, got "
                                        f"{type(v).__name__}")
    for label, v in (("query", query), ("key", key), ("value", value)):
        _check_shape(v.ndim == 3, f"{label} must be 3-D (length, batch, features), "
                                  f"got shape {v.shape}")
    for label, w in zip(("q_weight", "k_weight", "v_weight", "out_weight"), weights):
        _check_shape(w.ndim == 2, f"{label} must be 2-D (inputs, outputs), got shape {w.shape}")
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)) \
            or num_heads < 1:
        raise argument_error(_NAME, f"num_heads must be an int >= 1, got {num_heads!r}")
    _check_shape(key.shape[:2] == value.shape[:2],
                 f"key and value must have the same length and batch size, got shapes "
                 f"{key.shape} and {value.shape}")
    _check_shape(query.shape[1] == key.shape[1],
                 f"query and key must have the same batch size (axis 1), got shapes "
                 f"{query.shape} and {key.shape}")
    q_w, k_w, v_w, out_w = weights
    _check_shape(q_w.shape[1] == k_w.shape[1],
                 f"q_weight and k_weight must project to the same embedding dimension, got "
                 f"shapes {q_w.shape} and {k_w.shape}")
    for label, dim in (("the embedding dimension E (q_weight.shape[1])", q_w.shape[1]),
                       ("the value dimension E_v (v_weight.shape[1])", v_w.shape[1])):
        _check_shape(dim % num_heads == 0, f"{label} must be divisible by num_heads, got "
                                           f"{dim} and num_heads={num_heads}; change one of them")
    _check_shape(out_w.shape[0] == v_w.shape[1],
                 f"out_weight must have shape ({v_w.shape[1]}, E_out) to take the "
                 f"{v_w.shape[1]} value features, got {out_w.shape}")
    if (attn_bias_k is None) != (attn_bias_v is None):
        raise argument_error(_NAME, "attn_bias_k and attn_bias_v must be given together, got "
                                    "only one of them")
    if attn_bias_k is not None:
        for label, bias, dim in (("attn_bias_k", attn_bias_k, k_w.shape[1]),
                                 ("attn_bias_v", attn_bias_v, v_w.shape[1])):
            _check_shape(bias.size == dim, f"{label} must hold {dim} elements (shape ({dim},) "
                                           f"or (1, 1, {dim})), got shape {bias.shape}")
    if not 0 <= dropout < 1:
        raise argument_error(_NAME, f"dropout must be in [0, 1), got {dropout!r}")
    lengths = (query.shape[0], key.shape[0])
    if additive_mask is not None:
        _check_shape(additive_mask.shape == lengths,
                     f"additive_mask must have shape (L_T, L_S) = {lengths}, got "
                     f"{additive_mask.shape}")
    if key_padding_mask is not None:
        expected = (key.shape[1], key.shape[0])
        _check_shape(key_padding_mask.shape == expected,
                     f"key_padding_mask must have shape (B, L_S) = {expected}, got "
                     f"{key_padding_mask.shape}")


def multi_head_attention(query: Variable, key: Variable, value: Variable, num_heads: int,
                         q_weight: Variable, k_weight: Variable, v_weight: Variable,
                         out_weight: Variable, q_bias: Variable | None = None,
                         k_bias: Variable | None = None, v_bias: Variable | None = None,
                         out_bias: Variable | None = None, attn_bias_k: Variable | None = None,
                         attn_bias_v: Variable | None = None, dropout: float = 0.0,
                         additive_mask: Variable | None = None,
                         key_padding_mask: Variable | None = None) -> tuple[Variable, Variable]:
    """Multi-head attention of ``query`` (L_T, B, D_q) over ``key`` / ``value``
    (L_S, B, D_k / D_v): the output (L_T, B, E_out) and the attention weights
    (B * H, L_T, L_S), after dropout where ``dropout > 0``."""
    weights = (q_weight, k_weight, v_weight, out_weight)
    _checked_inputs(query, key, value, num_heads, weights, attn_bias_k, attn_bias_v, dropout,
                    additive_mask, key_padding_mask)
    num_heads = int(num_heads)
    q = affine(query, q_weight, q_bias, base_axis=2)
    k = affine(key, k_weight, k_bias, base_axis=2)
    v = affine(value, v_weight, v_bias, base_axis=2)
    extra = 0
    if attn_bias_k is not None:
        k = AppendKey()(k, attn_bias_k)
        v = AppendKey()(v, attn_bias_v)
        extra = 1
    masks = tuple(m for m in (additive_mask, key_padding_mask) if m is not None)
    scale = float(q_weight.shape[1] // num_heads) ** -0.5
    w = AttentionWeights(num_heads, scale, additive_mask is not None,
                         key_padding_mask is not None, extra)(q, k, *masks)
    if dropout > 0:
        w = _dropout(w, dropout)
    out = AttentionOutput(num_heads)(w, v)
    return affine(out, out_weight, out_bias, base_axis=2), w
