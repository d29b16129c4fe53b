"""The in-memory dataset type, a synthetic dataset and scikit-learn's digits."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import DpnbError


@dataclasses.dataclass
class Dataset:
    """Train and test images (N, C, H, W) with int32 labels (N, 1).

    Images may be stored compactly (uint8); ``scale`` turns them into float32
    inputs when a batch is taken, so that each rank keeps one small copy."""

    name: str
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    num_classes: int
    scale: float = 1.0

    @property
    def image_shape(self) -> tuple[int, ...]:
        return tuple(self.train_images.shape[1:])

    def inputs(self, images: np.ndarray) -> np.ndarray:
        """Float32 network inputs for stored images."""
        return images.astype(np.float32) * np.float32(self.scale)


def synthetic(num_train: int = 512, num_test: int = 128, shape: tuple[int, ...] = (3, 32, 32),
              num_classes: int = 10, seed: int = 0) -> Dataset:
    """Images (C, H, W) of a random pattern per class plus noise, the same in every
    process for the same arguments.  The patterns are coarse (8x8-pixel blocks) and
    mirror-symmetric, so that crops and flips as for CIFAR-10 keep them recognisable."""
    if num_train < 1 or num_test < 1 or num_classes < 2 or len(shape) != 3:
        raise DpnbError(f"synthetic needs num_train >= 1, num_test >= 1, num_classes >= 2 and "
                        f"a shape (C, H, W), got {num_train}, {num_test}, {num_classes}, {shape}")
    rng = np.random.RandomState(seed)
    c, h, w = shape
    coarse = rng.standard_normal((num_classes, c, -(-h // 8), -(-w // 8)))
    patterns = coarse.repeat(8, axis=2).repeat(8, axis=3)[:, :, :h, :w]
    patterns = ((patterns + patterns[..., ::-1]) / np.sqrt(2)).astype(np.float32)

    def make(n: int) -> tuple[np.ndarray, np.ndarray]:
        labels = rng.randint(0, num_classes, size=(n, 1)).astype(np.int32)
        noise = rng.standard_normal((n,) + tuple(shape)).astype(np.float32)
        return patterns[labels[:, 0]] + noise, labels

    train = make(num_train)
    test = make(num_test)
    return Dataset("synthetic", *train, *test, num_classes)


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """scikit-learn's 1797 bundled 8x8 digit images (no download), split at random
    (fixed by ``seed``) into train and test; pixels scaled from 0..16 to 0..1."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError as e:
        raise DpnbError("the digits dataset needs scikit-learn, which is not installed; "
                        "install it with `pip install 'dpnb[digits]'`") from e
    if not 0 < test_fraction < 1:
        raise DpnbError(f"test_fraction must be in (0, 1), got {test_fraction}")
    digits = sklearn_digits()
    images = digits.images.astype(np.float32).reshape(-1, 1, 8, 8)
    labels = digits.target.astype(np.int32).reshape(-1, 1)
    order = np.random.RandomState(seed).permutation(len(images))
    n_test = int(round(len(images) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return Dataset("digits", images[train], labels[train], images[test], labels[test], 10,
                   scale=1 / 16)
