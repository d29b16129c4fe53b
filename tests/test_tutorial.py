"""The seed tutorial's code, single-process, with only its imports changed to dpnb."""
import numpy as np
import pytest

from seed_tutorial import SINGLE_PROCESS


def run_tutorial():
    np.random.seed(0)  # the tutorial draws its data from NumPy's global generator
    namespace = {}
    exec(SINGLE_PROCESS, namespace)
    return namespace


def reference_loss(x, y, conv_w, conv_b, aff_w, aff_b):
    """The tutorial network written directly in NumPy, float64."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    h = np.zeros((x.shape[0], 1, 32, 32))
    for i in range(3):
        for j in range(3):
            h[:, 0] += conv_w[0, 0, i, j] * padded[:, 0, i:i + 32, j:j + 32]
    h += conv_b[0]
    pred = h.reshape(len(x), -1) @ aff_w + aff_b
    pred -= pred.max(axis=1, keepdims=True)
    logp = pred - np.log(np.exp(pred).sum(axis=1, keepdims=True))
    return -np.mean(logp[np.arange(len(x)), y.ravel().astype(int)])


def test_tutorial_parameters_and_gradients():
    ns = run_tutorial()
    params = ns["nn"].get_parameters()
    assert list(params) == ["conv/W", "conv/b", "affine/W", "affine/b"]
    assert params["conv/W"].shape == (1, 1, 3, 3) and params["affine/W"].shape == (1024, 2)
    values = [np.asarray(p.d, dtype=np.float64) for p in params.values()]
    x, y = ns["x_data"], ns["y_data"]
    assert float(ns["loss"].d) == pytest.approx(reference_loss(x, y, *values), rel=1e-5)
    eps = 1e-6
    for p, value in zip(params.values(), values):
        flat = value.reshape(-1)
        for j in np.random.RandomState(1).choice(flat.size, min(flat.size, 6), replace=False):
            old = flat[j]
            flat[j] = old + eps
            up = reference_loss(x, y, *values)
            flat[j] = old - eps
            down = reference_loss(x, y, *values)
            flat[j] = old
            numeric = (up - down) / (2 * eps)
            assert p.g.reshape(-1)[j] == pytest.approx(numeric, rel=1e-3, abs=1e-5)


def test_tutorial_trains():
    ns = run_tutorial()
    loss, solver = ns["loss"], ns["solver"]
    losses = []
    for _ in range(100):
        loss.forward()
        losses.append(float(loss.d))
        solver.zero_grad()
        loss.backward()
        solver.update()
    assert losses[-1] < 0.2 * losses[0]
