"""Attention and transformer cases (see functions.py): L=3 (or 4), B=2, E=4, two heads.
Dropout is 0 everywhere here (its draws cannot be recorded); key padding masks
are 0/1 switches, so they get no gradient (a nudged 0 would switch a key off)."""
import numpy as np

from .functions import Case

R = np.random.RandomState(0)
L, S, B, E = 3, 4, 2, 4


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


def padding(*rows):
    """A float32 key padding mask (1: the key is padding)."""
    return np.array(rows, np.float32)


CAUSAL = np.triu(np.full((L, L), -np.inf, np.float32), 1)
PAD_L = padding([0, 0, 1], [0, 0, 0])
PAD_S = padding([0, 1, 0, 0], [1, 0, 0, 1])


def mha(*, biases=True, attn_bias=False, mask=False, padded=False):
    """F.multi_head_attention over inputs (query, key, value, 4 weights, [4 biases],
    [2 attention biases], [additive mask], [key padding mask])."""
    def build(lib, q, k, v, qw, kw, vw, ow, *rest):
        rest = list(rest)
        bs = [rest.pop(0) for _ in range(4)] if biases else [None] * 4
        abs_ = [rest.pop(0) for _ in range(2)] if attn_bias else [None] * 2
        am = rest.pop(0) if mask else None
        kp = rest.pop(0) if padded else None
        return lib.F.multi_head_attention(q, k, v, 2, qw, kw, vw, ow, *bs, *abs_, 0.0,
                                          additive_mask=am, key_padding_mask=kp)
    return build


def mha_inputs(dq=E, dk=E, dv=E, e=E, ev=E, eout=E, s=S, *, biases=True, attn_bias=False,
               mask=None, padded=None):
    inputs = [u(L, B, dq), u(s, B, dk), u(s, B, dv), u(dq, e), u(dk, e), u(dv, ev), u(ev, eout)]
    if biases:
        inputs += [u(e), u(e), u(ev), u(eout)]
    if attn_bias:
        inputs += [u(e), u(1, 1, ev)]
    if mask is not None:
        inputs.append(mask)
    if padded is not None:
        inputs.append(padded)
    return tuple(inputs)


def grads_except_last(inputs):
    """Every input gets a gradient but the last one (a key padding mask)."""
    return (True,) * (len(inputs) - 1) + (False,)


_PADDED = mha_inputs(padded=PAD_S)
_ALL = mha_inputs(attn_bias=True, mask=u(L, S, low=-2, high=2), padded=PAD_S)
_PF_PADDED = (u(L, B, E), u(S, B, E), u(S, B, E), u(L, S), PAD_S)
_ENC_PADDED = (u(L, B, E), CAUSAL, PAD_L)
_DEC = (u(L, B, E), u(S, B, E), CAUSAL, u(L, S), PAD_L, PAD_S)
_TRANSFORMER = (u(S, B, E), u(L, B, E), u(S, S), CAUSAL, u(L, S), PAD_S, PAD_L, PAD_S)


def pf_mha(**options):
    return lambda lib, q, k, v: lib.PF.multi_head_attention(q, k, v, num_heads=2, **options)


def encode(lib, src, mask=None, pad=None, **options):
    return lib.PF.transformer_encode(src, E, 2, dim_feedforward=6, dropout=0.0,
                                     src_additive_mask=mask, src_key_padding_mask=pad, **options)


CASES = [
    # F.multi_head_attention
    Case("F.multi_head_attention", mha(), mha_inputs()),
    Case("F.multi_head_attention self-attention L_S=L_T", mha(), mha_inputs(s=L)),
    Case("F.multi_head_attention no biases, other dims", mha(biases=False),
         mha_inputs(dq=3, dk=5, dv=2, e=6, ev=4, eout=3, biases=False)),
    Case("F.multi_head_attention only k_bias and out_bias",
         lambda lib, q, k, v, qw, kw, vw, ow, kb, ob: lib.F.multi_head_attention(
             q, k, v, 2, qw, kw, vw, ow, k_bias=kb, out_bias=ob),
         mha_inputs(biases=False) + (u(E), u(E))),
    Case("F.multi_head_attention attn_bias_k/v", mha(attn_bias=True),
         mha_inputs(attn_bias=True)),
    Case("F.multi_head_attention additive_mask", mha(mask=True),
         mha_inputs(mask=u(L, S, low=-2, high=2))),
    Case("F.multi_head_attention causal -inf mask", mha(mask=True),
         mha_inputs(s=L, mask=CAUSAL), need_grad=(True,) * 11 + (False,)),
    Case("F.multi_head_attention key_padding_mask", mha(padded=True), _PADDED,
         need_grad=grads_except_last(_PADDED)),
    Case("F.multi_head_attention attn bias with both masks",
         mha(attn_bias=True, mask=True, padded=True), _ALL, need_grad=grads_except_last(_ALL)),
    # PF.multi_head_attention
    Case("PF.multi_head_attention", pf_mha(), (u(L, B, E), u(S, B, E), u(S, B, E))),
    Case("PF.multi_head_attention with_bias=False", pf_mha(with_bias=False),
         (u(L, B, E), u(S, B, E), u(S, B, E))),
    Case("PF.multi_head_attention k_embed_dim v_embed_dim out_dim",
         pf_mha(k_embed_dim=6, v_embed_dim=2, out_dim=5), (u(L, B, 3), u(S, B, 5), u(S, B, 4))),
    Case("PF.multi_head_attention add_attn_bias and masks",
         lambda lib, q, k, v, m, p: lib.PF.multi_head_attention(
             q, k, v, num_heads=2, add_attn_bias=True, additive_mask=m, key_padding_mask=p),
         _PF_PADDED, need_grad=grads_except_last(_PF_PADDED)),
    # fix_parameters: the stored parameters stay trainable but the layer uses them
    # without a gradient, so central differences of them are no gradient of it.
    Case("PF.multi_head_attention fix_parameters name",
         pf_mha(fix_parameters=True, name="att"), (u(L, B, E), u(S, B, E), u(S, B, E)),
         fd=False),
    Case("PF.multi_head_attention one head",
         lambda lib, q: lib.PF.multi_head_attention(q, q, q, num_heads=1), (u(L, B, E),)),
    # PF.transformer_encode / transformer_decode / transformer
    Case("PF.transformer_encode", encode, (u(L, B, E),)),
    Case("PF.transformer_encode tanh, add_attn_bias, masks",
         lambda lib, x, m, p: encode(lib, x, m, p, activation=lib.F.tanh, add_attn_bias=True),
         _ENC_PADDED, need_grad=(True, False, False)),
    Case("PF.transformer_encode name", lambda lib, x: encode(lib, x, name="enc"), (u(L, B, E),)),
    Case("PF.transformer_decode",
         lambda lib, t, m: lib.PF.transformer_decode(t, m, E, 2, dim_feedforward=5, dropout=0.0),
         (u(L, B, E), u(S, B, E))),
    Case("PF.transformer_decode masks, add_attn_bias",
         lambda lib, t, mem, tm, mm, tp, mp: lib.PF.transformer_decode(
             t, mem, E, 2, dim_feedforward=5, dropout=0.0, tgt_additive_mask=tm,
             memory_additive_mask=mm, tgt_key_padding_mask=tp, memory_key_padding_mask=mp,
             add_attn_bias=True),
         _DEC, need_grad=(True, True, False, True, False, False)),
    Case("PF.transformer",
         lambda lib, s, t: lib.PF.transformer(s, t, embed_dim=E, num_heads=2,
                                              num_encoder_layers=1, num_decoder_layers=1,
                                              dim_feedforward=6, dropout=0.0),
         (u(S, B, E), u(L, B, E)), rtol=2e-4, atol=2e-5),
    Case("PF.transformer 2 encoders, 2 decoders",
         lambda lib, s, t: lib.PF.transformer(s, t, embed_dim=E, num_heads=2,
                                              num_encoder_layers=2, num_decoder_layers=2,
                                              dim_feedforward=3, dropout=0.0),
         (u(S, B, E), u(L, B, E)), need_grad=(True, False), rtol=2e-4, atol=2e-5),
    Case("PF.transformer every mask",
         lambda lib, s, t, sm, tm, mm, sp, tp, mp: lib.PF.transformer(
             s, t, embed_dim=E, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
             dim_feedforward=3, dropout=0.0, activation=lib.F.sigmoid, src_additive_mask=sm,
             tgt_additive_mask=tm, memory_additive_mask=mm, src_key_padding_mask=sp,
             tgt_key_padding_mask=tp, memory_key_padding_mask=mp, name="tr"),
         _TRANSFORMER, need_grad=(True, True, True, False, True, False, False, False),
         rtol=2e-4, atol=2e-5),
]
