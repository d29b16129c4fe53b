"""vat_noise cases (see functions.py): the noise scaled to norm eps per sample.  Its
backward hands x a zero gradient and writes eps times the output gradient into w's
data (checked in test_functions_more.py), so finite differences do not apply."""
import numpy as np

from .functions import Case

R = np.random.RandomState(15)


def n(*shape):
    return R.randn(*shape).astype(np.float32)


CASES = [
    Case("vat_noise", lambda lib, x, w: lib.F.vat_noise(x, w), (n(2, 3), n(2, 3)), fd=False),
    Case("vat_noise eps", lambda lib, x, w: lib.F.vat_noise(x, w, eps=2.5), (n(3, 4), n(3, 4)),
         fd=False),
    Case("vat_noise base_axis 2", lambda lib, x, w: lib.F.vat_noise(x, w, base_axis=2, eps=0.5),
         (n(2, 3, 2), n(2, 3, 2)), fd=False),
    Case("vat_noise base_axis -1", lambda lib, x, w: lib.F.vat_noise(x, w, base_axis=-1),
         (n(2, 2, 3), n(2, 2, 3)), need_grad=(True, False), fd=False),
    Case("vat_noise tiny", lambda lib, x, w: lib.F.vat_noise(x, w),
         (np.full((1, 2), 1e-5, np.float32), n(1, 2)), fd=False),
]
