"""Padded and packed sequences for the recurrent functions: pack_padded_sequence and
pad_packed_sequence, nnabla's functions under nnabla.utils.rnn's PackedSequence.

A padded batch is (T, B, *) (``batch_first``: (B, T, *)) with the sequences sorted
by decreasing length; its packed form is (N, *): the B_t sequences still running at
step t, step after step, with the batch sizes B_t (int32, one per padded step, as
nnabla's: zero after the longest sequence) beside it.  The output
lengths follow the data of each forward."""
from __future__ import annotations

import copy

import numpy as np

from ..graph import Function, Variable
from .base import default_outputs
from .graph_module import linear_backward_graph
from .specs import FunctionSpec, attrs, call, none_to

__all__ = ["pack_padded_sequence", "pad_packed_sequence"]


def _counts(owner: Function, counts: Variable, name: str) -> None:
    """Lengths and batch sizes are one non-increasing 1-D list of counts."""
    if counts.ndim != 1:
        raise owner.error(f"{name} must be 1-D (one count per sequence or step), got shape "
                          f"{counts.shape}")
    if not (np.issubdtype(counts.dtype, np.integer) or np.issubdtype(counts.dtype, np.floating)):
        raise owner.error(f"{name} must hold integer counts, got dtype {counts.dtype}")


def _sorted(owner: Function, counts, name: str, limit: int, limit_name: str):
    """The counts as int64, checked: integers in [0, limit], non-increasing."""
    ints = counts.astype(np.int64)
    if bool((ints != counts).any()) or bool((ints < 0).any()) or bool((ints > limit).any()):
        raise owner.error(f"{name} must be integers in [0, {limit}] ({limit_name}), got "
                          f"{counts.tolist()}")
    if bool((ints[1:] > ints[:-1]).any()):
        raise owner.error(f"{name} must not increase, got {counts.tolist()}; sort the sequences "
                          "by decreasing length first (nnabla.utils.rnn does with "
                          "enforce_sorted=False)")
    return ints


class PackPaddedSequence(Function):
    """The running steps of each sorted padded sequence, packed (see the module)."""

    nnabla_spec = FunctionSpec("PackPaddedSequence", "pack_padded_sequence_param",
                               ("batch_first",), attrs("batch_first"),
                               call("pack_padded_sequence", "batch_first"))

    def __init__(self, batch_first: bool):
        self.batch_first = bool(batch_first)

    def output_specs(self, inputs):
        padded, lengths = inputs
        _counts(self, lengths, "lengths")
        if padded.ndim < 2:
            raise self.error(f"padded_sequence must be (T, B, *) or (B, T, *), got shape "
                             f"{padded.shape}")
        self.padded_shape = padded.shape
        b_axis = 0 if self.batch_first else 1
        self.steps, batch = padded.shape[1 - b_axis], padded.shape[b_axis]
        if lengths.shape[0] != batch:
            raise self.error(f"lengths holds {lengths.shape[0]} entries for a batch of {batch} "
                             "sequences; give one length per sequence")
        total = int(lengths.d.sum()) if lengths.data.allocated else 0
        return [((total,) + padded.shape[2:], padded.dtype), ((self.steps,), np.dtype(np.int32))]

    def _mask(self, xp, lengths):
        """(T, B): whether sequence b is still running at step t."""
        ints = _sorted(self, lengths, "lengths", self.steps, "the padded length")
        return xp.arange(self.steps)[:, None] < ints[None, :]

    def forward_arrays(self, xp, xs):
        padded, lengths = xs
        mask = self._mask(xp, lengths)
        steps = padded.swapaxes(0, 1) if self.batch_first else padded
        packed = steps[mask]
        batch_sizes = mask.sum(axis=1).astype(np.int32)
        for out, result in zip(self.outputs, (packed, batch_sizes)):
            if out.shape != result.shape:
                out.data.reset_shape(result.shape, force=True)
        return packed, batch_sizes

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        if not need_grads[0]:
            return (None, None)
        mask = self._mask(xp, xs[1])
        g = xp.zeros(self.padded_shape, gys[0].dtype)
        (g.swapaxes(0, 1) if self.batch_first else g)[mask] = gys[0]
        return (g, None)

    backward_graph = linear_backward_graph  # linear in the padded batch; lengths only select


def pack_padded_sequence(padded_sequence: Variable, lengths: Variable, batch_first: bool = False,
                         n_outputs: int = -1, outputs=None) -> tuple[Variable, Variable]:
    """The padded batch (T, B, *) (``batch_first``: (B, T, *)) of sequences sorted by
    decreasing ``lengths``, packed to (N, *), and the batch size of each step (int32)."""
    default_outputs("F.pack_padded_sequence", n_outputs, outputs)
    return PackPaddedSequence(batch_first)(padded_sequence, lengths)


class PadPackedSequence(Function):
    """A packed batch padded back (see the module) with ``padding_value``, to
    ``total_length`` steps where that is longer than the longest sequence, and the
    length of each sequence (int32)."""

    nnabla_spec = FunctionSpec("PadPackedSequence", "pad_packed_sequence_param",
                               ("batch_first", "padding_value", "total_length"),
                               attrs("batch_first",
                                     padding_value=lambda fn: none_to(fn.padding_value, 0.0),
                                     total_length=lambda fn: none_to(fn.total_length, -1)),
                               call("pad_packed_sequence", "batch_first", "padding_value",
                                    "total_length"))

    def __init__(self, batch_first: bool, padding_value: float, total_length: int | None):
        self.batch_first = bool(batch_first)
        self.padding_value, self.total_length = padding_value, total_length

    def output_specs(self, inputs):
        packed, batch_sizes = inputs
        _counts(self, batch_sizes, "batch_sizes")
        if packed.ndim < 1:
            raise self.error("packed_sequence must be (N, *), got a scalar")
        if not np.isscalar(self.padding_value) or isinstance(self.padding_value, (str, bytes)):
            raise self.error(f"padding_value must be a number, got {self.padding_value!r}")
        if self.total_length is not None and (
                isinstance(self.total_length, bool)
                or not isinstance(self.total_length, (int, np.integer))):
            raise self.error(f"total_length must be None or an int, got {self.total_length!r}")
        self.rest, self.n = packed.shape[1:], packed.shape[0]
        batch = 0
        if batch_sizes.data.allocated and batch_sizes.shape[0]:
            batch = int(batch_sizes.d[0])
        return [(self._padded_shape(batch_sizes.shape[0], batch), packed.dtype),
                ((batch,), np.dtype(np.int32))]

    def _padded_shape(self, steps: int, batch: int) -> tuple[int, ...]:
        """Padded to the longest sequence, or to ``total_length`` where that is longer (a
        shorter one pads to the longest, as in nnabla)."""
        if self.total_length is not None:
            steps = max(steps, int(self.total_length))
        return ((batch, steps) if self.batch_first else (steps, batch)) + self.rest

    def _mask(self, xp, batch_sizes):
        """(T, B): whether sequence b is still running at step t."""
        ints = _sorted(self, batch_sizes, "batch_sizes", self.n, "the packed length")
        if int(ints.sum()) != self.n:
            raise self.error(f"batch_sizes add up to {int(ints.sum())}, but packed_sequence holds "
                             f"{self.n} rows; they must agree")
        batch = int(ints[0]) if ints.shape[0] else 0
        return xp.arange(batch)[None, :] < ints[:, None]

    def forward_arrays(self, xp, xs):
        packed, batch_sizes = xs
        mask = self._mask(xp, batch_sizes)
        steps, batch = mask.shape
        shape = self._padded_shape(steps, batch)
        long_shape = (shape[1], shape[0]) + self.rest if self.batch_first else shape
        padded = xp.full(long_shape, self.padding_value, packed.dtype)
        padded[:steps][mask] = packed
        if self.batch_first:
            padded = padded.swapaxes(0, 1).copy()
        lengths = mask.sum(axis=0).astype(np.int32)
        for out, result in zip(self.outputs, (padded, lengths)):
            if out.shape != result.shape:
                out.data.reset_shape(result.shape, force=True)
        return padded, lengths

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        if not need_grads[0]:
            return (None, None)
        mask = self._mask(xp, xs[1])
        g = gys[0].swapaxes(0, 1) if self.batch_first else gys[0]
        return (g[:mask.shape[0]][mask], None)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Linear in the packed batch but for the padding, which takes no gradient: the
        graph backward of its twin that pads with zeros (LinearBackward)."""
        zero_padded = copy.copy(self)
        zero_padded.padding_value = 0.0
        return linear_backward_graph(zero_padded, F, xs, ys, gys, need_grads)


def pad_packed_sequence(packed_sequence: Variable, batch_sizes: Variable, batch_first: bool = False,
                        padding_value: float | None = None, total_length: int | None = None,
                        n_outputs: int = -1, outputs=None) -> tuple[Variable, Variable]:
    """The packed batch (N, *) with the batch size of each step, padded back to
    (T, B, *) (``batch_first``: (B, T, *)) with ``padding_value`` (None: 0), to
    ``total_length`` steps where given, and the length of each sequence (int32)."""
    default_outputs("F.pad_packed_sequence", n_outputs, outputs)
    value = 0.0 if padding_value is None else padding_value
    return PadPackedSequence(batch_first, value, total_length)(packed_sequence, batch_sizes)
