"""Packed sequence cases (see functions.py): padded batches of sequences sorted by
decreasing length packed step by step, and packed ones padded back.  Lengths and
batch sizes are integer counts without gradients.  nnabla 1.39 fills the padding with
zeros whatever padding_value says; dpnb's padding_value is checked in
test_functions_more.py, so these cases keep its default."""
import numpy as np

from .functions import Case

R = np.random.RandomState(16)


def u(*shape):
    return R.uniform(-1, 1, shape).astype(np.float32)


LENGTHS = np.array([4, 2, 1], np.int64)
SHORT = np.array([3, 3, 1], np.int64)  # none as long as the padding
BATCH_SIZES = np.array([3, 2, 1, 1], np.int64)



def eager(build):
    """nnabla sizes pad_packed_sequence's output from the batch sizes when it is built,
    so a chain of the two is built in auto_forward mode (as nnabla asks)."""
    def built(lib, *xs):
        with lib.nn.auto_forward():
            return build(lib, *xs)
    return built


CASES = [
    Case("pack_padded_sequence", lambda lib, x, n: lib.F.pack_padded_sequence(x, n),
         (u(4, 3, 2), LENGTHS)),
    Case("pack_padded_sequence batch_first",
         lambda lib, x, n: lib.F.pack_padded_sequence(x, n, batch_first=True),
         (u(3, 4, 2), LENGTHS)),
    Case("pack_padded_sequence shorter than the padding",
         lambda lib, x, n: lib.F.pack_padded_sequence(x, n), (u(5, 3), SHORT)),
    Case("pack_padded_sequence float lengths 3d rest",
         lambda lib, x, n: lib.F.pack_padded_sequence(x, n, True),
         (u(3, 4, 2, 2), LENGTHS.astype(np.float32)), need_grad=(True, False)),
    Case("pad_packed_sequence", lambda lib, x, b: lib.F.pad_packed_sequence(x, b),
         (u(7, 2), BATCH_SIZES)),
    Case("pad_packed_sequence batch_first",
         lambda lib, x, b: lib.F.pad_packed_sequence(x, b, batch_first=True),
         (u(7, 3), BATCH_SIZES)),
    Case("pad_packed_sequence 1d", lambda lib, x, b: lib.F.pad_packed_sequence(x, b),
         (u(7), BATCH_SIZES)),
    Case("pad_packed_sequence total_length",
         lambda lib, x, b: lib.F.pad_packed_sequence(x, b, total_length=6), (u(7, 2), BATCH_SIZES)),
    Case("pad_packed_sequence batch_first total_length",
         lambda lib, x, b: lib.F.pad_packed_sequence(x, b, True, None, 5),
         (u(6, 2), np.array([3, 3], np.int64))),
    Case("pack then pad", eager(
        lambda lib, x, n: lib.F.pad_packed_sequence(*lib.F.pack_padded_sequence(x, n, True), True)),
         (u(3, 4, 2), LENGTHS)),
]
