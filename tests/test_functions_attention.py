"""F.multi_head_attention, PF.multi_head_attention and the transformer layers beyond the
recorded nnabla cases: a NumPy reference at other sizes, dropout (random, so checked
against the weights it returns), default initializers, fix_parameters and rng, and
bad input."""
import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
import dpnb.parametric_functions as PF
from dpnb import DpnbError
from dpnb.initializer import UniformInitializer, calc_uniform_lim_glorot


def _var(array, need_grad=False):
    return nn.Variable.from_numpy_array(np.asarray(array, np.float32), need_grad=need_grad)


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _reference(q, k, v, heads, qw, kw, vw, ow, qb, kb, vb, ob, mask, padding):
    """Multi-head attention written out head by head and sample by sample."""
    qp, kp, vp = q @ qw + qb, k @ kw + kb, v @ vw + vb
    d, dv = qw.shape[1] // heads, vw.shape[1] // heads
    out = np.zeros(qp.shape[:2] + (vw.shape[1],))
    weights = np.zeros((q.shape[1] * heads, q.shape[0], k.shape[0]))
    for b in range(q.shape[1]):
        for h in range(heads):
            scores = qp[:, b, h * d:(h + 1) * d] @ kp[:, b, h * d:(h + 1) * d].T / np.sqrt(d)
            scores = np.where(padding[b] != 0, -np.inf, scores + mask)
            w = _softmax(scores)
            weights[b * heads + h] = w
            out[:, b, h * dv:(h + 1) * dv] = w @ vp[:, b, h * dv:(h + 1) * dv]
    return out @ ow + ob, weights


@pytest.fixture
def attention_inputs(rng):
    """Arrays for three heads over L_T=5, L_S=6, B=3, E=6, E_v=9, E_out=2."""
    lt, ls, b = 5, 6, 3
    shapes = {"q": (lt, b, 4), "k": (ls, b, 3), "v": (ls, b, 5), "qw": (4, 6), "kw": (3, 6),
              "vw": (5, 9), "ow": (9, 2), "qb": (6,), "kb": (6,), "vb": (9,), "ob": (2,),
              "mask": (lt, ls)}
    arrays = {name: rng.randn(*shape) for name, shape in shapes.items()}
    arrays["padding"] = (rng.rand(b, ls) < 0.3).astype(np.float32)
    return arrays


def _attention(a, dropout=0.0):
    names = ("q", "k", "v", "qw", "kw", "vw", "ow", "qb", "kb", "vb", "ob")
    xs = {n: _var(a[n], need_grad=True) for n in names}
    return F.multi_head_attention(xs["q"], xs["k"], xs["v"], 3, xs["qw"], xs["kw"], xs["vw"],
                                  xs["ow"], xs["qb"], xs["kb"], xs["vb"], xs["ob"],
                                  dropout=dropout, additive_mask=_var(a["mask"]),
                                  key_padding_mask=_var(a["padding"])), xs


def test_matches_a_head_by_head_reference(attention_inputs):
    (out, w), _ = _attention(attention_inputs)
    nn.forward_all([out, w])
    want_out, want_w = _reference(*(attention_inputs[n] for n in (
        "q", "k", "v")), 3, *(attention_inputs[n] for n in (
            "qw", "kw", "vw", "ow", "qb", "kb", "vb", "ob", "mask", "padding")))
    assert out.shape == (5, 3, 2) and w.shape == (9, 5, 6)
    np.testing.assert_allclose(w.d, want_w, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out.d, want_out, rtol=1e-4, atol=1e-4)


def test_dropout_drops_weights_and_the_output_uses_them(attention_inputs):
    (out0, w0), _ = _attention(attention_inputs)
    nn.forward_all([out0, w0])
    nn.seed(5)
    (out, w), xs = _attention(attention_inputs, dropout=0.4)
    nn.forward_all([out, w])
    kept = w.d != 0
    assert 0.2 < 1 - kept[w0.d != 0].mean() < 0.6
    np.testing.assert_allclose(w.d[kept], w0.d[kept] / 0.6, rtol=1e-5)
    a = attention_inputs
    vp = a["v"] @ a["vw"] + a["vb"]
    heads = w.d.reshape(3, 3, 5, 6)
    mixed = np.einsum("bhts,sbhd->tbhd", heads, vp.reshape(6, 3, 3, 3)).reshape(5, 3, 9)
    np.testing.assert_allclose(out.d, mixed @ a["ow"] + a["ob"], rtol=1e-4, atol=1e-4)
    out.backward(np.ones(out.shape, np.float32))
    assert all(np.isfinite(x.g).all() for x in xs.values())
    nn.forward_all([out, w])
    assert not np.array_equal(w.d != 0, kept), "a new mask is drawn at every forward"


def test_transformer_with_dropout_runs_forward_and_backward(rng):
    src = _var(rng.randn(4, 2, 8), need_grad=True)
    tgt = _var(rng.randn(3, 2, 8), need_grad=True)
    y = PF.transformer(src, tgt, embed_dim=8, num_heads=2, num_encoder_layers=2,
                       num_decoder_layers=1, dim_feedforward=16)
    y.forward()
    first = y.d.copy()
    assert y.shape == (3, 2, 8)
    y.backward(np.ones(y.shape, np.float32))
    assert np.isfinite(src.g).all() and np.abs(src.g).sum() > 0
    assert all(np.isfinite(p.g).all() for p in nn.get_parameters().values())
    y.forward()
    assert not np.allclose(y.d, first), "dropout 0.1 draws new masks at every forward"


def test_default_initializers_follow_nnabla():
    q, k, v = nn.Variable((3, 2, 4)), nn.Variable((5, 2, 6)), nn.Variable((5, 2, 2))
    PF.multi_head_attention(q, k, v, num_heads=2, add_attn_bias=True,
                            rng=np.random.RandomState(0))
    params = nn.get_parameters()
    rng = np.random.RandomState(0)
    draws = {"q_weight": (4, 4), "k_weight": (6, 4), "v_weight": (2, 2), "out_weight": (2, 2),
             "attn_bias_k": (4, 1), "attn_bias_v": (2, 1)}
    for name, (inmaps, outmaps) in draws.items():
        p = params[f"multi_head_attention/{name}"]
        want = UniformInitializer(calc_uniform_lim_glorot(inmaps, outmaps), rng)(p.shape)
        np.testing.assert_allclose(p.d, want, rtol=1e-6, err_msg=name)
    for name, size in (("q_bias", 4), ("k_bias", 4), ("v_bias", 2), ("out_bias", 2)):
        assert params[f"multi_head_attention/{name}"].d.tolist() == [0.0] * size
    assert params["multi_head_attention/attn_bias_k"].shape == (1, 1, 4)


def test_param_init_sets_a_parameter():
    q = nn.Variable((3, 2, 4))
    w = np.arange(16, dtype=np.float32).reshape(4, 4)
    PF.multi_head_attention(q, q, q, num_heads=2, param_init={"q_weight": w})
    assert np.array_equal(nn.get_parameters()["multi_head_attention/q_weight"].d, w)


def test_transformer_layers_pass_fix_parameters_and_rng_down(rng):
    x = _var(rng.randn(3, 2, 4), need_grad=True)
    y = PF.transformer_encode(x, 4, 2, dim_feedforward=6, dropout=0.0, fix_parameters=True,
                              rng=np.random.RandomState(1))
    y.forward()
    y.backward(rng.randn(*y.shape))
    params = nn.get_parameters(grad_only=False)
    assert len(params) == 16 and np.abs(x.g).sum() > 0
    assert all(not p.g.any() for p in params.values()), "fixed parameters get no gradient"
    first = {n: p.d.copy() for n, p in params.items()}
    nn.clear_parameters()
    PF.transformer_encode(x, 4, 2, dim_feedforward=6, rng=np.random.RandomState(1))
    for name, p in nn.get_parameters().items():
        np.testing.assert_array_equal(p.d, first[name], err_msg=name)


def test_cleared_buffers_give_the_same_gradients(rng):
    x = _var(rng.randn(3, 2, 4), need_grad=True)
    y = F.mean(PF.transformer_encode(x, 4, 2, dim_feedforward=6, dropout=0.0,
                                     add_attn_bias=True) ** 2)
    y.forward()
    y.backward()
    kept = [x.g.copy()] + [p.g.copy() for p in nn.get_parameters().values()]
    x.grad.zero()
    for p in nn.get_parameters().values():
        p.grad.zero()
    y.forward(clear_no_need_grad=True)
    y.backward(clear_buffer=True)
    cleared = [x.g] + [p.g for p in nn.get_parameters().values()]
    for a, b in zip(kept, cleared):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_a_sample_with_only_padding_keys_gets_nan_weights_as_in_nnabla(rng):
    x = _var(rng.randn(3, 2, 4))
    pad = _var([[1, 1, 1], [0, 0, 1]])
    y, w = PF.multi_head_attention(x, x, x, num_heads=2, key_padding_mask=pad)
    with np.errstate(invalid="ignore"):
        nn.forward_all([y, w])
    assert np.isnan(w.d[:2]).all() and np.isnan(y.d[:, 0]).all()
    np.testing.assert_allclose(w.d[2:].sum(axis=-1), 1, rtol=1e-6)
    assert (w.d[2:, :, 2] == 0).all()


def test_eager_mode(rng):
    with nn.auto_forward():
        x = _var(rng.randn(3, 2, 4))
        y, w = PF.multi_head_attention(x, x, x, num_heads=2)
    np.testing.assert_allclose(w.d.sum(axis=-1), 1, rtol=1e-6)
    assert y.shape == (3, 2, 4)


# -- bad input ---------------------------------------------------------------
def _f_args(lt=3, ls=3, b=2, dq=4, e=4, ev=4):
    return [nn.Variable((lt, b, dq)), nn.Variable((ls, b, 4)), nn.Variable((ls, b, 4)), 2,
            nn.Variable((dq, e)), nn.Variable((4, e)), nn.Variable((4, ev)),
            nn.Variable((ev, 4))]


def _v(*shape):
    return lambda: nn.Variable(shape)


# Argument index of F.multi_head_attention, what to put there, and the error it gives.
BAD_ARGUMENTS = {
    "E not divisible by num_heads": (3, lambda: 3, r"E .* divisible by num_heads, got 4 and nu"),
    "E_v not divisible by num_heads": (6, _v(4, 3), r"E_v .* divisible by num_heads, got 3"),
    "query and key embeddings differ": (5, _v(4, 6), r"q_weight and k_weight must project"),
    "key and value lengths differ": (2, _v(4, 2, 4), r"key and value must have the same len"),
    "batch sizes differ": (0, _v(3, 1, 4), r"query and key must have the same batch size"),
    "2-D query": (0, _v(3, 8), r"query must be 3-D .* got shape \(3, 8\)"),
    "out_weight mismatch": (7, _v(3, 4), r"out_weight must have shape \(4, E_out\)"),
    "1-D weight": (4, _v(4), r"q_weight must be 2-D"),
    "no heads": (3, lambda: 0, r"num_heads must be an int >= 1, got 0"),
    "float heads": (3, lambda: 2.0, r"num_heads must be an int >= 1, got 2.0"),
    "array key": (1, lambda: np.zeros((3, 2, 4)), r"key must be an nn.Variable, got ndarray"),
}


@pytest.mark.parametrize("bad", BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_multi_head_attention_rejects(bad):
    where, make, match = bad
    args = _f_args()
    args[where] = make()
    with pytest.raises(DpnbError, match="F.multi_head_attention: .*" + match):
        F.multi_head_attention(*args)


BAD_OPTIONS = {
    "additive_mask shape": ({"additive_mask": (3, 4)},
                            r"additive_mask must have shape \(L_T, L_S\) = \(3, 3\), got "),
    "key_padding_mask shape": ({"key_padding_mask": (3, 2)},
                               r"key_padding_mask must have shape \(B, L_S\) = \(2, 3\), got "),
    "attn_bias_k alone": ({"attn_bias_k": (4,)},
                          "attn_bias_k and attn_bias_v must be given together"),
    "attn_bias_v size": ({"attn_bias_k": (4,), "attn_bias_v": (1, 1, 3)},
                         r"attn_bias_v must hold 4 elements .* got shape \(1, 1, 3\)"),
}


@pytest.mark.parametrize("bad", BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_multi_head_attention_rejects_options(bad):
    shapes, match = bad
    options = {name: nn.Variable(shape) for name, shape in shapes.items()}
    with pytest.raises(DpnbError, match="F.multi_head_attention: " + match):
        F.multi_head_attention(*_f_args(), **options)
    with pytest.raises(DpnbError, match=r"dropout must be in \[0, 1\), got 1.0"):
        F.multi_head_attention(*_f_args(), dropout=1.0)


def test_parametric_attention_rejects():
    q = nn.Variable((3, 2, 6))
    with pytest.raises(DpnbError, match="divisible by num_heads, got 6 and num_heads=4"):
        PF.multi_head_attention(q, q, q, num_heads=4)
    with pytest.raises(DpnbError, match=r"param_init names \['q_wieght'\], which are not "
                                        "parameters of it; use some of q_weight"):
        PF.multi_head_attention(q, q, q, num_heads=2, param_init={"q_wieght": None})
    with pytest.raises(DpnbError, match=r"key must be 3-D .* got shape \(3, 2, 6, 1\)"):
        PF.multi_head_attention(q, nn.Variable((3, 2, 6, 1)), q, num_heads=2)


def test_transformer_rejects():
    src, tgt = nn.Variable((4, 2, 8)), nn.Variable((3, 2, 8))
    with pytest.raises(DpnbError, match=r"src must have shape \(length, batch, embed_dim=6\), "
                                        r"got \(4, 2, 8\); pass embed_dim=8"):
        PF.transformer(src, tgt, embed_dim=6, num_heads=2)
    with pytest.raises(DpnbError, match="src and tgt must have the same batch size"):
        PF.transformer(src, nn.Variable((3, 1, 8)), embed_dim=8, num_heads=2)
    with pytest.raises(DpnbError, match="num_encoder_layers must be an int >= 0, got -1"):
        PF.transformer(src, tgt, embed_dim=8, num_heads=2, num_encoder_layers=-1)
    with pytest.raises(DpnbError, match="PF.transformer_decode: memory must have shape"):
        PF.transformer_decode(tgt, nn.Variable((4, 2, 6)), 8, 2)
    with pytest.raises(DpnbError, match="activation must be a function of one nn.Variable"):
        PF.transformer_encode(src, 8, 2, activation="relu")
