"""Loss and error cases (see functions.py): every function and option; differences
are kept at least 0.1 from the kinks of the absolute, Huber and epsilon-insensitive
losses."""
import numpy as np

from .functions import Case

R = np.random.RandomState(0)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


def apart(shape, kinks, low=-2.0, high=2.0):
    """Two float32 arrays whose difference stays at least 0.1 from every kink (and its negative)."""
    a = u(*shape, low=low, high=high)
    d = R.uniform(low, high, shape)
    for k in kinks:
        for kink in {k, -k}:
            near = np.abs(d - kink) < 0.1
            d[near] = kink + np.where(d[near] >= kink, 0.15, -0.15)
    return a, (a - d).astype(np.float32)


def labels(shape, classes):
    """Integer class labels."""
    return R.randint(0, classes, shape).astype(np.int32)


def probabilities(*shape, axis=-1):
    """Rows of positive float32 probabilities summing to one along ``axis``."""
    p = R.uniform(0.2, 1.0, shape)
    return (p / p.sum(axis=axis, keepdims=True)).astype(np.float32)


CASES = [
    Case("softmax_cross_entropy", lambda lib, x, t: lib.F.softmax_cross_entropy(x, t),
         (u(3, 4), labels((3, 1), 4))),
    Case("softmax_cross_entropy axis", lambda lib, x, t: lib.F.softmax_cross_entropy(x, t, axis=1),
         (u(2, 3, 2), labels((2, 1, 2), 3))),
    # nnabla truncates the target to an integer label; dpnb takes probabilities as they are
    # (test_functions_loss.py checks them), so the shared case keeps to 0 and 1.
    Case("sigmoid_cross_entropy", lambda lib, x, t: lib.F.sigmoid_cross_entropy(x, t),
         (u(3, 4, low=-3, high=3), R.randint(0, 2, (3, 4)).astype(np.float32)),
         need_grad=(True, False)),
    Case("squared_error", lambda lib, a, b: lib.F.squared_error(a, b), (u(3, 4), u(3, 4))),
    Case("squared_error broadcast", lambda lib, a, b: lib.F.squared_error(a, b), (u(3, 4), u(1, 4))),
    Case("top_n_error", lambda lib, x, t: lib.F.top_n_error(x, t), (u(4, 5), labels((4, 1), 5)),
         grad=False),
    Case("top_n_error axis n", lambda lib, x, t: lib.F.top_n_error(x, t, axis=1, n=2),
         (u(2, 5, 3), labels((2, 1, 3), 5)), grad=False),
    Case("binary_cross_entropy", lambda lib, x, t: lib.F.binary_cross_entropy(x, t),
         (u(3, 4, low=0.1, high=0.9), u(3, 4, low=0, high=1))),
    Case("binary_cross_entropy binary target", lambda lib, x, t: lib.F.binary_cross_entropy(x, t),
         (u(3, 4, low=0.1, high=0.9), R.randint(0, 2, (3, 4)).astype(np.float32)),
         need_grad=(True, False)),
    Case("categorical_cross_entropy", lambda lib, x, t: lib.F.categorical_cross_entropy(x, t),
         (probabilities(3, 4), labels((3, 1), 4))),
    Case("categorical_cross_entropy axis", lambda lib, x, t: lib.F.categorical_cross_entropy(
        x, t, axis=1), (probabilities(2, 3, 2, axis=1), labels((2, 1, 2), 3))),
    Case("categorical_cross_entropy axis negative",
         lambda lib, x, t: lib.F.categorical_cross_entropy(x, t, axis=-3),
         (probabilities(3, 2, 2, axis=0), labels((1, 2, 2), 3))),
    Case("categorical_cross_entropy float labels",
         lambda lib, x, t: lib.F.categorical_cross_entropy(x, t),
         (probabilities(3, 4), labels((3, 1), 4).astype(np.float32)), need_grad=(True, False)),
    Case("huber_loss", lambda lib, a, b: lib.F.huber_loss(a, b), apart((3, 4), [1.0])),
    Case("huber_loss delta", lambda lib, a, b: lib.F.huber_loss(a, b, delta=0.5),
         apart((3, 4), [0.5])),
    Case("huber_loss broadcast", lambda lib, a, b: lib.F.huber_loss(a, b, 0.7),
         (u(3, 4, low=-2, high=2), np.array([[0.05, -0.3, 1.2, 0.45]], np.float32))),
    Case("absolute_error", lambda lib, a, b: lib.F.absolute_error(a, b), apart((3, 4), [0.0])),
    Case("absolute_error broadcast", lambda lib, a, b: lib.F.absolute_error(a, b),
         (np.array([[0.5, -1.0, 2.0], [1.5, 0.3, -0.6]], np.float32),
          np.array([[0.1, 0.4, -0.2]], np.float32))),
    Case("epsilon_insensitive_loss", lambda lib, a, b: lib.F.epsilon_insensitive_loss(a, b, 0.5),
         apart((3, 4), [0.0, 0.5])),
    Case("epsilon_insensitive_loss epsilon 0",
         lambda lib, a, b: lib.F.epsilon_insensitive_loss(a, b, epsilon=0.0), apart((3, 4), [0.0])),
    Case("kl_multinomial", lambda lib, p, q: lib.F.kl_multinomial(p, q),
         (probabilities(3, 4), probabilities(3, 4))),
    Case("kl_multinomial base_axis", lambda lib, p, q: lib.F.kl_multinomial(p, q, base_axis=2),
         (probabilities(2, 3, 2), probabilities(2, 3, 2))),
    # base_axis=0 is left out: nnabla 1.39 returns garbage there (about -1e21 for a KL
    # divergence); test_functions_loss.py checks dpnb's sum over every axis.
    Case("kl_multinomial base_axis negative",
         lambda lib, p, q: lib.F.kl_multinomial(p, q, base_axis=-2),
         (probabilities(2, 2, 3), probabilities(2, 2, 3))),
    Case("binary_error", lambda lib, x, t: lib.F.binary_error(x, t),
         (np.array([[0.5, 0.49, 0.51, 0.2], [0.9, 0.1, 0.7, 0.3]], np.float32),
          np.array([[0.5, 0.5, 0.49, 0.7], [1.0, 0.0, 0.0, 1.0]], np.float32)), grad=False),
]
