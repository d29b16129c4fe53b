"""nnabla.utils.rnn on dpnb: padding and packing variable-length sequences, and the
unrolled recurrent references, against what nnabla 1.39 gives (fixture recorded by
fixtures/nnabla/record_rnn_utils.py) and NumPy references."""
import json
from pathlib import Path

import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
import dpnb.utils.rnn as rnn_utils
import nnabla_private
from dpnb.errors import DpnbError, DpnbValueError

REC = json.loads((Path(__file__).parent / "fixtures" / "nnabla" / "rnn_utils.json").read_text())
PACKING = REC["packing"]
LAYOUTS = {"time_first": False, "batch_first": True}


def _variables():
    return [nn.Variable.from_numpy_array(np.array(s, np.float32)) for s in PACKING["sequences"]]


def _assert(got, recorded, dtype=True):
    """A variable's values (and dtype) as nnabla's, or both None."""
    if recorded is None:
        assert got is None
        return
    np.testing.assert_allclose(got.d, np.array(recorded["value"]), rtol=1e-6, atol=1e-6)
    if dtype:
        assert got.d.dtype == np.dtype(recorded["dtype"])


def _assert_packed(packed, recorded):
    for name in ("data", "batch_sizes", "sorted_indices", "unsorted_indices"):
        _assert(getattr(packed, name), recorded[name])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_packing_as_nnabla(layout):
    case, batch_first = PACKING["cases"][layout], LAYOUTS[layout]
    seqs = _variables()
    lengths = nn.Variable.from_numpy_array(np.array([s.shape[0] for s in seqs]))
    with nn.auto_forward():
        _assert(rnn_utils.pad_sequence(seqs, batch_first, -1.5), case["pad_sequence"])
        unsorted = rnn_utils.pack_sequence(seqs, batch_first, enforce_sorted=False)
        _assert_packed(unsorted, case["pack_sequence"])
        _assert_packed(rnn_utils.pack_padded_sequence(rnn_utils.pad_sequence(seqs, batch_first),
                                                      lengths, batch_first, enforce_sorted=False),
                       case["pack_padded_sequence"])
        padded, back_lengths = rnn_utils.pad_packed_sequence(unsorted, batch_first, total_length=6)
        _assert(padded, case["pad_packed_sequence"]["padded"])
        # nnabla's lengths come out float32 here (int32 when sorted); dpnb's are int32
        _assert(back_lengths, case["pad_packed_sequence"]["lengths"], dtype=False)
        assert back_lengths.d.dtype == np.int32
        order = np.argsort([-s.shape[0] for s in seqs], kind="stable")
        ordered = rnn_utils.pack_sequence([seqs[i] for i in order], batch_first)
        _assert_packed(ordered, case["sorted"]["packed"])
        padded, back_lengths = rnn_utils.pad_packed_sequence(ordered, batch_first)
        _assert(padded, case["sorted"]["padded"])
        _assert(back_lengths, case["sorted"]["lengths"])


def test_integer_sequences_pad_to_float():
    ints = [nn.Variable.from_numpy_array(np.full(t, t)) for t in (3, 1)]
    with nn.auto_forward():
        _assert(rnn_utils.pad_sequence(ints, padding_value=-1.5), PACKING["int_pad_sequence"])


def test_short_total_length_is_refused():
    assert PACKING["short_total_length"] == "ValueError"
    with nn.auto_forward():
        packed = rnn_utils.pack_sequence(_variables(), enforce_sorted=False)
        with pytest.raises(DpnbValueError, match="total_length"):
            rnn_utils.pad_packed_sequence(packed, total_length=3)


def test_padding_value_and_gradients():
    """Padding with padding_value, and the gradient of a loss on the padded batch back to
    each sequence: the weights at its own places (NumPy reference)."""
    rng = np.random.RandomState(0)
    arrays = [rng.randn(t, 2).astype(np.float32) for t in (2, 4, 1)]
    seqs = [nn.Variable.from_numpy_array(a, need_grad=True) for a in arrays]
    weights = rng.randn(5, 3, 2).astype(np.float32)
    with nn.auto_forward():
        packed = rnn_utils.pack_sequence(seqs, enforce_sorted=False)
        padded, lengths = rnn_utils.pad_packed_sequence(packed, padding_value=9.0,
                                                        total_length=5)
        loss = F.sum(padded * nn.Variable.from_numpy_array(weights))
    expected = np.full((5, 3, 2), 9.0, np.float32)
    for b, a in enumerate(arrays):
        expected[:len(a), b] = a
    np.testing.assert_allclose(padded.d, expected)
    np.testing.assert_array_equal(lengths.d, [2, 4, 1])
    for s in seqs:
        s.grad.zero()
    loss.backward()
    for b, (s, a) in enumerate(zip(seqs, arrays)):
        np.testing.assert_allclose(s.g, weights[:len(a), b], rtol=1e-6)


def test_bad_arguments():
    seqs = _variables()
    with nn.auto_forward():
        with pytest.raises(DpnbValueError, match="empty"):
            rnn_utils.pad_sequence([])
        with pytest.raises(DpnbValueError, match="same"):
            rnn_utils.pack_sequence([seqs[0], nn.Variable.from_numpy_array(np.zeros((2, 3)))])
        with pytest.raises(DpnbValueError, match="nn.Variable"):
            rnn_utils.pack_padded_sequence(rnn_utils.pad_sequence(seqs), [2, 3, 3, 4, 2])
        with pytest.raises(DpnbValueError, match="PackedSequence"):
            rnn_utils.pad_packed_sequence(seqs[0])
        with pytest.raises(DpnbError, match="decreasing length"):
            rnn_utils.pack_sequence(seqs)  # unsorted, but enforce_sorted
    with pytest.raises(DpnbError, match="dynamic mode"):
        rnn_utils.pack_sequence(seqs, enforce_sorted=False)  # sorting needs the values


def test_packed_sequence_prints():
    with nn.auto_forward():
        text = str(rnn_utils.pack_sequence(_variables()[1:3]))
    assert text.startswith("data=") and "sorted_indices=None" in text


UNROLLED = REC["unrolled"]


def _unrolled_inputs(name):
    return {k: nn.Variable.from_numpy_array(np.array(a, np.float32))
            for k, a in UNROLLED[f"{name}_inputs"].items()}


@pytest.mark.parametrize("with_bias", [True, False])
def test_unrolled_references_as_nnabla(with_bias):
    L, D = UNROLLED["layers"], UNROLLED["directions"]
    with nn.auto_forward():
        v = _unrolled_inputs("rnn")
        for act in ("tanh", "relu"):
            out = nnabla_private.create_fixed_length_rnn(v["xs"], v["h0"], v["w0"], v["w"], v["b"],
                                                     L, act, D, with_bias)
            for got, recorded in zip(out, UNROLLED[f"rnn_{act}_{with_bias}"], strict=True):
                _assert(got, recorded)
        v = _unrolled_inputs("lstm")
        out = nnabla_private.create_fixed_length_lstm(v["xs"], v["h0"], v["c0"], v["w0"], v["w"],
                                                  v["b"], L, D, with_bias)
        for got, recorded in zip(out, UNROLLED[f"lstm_{with_bias}"], strict=True):
            _assert(got, recorded)
        v = _unrolled_inputs("gru")
        out = nnabla_private.create_fixed_length_gru(v["xs"], v["h0"], v["w0"], v["w"], v["b"],
                                                 L, D, with_bias)
        for got, recorded in zip(out, UNROLLED[f"gru_{with_bias}"], strict=True):
            _assert(got, recorded)
