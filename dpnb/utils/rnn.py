"""nnabla's ``nnabla.utils.rnn``: batches of variable-length sequences for the recurrent
functions, padded (``pad_sequence``) or packed (``pack_sequence``,
``pack_padded_sequence``) into a ``PackedSequence``, and padded back
(``pad_packed_sequence``), built on ``F.pack_padded_sequence`` and
``F.pad_packed_sequence``, which need the sequences sorted by decreasing length:
with ``enforce_sorted=False`` the batch is sorted here and the order it had is kept
beside the packed data, as in nnabla.

All of it computes as the graph is built: use it in dynamic mode
(``nn.auto_forward()``), as nnabla asks."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import functions as F
from ..errors import DpnbError, DpnbValueError
from ..graph import Variable, get_auto_forward

__all__ = ["PackedSequence", "pad_sequence", "pack_padded_sequence", "pack_sequence",
           "pad_packed_sequence"]


class PackedSequence(object):
    """A packed batch: ``data`` (N, *) holds the sequences' steps, step after step;
    ``batch_sizes`` the number of sequences running at each step; ``sorted_indices``
    the batch's order by decreasing length and ``unsorted_indices`` its inverse, both
    None where the batch came sorted (``enforce_sorted=True``)."""

    def __init__(self):
        self.data = None
        self.batch_sizes = None
        self.sorted_indices = None
        self.unsorted_indices = None

    def __str__(self):
        return (f"data={self.data}, batch_sizes={self.batch_sizes}, "
                f"sorted_indices={self.sorted_indices}, "
                f"unsorted_indices={self.unsorted_indices}")


def _variable(owner: str, name: str, value) -> Variable:
    """``value``, which must be an nn.Variable."""
    if not isinstance(value, Variable):
        raise DpnbValueError(f"{owner}: {name} must be an nn.Variable, got "
                             f"{type(value).__name__}; wrap arrays with "
                             "nn.Variable.from_numpy_array")
    return value


def _sequences(owner: str, sequences) -> list:
    """A non-empty list of variables (T_i, *) that agree on ``*``."""
    sequences = list(sequences)
    if not sequences:
        raise DpnbValueError(f"{owner}: sequences is empty; give at least one (T_i, *) variable")
    for i, seq in enumerate(sequences):
        _variable(owner, f"sequences[{i}]", seq)
        if seq.ndim < 1 or seq.shape[1:] != sequences[0].shape[1:]:
            raise DpnbValueError(f"{owner}: every sequence must be (T_i, *) with the same *; "
                                 f"sequences[0] is {sequences[0].shape}, sequences[{i}] is "
                                 f"{seq.shape}")
    return sequences


def pad_sequence(sequences: Sequence[Variable], batch_first: bool = False,
                 padding_value: float = 0.0) -> Variable:
    """The variables (T_i, *) stacked into one (T, B, *) (``batch_first``: (B, T, *)),
    T the longest T_i, the rest filled with ``padding_value``; gradients flow back to
    each sequence."""
    sequences = _sequences("pad_sequence", sequences)
    steps = max(seq.shape[0] for seq in sequences)
    lead = (len(sequences), steps) if batch_first else (steps, len(sequences))
    padded = F.constant(padding_value, lead + sequences[0].shape[1:])
    for b, seq in enumerate(sequences):
        if batch_first:
            padded[b, :seq.shape[0]] = seq
        else:
            padded[:seq.shape[0], b] = seq
    return padded


def pack_padded_sequence(padded_sequence: Variable, lengths: Variable, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """The padded batch (T, B, *) (``batch_first``: (B, T, *)) packed, with its
    sequences' ``lengths`` (B,).  With ``enforce_sorted`` the lengths must not increase;
    otherwise the batch is sorted by decreasing length first (a stable sort), and its
    ``sorted_indices`` and ``unsorted_indices`` are kept to pad it back in order."""
    _variable("pack_padded_sequence", "padded_sequence", padded_sequence)
    _variable("pack_padded_sequence", "lengths", lengths)
    packed = PackedSequence()
    if not enforce_sorted:
        if not get_auto_forward():
            raise DpnbError("pack_padded_sequence: enforce_sorted=False sorts the batch by its "
                            "lengths as the graph is built, which needs dynamic mode; call it "
                            "under nn.auto_forward() (or nn.set_auto_forward(True))")
        lengths, order = F.sort(lengths, axis=0, reverse=True, with_index=True)
        batch = order.shape[0]
        packed.sorted_indices = order
        packed.unsorted_indices = F.scatter_nd(F.arange(0, batch), order.reshape((1, batch)),
                                               shape=(batch,))
        padded_sequence = F.gather(padded_sequence, order, axis=0 if batch_first else 1)
    packed.data, packed.batch_sizes = F.pack_padded_sequence(padded_sequence, lengths,
                                                             batch_first)
    return packed


def pack_sequence(sequences: Sequence[Variable], batch_first: bool = False,
                  enforce_sorted: bool = True) -> PackedSequence:
    """The variables (T_i, *) packed (see ``pack_padded_sequence``); the packed data is
    the same either way of ``batch_first``, the layout the batch is padded in on the
    way."""
    sequences = _sequences("pack_sequence", sequences)
    lengths = Variable.from_numpy_array(np.array([seq.shape[0] for seq in sequences]))
    return pack_padded_sequence(pad_sequence(sequences, batch_first), lengths, batch_first,
                                enforce_sorted)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0, total_length: int | None = None
                        ) -> tuple[Variable, Variable]:
    """The packed batch padded back to (T, B, *) (``batch_first``: (B, T, *)) with
    ``padding_value``, T being ``total_length`` where given (it must not be shorter than
    the longest sequence), in the order the batch had before packing, and the lengths
    of its sequences (int32)."""
    if not isinstance(sequence, PackedSequence):
        raise DpnbValueError(f"pad_packed_sequence: sequence must be a PackedSequence, got "
                             f"{type(sequence).__name__}; make it with pack_sequence or "
                             "pack_padded_sequence")
    steps = sequence.batch_sizes.shape[0]
    if total_length is not None and total_length < steps:
        raise DpnbValueError(f"pad_packed_sequence: total_length ({total_length}) must be at "
                             f"least the longest sequence's length ({steps})")
    padded, lengths = F.pad_packed_sequence(sequence.data, sequence.batch_sizes, batch_first,
                                            padding_value, total_length)
    if sequence.unsorted_indices is not None:
        padded = F.gather(padded, sequence.unsorted_indices, axis=0 if batch_first else 1)
        lengths = lengths[sequence.unsorted_indices]
    return padded, lengths
