"""Confusion matrix cases (see functions.py): labels by rows, the largest score's class
by columns, summed over every sample; not differentiable."""
import numpy as np

from .functions import Case

R = np.random.RandomState(14)


def u(*shape):
    return R.uniform(0, 1, shape).astype(np.float32)


def labels(*shape, classes=3):
    return R.randint(0, classes, shape).astype(np.int64)


CASES = [
    Case("confusion_matrix", lambda lib, x, t: lib.F.confusion_matrix(x, t),
         (u(6, 3), labels(6, 1)), grad=False),
    Case("confusion_matrix axis 0", lambda lib, x, t: lib.F.confusion_matrix(x, t, axis=0),
         (u(4, 5), labels(1, 5, classes=4)), grad=False),
    Case("confusion_matrix axis 1 of 3d", lambda lib, x, t: lib.F.confusion_matrix(x, t, axis=1),
         (u(2, 3, 4), labels(2, 1, 4)), grad=False),
    Case("confusion_matrix axis -1 float labels",
         lambda lib, x, t: lib.F.confusion_matrix(x, t, axis=-1),
         (u(2, 3, 2), labels(2, 3, 1, classes=2).astype(np.float32)), grad=False),
]
