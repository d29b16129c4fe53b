"""Datasets for the examples and notebooks, and their split between ranks.

``Dataset`` holds train and test images (N, C, H, W) with labels (N, 1);
``load_cifar10`` reads the official CIFAR-10 python archive, ``load_digits``
scikit-learn's bundled 8x8 digits and ``synthetic`` makes learnable random
images.  ``ShardedBatches`` gives every rank a disjoint shard of each epoch
(one permutation per epoch, shared by all ranks), addressed by iteration so
that a resumed run reads the same batches as an uninterrupted one."""
from .cifar10 import CIFAR10_URL, cifar10_available, download_cifar10, load_cifar10
from .datasets import Dataset, load_digits, synthetic
from .sharding import ShardedBatches, even_split

__all__ = ["CIFAR10_URL", "Dataset", "ShardedBatches", "cifar10_available", "download_cifar10",
           "even_split", "load_cifar10", "load_digits", "synthetic"]
