import numpy as np
import dpnb.functions as F
from gradcheck import check_grad

def test_add2_broadcast(rng):
    a, b = rng.randn(2, 3), rng.randn(3)
    y = check_grad(F.add2, [a, b])
    np.testing.assert_allclose(y.d, a + b)
