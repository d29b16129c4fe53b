"""Splitting data between ranks: per-epoch shards for training, an even split
for evaluation."""
from __future__ import annotations

import numpy as np

from ..errors import DpnbError


def even_split(n: int, rank: int, size: int) -> slice:
    """Rank ``rank``'s part of ``n`` items cut into ``size`` nearly equal, disjoint,
    consecutive parts that together cover all of them (for evaluation)."""
    if not 0 <= rank < size:
        raise DpnbError(f"rank must be in 0..{size - 1}, got {rank}")
    return slice(rank * n // size, (rank + 1) * n // size)


class ShardedBatches:
    """Training batches of one rank.

    Each epoch, one permutation of all ``n`` samples, drawn from ``seed`` and the
    epoch number, is the same on every rank; rank ``r`` takes its ``r``-th of
    ``size`` equal slices (the last ``n % size`` samples of the permutation sit
    out that epoch) and cuts it into ``batch_size`` batches, dropping the rest.
    Batch ``i`` of the whole run is a function of ``i`` alone, so a run resumed
    at iteration ``i`` reads what an uninterrupted run would."""

    def __init__(self, n: int, batch_size: int, rank: int = 0, size: int = 1, seed: int = 0):
        if not 0 <= rank < size:
            raise DpnbError(f"rank must be in 0..{size - 1}, got {rank}")
        self.n, self.batch_size, self.rank, self.size, self.seed = n, batch_size, rank, size, seed
        self.shard_size = n // size
        if batch_size < 1 or batch_size > self.shard_size:
            raise DpnbError(f"the batch size per rank must be in 1..{self.shard_size}: "
                            f"{n} training samples over {size} ranks give shards of "
                            f"{self.shard_size}, but the batch size is {batch_size}; use a smaller "
                            "batch size or fewer ranks")
        self.iters_per_epoch = self.shard_size // batch_size
        self._epoch = -1
        self._shard = np.empty(0, np.intp)

    def shard(self, epoch: int) -> np.ndarray:
        """Indices of this rank's samples in ``epoch``, in the order they are used."""
        if epoch != self._epoch:
            order = np.random.RandomState([self.seed, epoch]).permutation(self.n)
            start = self.rank * self.shard_size
            self._epoch, self._shard = epoch, order[start:start + self.shard_size]
        return self._shard

    def indices(self, iteration: int) -> np.ndarray:
        """Indices of the samples in batch ``iteration`` (counted from the run's start)."""
        epoch, step = divmod(iteration, self.iters_per_epoch)
        return self.shard(epoch)[step * self.batch_size:(step + 1) * self.batch_size]
