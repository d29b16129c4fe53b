"""ResNet-23 as the CIFAR-10 example describes it."""
import numpy as np

import dpnb as nn
import dpnb.functions as F
import dpnb.solvers as S
from dpnb.models import resnet23_prediction


def test_resnet23_structure():
    image = nn.Variable((2, 3, 32, 32))
    pred = resnet23_prediction(image, ncls=10, nmaps=16)
    assert pred.shape == (2, 10)
    params = nn.get_parameters(grad_only=False)
    convs = [k for k in params if k.endswith("conv/W")]
    assert len(convs) == 1 + 7 * 3
    assert not any(k.endswith("conv/b") for k in params)
    assert params["conv1/conv/W"].shape == (16, 3, 3, 3)
    assert params["conv2/conv1/conv/W"].shape == (8, 16, 1, 1)
    assert params["conv2/conv2/conv/W"].shape == (8, 8, 3, 3)
    assert params["conv2/conv3/conv/W"].shape == (16, 8, 1, 1)
    assert params["affine/W"].shape == (16, 10)
    assert sum(k.endswith("bn/mean") for k in params) == 22


def test_resnet23_learns_a_tiny_batch_and_runs_in_test_mode():
    rng = np.random.RandomState(0)
    image, label = nn.Variable((8, 3, 32, 32)), nn.Variable((8, 1))
    image.d = rng.randn(8, 3, 32, 32)
    label.d = rng.randint(0, 10, (8, 1))
    loss = F.mean(F.softmax_cross_entropy(resnet23_prediction(image, nmaps=16), label))
    solver = S.Adam(alpha=1e-2)
    solver.set_parameters(nn.get_parameters())
    losses = []
    for _ in range(15):
        loss.forward()
        losses.append(float(loss.d))
        solver.zero_grad()
        loss.backward()
        solver.update()
    assert losses[-1] < 0.3 * losses[0]
    test_pred = resnet23_prediction(image, test=True, nmaps=16)
    test_pred.forward(clear_buffer=True)
    assert np.isfinite(test_pred.d).all()
