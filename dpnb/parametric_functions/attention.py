"""Attention layers: PF.multi_head_attention and the transformer family, with
nnabla's scopes and parameter names (``multi_head_attention/q_weight``,
``transformer/encoder00/transformer_encode/enc_affine1/affine/W`` ...).

Unlike nnabla 1.39, whose encoder and decoder layers drop them, ``rng`` and
``fix_parameters`` reach every parameter of the transformer layers."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import functions as F
from ..errors import DpnbError
from ..graph import Variable
from ..initializer import ConstantInitializer, UniformInitializer, calc_uniform_lim_glorot
from ..parameter import get_parameter_or_create
from ._common import check_input, scope
from .linear import affine
from .normalization import layer_normalization

__all__ = ["multi_head_attention", "transformer", "transformer_decode", "transformer_encode"]

_INITIALIZED = ("q_weight", "k_weight", "v_weight", "out_weight", "q_bias", "k_bias", "v_bias",
                "out_bias", "attn_bias_k", "attn_bias_v")


def _param_init(param_init: dict | None) -> dict:
    """``param_init`` checked to name only the parameters multi_head_attention owns."""
    if param_init is None:
        return {}
    if not isinstance(param_init, dict):
        raise DpnbError(f"PF.multi_head_attention: param_init must be a dict from parameter "
                        f"names to initializers or arrays, got {type(param_init).__name__}")
    unknown = sorted(set(param_init) - set(_INITIALIZED))
    if unknown:
        raise DpnbError(f"PF.multi_head_attention: param_init names {unknown}, which are not "
                        f"parameters of it; use some of {', '.join(_INITIALIZED)}")
    return param_init


def multi_head_attention(query: Variable, key: Variable, value: Variable, num_heads: int = 12,
                         dropout: float = 0.0, k_embed_dim: int | None = None,
                         v_embed_dim: int | None = None, out_dim: int | None = None,
                         rng: np.random.RandomState | None = None, with_bias: bool = True,
                         add_attn_bias: bool = False, additive_mask: Variable | None = None,
                         key_padding_mask: Variable | None = None, fix_parameters: bool = False,
                         param_init: dict | None = None,
                         name: str | None = None) -> tuple[Variable, Variable]:
    """F.multi_head_attention with its projections as parameters (Glorot-uniform
    weights, zero biases, ``attn_bias_k`` / ``attn_bias_v`` of shape (1, 1, E) with
    ``add_attn_bias``): the output and the attention weights."""
    with scope(name, "multi_head_attention"):
        for label, v in (("query", query), ("key", key), ("value", value)):
            check_input("multi_head_attention", v, 3)
            if v.ndim != 3:
                raise DpnbError(f"PF.multi_head_attention: {label} must be 3-D (length, batch, "
                                f"features), got shape {v.shape}")
        inits = _param_init(param_init)
        q_in, k_in, v_in = query.shape[2], key.shape[2], value.shape[2]
        embed = q_in if k_embed_dim is None else int(k_embed_dim)
        v_dim = v_in if v_embed_dim is None else int(v_embed_dim)
        out = v_dim if out_dim is None else int(out_dim)
        trainable = not fix_parameters

        def param(label: str, shape: tuple, default) -> Variable:
            return get_parameter_or_create(label, shape, inits.get(label, default), True,
                                           trainable)

        def glorot(inmaps: int, outmaps: int) -> UniformInitializer:
            return UniformInitializer(calc_uniform_lim_glorot(inmaps, outmaps), rng)

        weights = (param("q_weight", (q_in, embed), glorot(q_in, embed)),
                   param("k_weight", (k_in, embed), glorot(k_in, embed)),
                   param("v_weight", (v_in, v_dim), glorot(v_in, v_dim)),
                   param("out_weight", (v_dim, out), glorot(v_dim, out)))
        biases: tuple = (None,) * 4
        if with_bias:
            biases = tuple(param(label, (dim,), ConstantInitializer())
                           for label, dim in (("q_bias", embed), ("k_bias", embed),
                                              ("v_bias", v_dim), ("out_bias", out)))
        attn_biases: tuple = (None, None)
        if add_attn_bias:
            attn_biases = (param("attn_bias_k", (1, 1, embed), glorot(embed, 1)),
                           param("attn_bias_v", (1, 1, v_dim), glorot(v_dim, 1)))
        return F.multi_head_attention(query, key, value, num_heads, *weights, *biases,
                                      *attn_biases, dropout, additive_mask=additive_mask,
                                      key_padding_mask=key_padding_mask)


def _activation(fn_name: str, activation: Callable | None) -> Callable:
    """The feed-forward activation: F.relu unless another callable is given."""
    if activation is None:
        return F.relu
    if not callable(activation):
        raise DpnbError(f"PF.{fn_name}: activation must be a function of one nn.Variable "
                        f"(e.g. F.relu) or None, got {type(activation).__name__}")
    return activation


def _check_sequence(fn_name: str, label: str, seq, embed_dim: int) -> None:
    check_input(fn_name, seq, 3)
    if seq.ndim != 3 or seq.shape[2] != embed_dim:
        raise DpnbError(f"PF.{fn_name}: {label} must have shape (length, batch, embed_dim="
                        f"{embed_dim}), got {seq.shape}; pass embed_dim={seq.shape[-1]} or "
                        "project the input first")


def _dropped(x: Variable, dropout: float) -> Variable:
    return F.dropout(x, dropout) if dropout > 0 else x


def _residual_norm(x: Variable, sublayer: Variable, dropout: float, fix_parameters: bool,
                   name: str) -> Variable:
    """layer_normalization(x + dropout(sublayer)) over the features of each position."""
    return layer_normalization(x + _dropped(sublayer, dropout), batch_axis=(0, 1),
                               fix_parameters=fix_parameters, name=name)


def _feed_forward(x: Variable, embed_dim: int, dim_feedforward: int, dropout: float,
                  activation: Callable, rng, fix_parameters: bool, prefix: str) -> Variable:
    """affine(dropout(activation(affine(x)))) back to ``embed_dim`` features."""
    h = activation(affine(x, dim_feedforward, base_axis=2, rng=rng,
                          fix_parameters=fix_parameters, name=f"{prefix}_affine1"))
    h = affine(_dropped(h, dropout), embed_dim, base_axis=2, rng=rng,
               fix_parameters=fix_parameters, name=f"{prefix}_affine2")
    return h


def _attention(query, key, num_heads, add_attn_bias, mask, padding, rng, fix_parameters,
               name) -> Variable:
    return multi_head_attention(query, key, key, num_heads=num_heads, rng=rng,
                                add_attn_bias=add_attn_bias, additive_mask=mask,
                                key_padding_mask=padding, fix_parameters=fix_parameters,
                                name=name)[0]


def transformer_encode(src: Variable, embed_dim: int, num_heads: int, dim_feedforward: int = 2048,
                       dropout: float = 0.1, activation: Callable | None = None,
                       src_additive_mask: Variable | None = None,
                       src_key_padding_mask: Variable | None = None,
                       rng: np.random.RandomState | None = None, add_attn_bias: bool = False,
                       fix_parameters: bool = False, name: str | None = None) -> Variable:
    """One transformer encoder layer (post-norm): self-attention, then a feed-forward
    network, each added back to its input and layer-normalized; (L_S, B, E) out."""
    with scope(name, "transformer_encode"):
        _check_sequence("transformer_encode", "src", src, embed_dim)
        act = _activation("transformer_encode", activation)
        attn = _attention(src, src, num_heads, add_attn_bias, src_additive_mask,
                          src_key_padding_mask, rng, fix_parameters, "src_self_attn")
        src = _residual_norm(src, attn, dropout, fix_parameters, "enc_layer_norm1")
        ff = _feed_forward(src, embed_dim, dim_feedforward, dropout, act, rng, fix_parameters,
                           "enc")
        return _residual_norm(src, ff, dropout, fix_parameters, "enc_layer_norm2")


def transformer_decode(tgt: Variable, memory: Variable, embed_dim: int, num_heads: int,
                       dim_feedforward: int = 2048, dropout: float = 0.1,
                       activation: Callable | None = None,
                       tgt_additive_mask: Variable | None = None,
                       memory_additive_mask: Variable | None = None,
                       tgt_key_padding_mask: Variable | None = None,
                       memory_key_padding_mask: Variable | None = None,
                       rng: np.random.RandomState | None = None, add_attn_bias: bool = False,
                       fix_parameters: bool = False, name: str | None = None) -> Variable:
    """One transformer decoder layer (post-norm): self-attention, attention over the
    encoder's ``memory``, then a feed-forward network, each with a residual and layer
    normalization; (L_T, B, E) out."""
    with scope(name, "transformer_decode"):
        _check_sequence("transformer_decode", "tgt", tgt, embed_dim)
        _check_sequence("transformer_decode", "memory", memory, embed_dim)
        act = _activation("transformer_decode", activation)
        attn = _attention(tgt, tgt, num_heads, add_attn_bias, tgt_additive_mask,
                          tgt_key_padding_mask, rng, fix_parameters, "tgt_self_attn")
        tgt = _residual_norm(tgt, attn, dropout, fix_parameters, "dec_layer_norm1")
        attn = _attention(tgt, memory, num_heads, add_attn_bias, memory_additive_mask,
                          memory_key_padding_mask, rng, fix_parameters, "tgt_memory_attn")
        tgt = _residual_norm(tgt, attn, dropout, fix_parameters, "dec_layer_norm2")
        ff = _feed_forward(tgt, embed_dim, dim_feedforward, dropout, act, rng, fix_parameters,
                           "dec")
        return _residual_norm(tgt, ff, dropout, fix_parameters, "dec_layer_norm3")


def transformer(src: Variable, tgt: Variable, embed_dim: int = 512, num_heads: int = 8,
                num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                dim_feedforward: int = 2048, dropout: float = 0.1,
                activation: Callable | None = None, src_additive_mask: Variable | None = None,
                tgt_additive_mask: Variable | None = None,
                memory_additive_mask: Variable | None = None,
                src_key_padding_mask: Variable | None = None,
                tgt_key_padding_mask: Variable | None = None,
                memory_key_padding_mask: Variable | None = None,
                rng: np.random.RandomState | None = None, add_attn_bias: bool = False,
                fix_parameters: bool = False, name: str | None = None) -> Variable:
    """The encoder-decoder transformer: ``num_encoder_layers`` encoder layers
    (``encoder00`` ...) over ``src``, then ``num_decoder_layers`` decoder layers
    (``decoder00`` ...) over ``tgt`` and the encoded memory; (L_T, B, E) out."""
    with scope(name, "transformer"):
        _check_sequence("transformer", "src", src, embed_dim)
        _check_sequence("transformer", "tgt", tgt, embed_dim)
        if src.shape[1] != tgt.shape[1]:
            raise DpnbError(f"PF.transformer: src and tgt must have the same batch size (axis 1),"
                            f" got shapes {src.shape} and {tgt.shape}")
        for label, count in (("num_encoder_layers", num_encoder_layers),
                             ("num_decoder_layers", num_decoder_layers)):
            if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
                raise DpnbError(f"PF.transformer: {label} must be an int >= 0, got {count!r}")
        shared = {"embed_dim": embed_dim, "num_heads": num_heads,
                  "dim_feedforward": dim_feedforward, "dropout": dropout,
                  "activation": activation, "rng": rng, "add_attn_bias": add_attn_bias,
                  "fix_parameters": fix_parameters}
        memory = src
        for i in range(num_encoder_layers):
            memory = transformer_encode(memory, src_additive_mask=src_additive_mask,
                                        src_key_padding_mask=src_key_padding_mask,
                                        name=f"encoder{i:02d}", **shared)
        output = tgt
        for i in range(num_decoder_layers):
            output = transformer_decode(output, memory, tgt_additive_mask=tgt_additive_mask,
                                        memory_additive_mask=memory_additive_mask,
                                        tgt_key_padding_mask=tgt_key_padding_mask,
                                        memory_key_padding_mask=memory_key_padding_mask,
                                        name=f"decoder{i:02d}", **shared)
        return output
