"""nnabla's ``nnabla.testing.assert_allclose``: NumPy's, with ``numpy.allclose``'s
tolerances as defaults (``rtol=1e-5, atol=1e-6``) instead of ``rtol=1e-7, atol=0``."""
import numpy as np


def assert_allclose(actual, desired, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg="",
                    verbose=True) -> None:
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=atol, equal_nan=equal_nan,
                               err_msg=err_msg, verbose=verbose)
