"""ResNet-23 for 32x32 images, the network of the CIFAR-10 data-parallel example."""
from __future__ import annotations

from collections.abc import Callable

from .. import functions as F
from .. import parametric_functions as PF
from ..graph import Variable
from ..parameter import parameter_scope


BatchNorm = Callable[..., Variable]  # (h, batch_stat=...) -> normalized h


def _conv_bn(x: Variable, maps: int, kernel: int, test: bool, bn: BatchNorm) -> Variable:
    """Convolution without bias (batch norm supplies it) followed by batch norm."""
    pad = (kernel // 2, kernel // 2)
    h = PF.convolution(x, maps, (kernel, kernel), pad=pad, with_bias=False)
    return bn(h, batch_stat=not test)


def _bottleneck(x: Variable, scope: str, test: bool, bn: BatchNorm) -> Variable:
    """1x1 down to C/2, 3x3 at C/2, 1x1 back to C, added to the input."""
    maps = x.shape[1]
    with parameter_scope(scope):
        with parameter_scope("conv1"):
            h = F.relu(_conv_bn(x, maps // 2, 1, test, bn))
        with parameter_scope("conv2"):
            h = F.relu(_conv_bn(h, maps // 2, 3, test, bn))
        with parameter_scope("conv3"):
            h = _conv_bn(h, maps, 1, test, bn)
    return F.relu(F.add2(h, x))


def resnet23_prediction(image: Variable, test: bool = False, ncls: int = 10,
                        nmaps: int = 64, bn: BatchNorm = PF.batch_normalization) -> Variable:
    """Class scores (B, ncls) for images (B, C, 32, 32).

    ``test=True`` uses the batch-norm running statistics instead of the batch's;
    ``bn`` is the batch normalization (e.g. a ``PF.sync_batch_normalization``
    bound to a communicator, for statistics over every rank's batch)."""
    with parameter_scope("conv1"):
        h = F.relu(_conv_bn(image, nmaps, 3, test, bn))
    for unit in range(2, 9):
        h = _bottleneck(h, f"conv{unit}", test, bn)
        if unit in (3, 5, 7):
            h = F.max_pooling(h, (2, 2))
    h = F.average_pooling(h, (4, 4))
    return PF.affine(h, ncls)
