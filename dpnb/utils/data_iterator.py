"""nnabla's ``DataIterator``: mini-batches from a ``DataSource``, epoch after epoch,
with nnabla 1.39's wrap-around, shuffling, ``stop_exhausted`` and ``slice`` (how
each rank gets its own shard), and the ``data_iterator`` helpers that build one
over a load function, a data set CSV, a cache directory or several sources."""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ..errors import DpnbError
from .data_source import (DataSource, DataSourceWithFileCache,
                          DataSourceWithMemoryCache, SimpleDataSource, SlicedDataSource)
from .data_source_implements import CacheDataSource, ConcatDataSource, CsvDataSource

logger = logging.getLogger(__name__)

EpochCallback = Callable[[int], Any]
_Fetched = tuple[tuple[np.ndarray, ...] | None, int, int]


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _positive_int(name: str, value: Any) -> int:
    if not _is_int(value) or value <= 0:
        raise DpnbError(f"{name} must be a positive int, got {value!r}")
    return int(value)


class DataIterator:
    """Yields tuples of ``batch_size``-row arrays, one array per variable of the
    source; an epoch that ends mid-batch continues the batch from the next epoch.
    With ``use_thread`` the next batch is read in a background thread.  ``rng`` is
    accepted as in nnabla, whose iterator does not draw from it either."""

    def __init__(self, data_source: DataSource, batch_size: int,
                 rng: np.random.RandomState | None = None, use_thread: bool = True,
                 epoch_begin_callbacks: Sequence[EpochCallback] = (),
                 epoch_end_callbacks: Sequence[EpochCallback] = (),
                 stop_exhausted: bool = False):
        if not isinstance(data_source, DataSource):
            raise DpnbError(f"data_source must be a dpnb.utils.data_source.DataSource, got "
                            f"{type(data_source).__name__}; subclass DataSource")
        if not data_source.variables:
            raise DpnbError(f"{type(data_source).__name__} has no variables; set "
                            "self._variables (e.g. ('x', 'y')) in its __init__")
        if not _is_int(data_source.size) or data_source.size <= 0:
            raise DpnbError(f"{type(data_source).__name__} has size {data_source.size!r}; set "
                            "self._size to the number of examples in its __init__")
        if rng is not None and not callable(getattr(rng, "permutation", None)):
            raise DpnbError(f"rng must be a numpy.random.RandomState or None, got "
                            f"{type(rng).__name__}")
        self._data_source = data_source
        self._batch_size = _positive_int("batch_size", batch_size)
        self._shuffle = data_source.shuffle
        self._variables = data_source.variables
        self._size = int(data_source.size)
        self._stop_exhausted = stop_exhausted
        self._epoch_begin_callbacks = list(epoch_begin_callbacks)
        self._epoch_end_callbacks = list(epoch_end_callbacks)
        self._use_thread = use_thread
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future | None = None
        self._closed = False
        self._data_source.reset()
        self._position = self._data_source.position
        self._current_epoch = 0

    def __iter__(self) -> DataIterator:
        return self

    def __next__(self) -> tuple[np.ndarray, ...]:
        return self.next()

    def __enter__(self) -> DataIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _settle(self) -> None:
        """Wait for a batch being read in the background (keeping it for next())."""
        if self._pending is not None:
            self._pending.exception()

    def close(self) -> None:
        """Stop the background reader and close the data source; safe to call twice."""
        if self._closed:
            return
        self._settle()
        self._pending = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self._data_source.close()
        self._closed = True

    @property
    def epoch(self) -> int:
        """How many epochs the batches returned so far have finished."""
        return self._current_epoch

    @property
    def position(self) -> int:
        """Position within the epoch after the last batch returned."""
        return self._position

    @property
    def size(self) -> int:
        """Number of examples in one epoch of the source."""
        return self._size

    @property
    def variables(self) -> Sequence[str]:
        """Names of the arrays of a batch, in the order ``next()`` returns them."""
        return self._variables

    @property
    def batch_size(self) -> int:
        """Number of examples in each batch."""
        return self._batch_size

    def _fetch(self) -> _Fetched:
        """Read one batch: (arrays or None when exhausted, epochs ended, position after)."""
        source = self._data_source
        if self._stop_exhausted and source.position + self._batch_size > self._size:
            return None, 0, source.position
        columns: list[list] = [[] for _ in self._variables]
        ended = 0
        for _ in range(self._batch_size):
            example = source.next()
            if example is None or len(example) < len(columns):
                raise DpnbError(f"{type(source).__name__}._get_data returned {example!r:.80}; "
                                f"expected a tuple of {len(columns)} arrays, one per variable "
                                f"{tuple(self._variables)}")
            if not self._stop_exhausted and source.position >= self._size:
                ended += 1
                source.reset()
            for column, value in zip(columns, example):
                column.append(value)
        if ended:
            source.apply_order()
        return tuple(np.array(c) for c in columns), ended, source.position

    def next(self) -> tuple[np.ndarray, ...]:
        """The next batch: a tuple of arrays of ``batch_size`` rows.  With
        ``stop_exhausted``, raises StopIteration once fewer than a batch remain."""
        if self._closed:
            raise DpnbError("this DataIterator is closed; make a new one to read more batches")
        if self._pending is not None:
            pending, self._pending = self._pending, None
            batch, ended, position = pending.result()
        else:
            batch, ended, position = self._fetch()
        if batch is None:
            raise StopIteration
        self._position = position
        if self._use_thread:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1,
                                                    thread_name_prefix="dpnb-data-iterator")
            self._pending = self._executor.submit(self._fetch)
        for _ in range(ended):
            self._callback_epoch_end()
            self._current_epoch += 1
            self._callback_epoch_begin()
        return batch

    def slice(self, rng: np.random.RandomState | None, num_of_slices: int | None = None,
              slice_pos: int | None = None, slice_start: int | None = None,
              slice_end: int | None = None, cache_dir: str | os.PathLike | None = None,
              use_cache: bool = False, drop_last: bool = False) -> DataIterator:
        """A new iterator over part of this one's source: slice ``slice_pos`` of
        ``num_of_slices`` (ranks use their rank and the world size), or positions
        ``slice_start`` to ``slice_end``.  Without ``drop_last``, the last slices
        overlap so that all have the same size."""
        by_position = num_of_slices is not None and slice_pos is not None
        by_range = slice_start is not None and slice_end is not None
        if by_position and slice_start is None and slice_end is None:
            slice_start, slice_end = self._slice_range(num_of_slices, slice_pos, drop_last)
        elif not (by_range and num_of_slices is None and slice_pos is None):
            raise DpnbError("slice() needs either num_of_slices and slice_pos, or slice_start and "
                            f"slice_end; got num_of_slices={num_of_slices!r}, "
                            f"slice_pos={slice_pos!r}, slice_start={slice_start!r}, "
                            f"slice_end={slice_end!r}")
        self._settle()
        if cache_dir is None:
            cache_dir = self._find_cache_dir()
        source = self._data_source
        sliced = SlicedDataSource(source, source.shuffle, slice_start=slice_start,
                                  slice_end=slice_end)
        if not use_cache:
            return DataIterator(sliced, self._batch_size)
        if cache_dir is not None:
            sliced = DataSourceWithFileCache(
                sliced, cache_dir=cache_dir,
                cache_file_name_prefix=f"cache_sliced_{slice_start:08d}_{slice_end:08d}",
                shuffle=self._shuffle, rng=rng)
        return DataIterator(DataSourceWithMemoryCache(sliced, shuffle=self._shuffle, rng=rng),
                            self._batch_size)

    def _slice_range(self, num_of_slices: int, slice_pos: int, drop_last: bool) -> tuple[int, int]:
        """nnabla's split: equal slices of ceil(size / n), the last ones shifted back
        to end at the source's end (or floor(size / n) with ``drop_last``)."""
        n = _positive_int("num_of_slices", num_of_slices)
        if not _is_int(slice_pos) or not 0 <= slice_pos < n:
            raise DpnbError(f"slice_pos must be an int in [0, {n}), got {slice_pos!r}")
        if drop_last:
            length = self._size // n
            if length == 0:
                raise DpnbError(f"{self._size} examples cannot give {n} slices with "
                                "drop_last=True; use fewer slices or drop_last=False")
            start = length * slice_pos
            return start, start + length
        length = (self._size + n - 1) // n
        start = (length * slice_pos) % self._size
        end = start + length
        if end > self._size:
            start, end = start - (end - self._size), self._size
        return start, end

    def _find_cache_dir(self) -> str | None:
        """The directory of the innermost file cache under this iterator's source."""
        found = None
        source = self._data_source
        while isinstance(source, (DataSourceWithMemoryCache, DataSourceWithFileCache,
                                  SlicedDataSource)):
            if isinstance(source, DataSourceWithFileCache):
                found = source.cache_dir
            source = source.data_source
        return found

    def _callback_epoch_end(self) -> None:
        for callback in self._epoch_end_callbacks:
            callback(self.epoch)

    def _callback_epoch_begin(self) -> None:
        for callback in self._epoch_begin_callbacks:
            callback(self.epoch)

    def register_epoch_end_callback(self, callback: EpochCallback) -> None:
        """Call ``callback(epoch)`` each time an epoch ends, with the ending epoch."""
        self._epoch_end_callbacks.append(callback)

    def register_epoch_begin_callback(self, callback: EpochCallback) -> None:
        """Call ``callback(epoch)`` each time an epoch begins, with the new epoch."""
        self._epoch_begin_callbacks.append(callback)


def data_iterator(data_source: DataSource, batch_size: int,
                  rng: np.random.RandomState | None = None, use_thread: bool = True,
                  with_memory_cache: bool = True, with_file_cache: bool = False,
                  cache_dir: str | os.PathLike | None = None,
                  epoch_begin_callbacks: Sequence[EpochCallback] = (),
                  epoch_end_callbacks: Sequence[EpochCallback] = (),
                  stop_exhausted: bool = False) -> DataIterator:
    """A ``DataIterator`` over ``data_source``, optionally behind a file cache
    (written under ``cache_dir`` or a temporary directory) and a memory cache;
    ``rng`` shuffles the caches."""
    if not isinstance(data_source, DataSource):
        raise DpnbError(f"data_source must be a dpnb.utils.data_source.DataSource, got "
                        f"{type(data_source).__name__}; subclass DataSource")
    if cache_dir is not None and not with_file_cache:
        logger.warning("cache_dir=%r is used only with with_file_cache=True; no file cache is made",
                       cache_dir)
    source = data_source
    if with_file_cache:
        source = DataSourceWithFileCache(source, cache_dir=cache_dir, shuffle=source.shuffle,
                                         rng=rng)
    if with_memory_cache:
        source = DataSourceWithMemoryCache(source, shuffle=source.shuffle, rng=rng)
    return DataIterator(source, batch_size, use_thread=use_thread,
                        epoch_begin_callbacks=epoch_begin_callbacks,
                        epoch_end_callbacks=epoch_end_callbacks, stop_exhausted=stop_exhausted)


def data_iterator_simple(load_func: Callable[[int], Sequence[Any]], num_examples: int,
                         batch_size: int, shuffle: bool = False,
                         rng: np.random.RandomState | None = None, use_thread: bool = True,
                         with_memory_cache: bool = False, with_file_cache: bool = False,
                         cache_dir: str | os.PathLike | None = None,
                         epoch_begin_callbacks: Sequence[EpochCallback] = (),
                         epoch_end_callbacks: Sequence[EpochCallback] = (),
                         stop_exhausted: bool = False) -> DataIterator:
    """A ``DataIterator`` over ``load_func(i)`` for i in range(num_examples), each
    returning a tuple of arrays (variables ``x0``, ``x1``, ...)."""
    return data_iterator(SimpleDataSource(load_func, num_examples, shuffle=shuffle, rng=rng),
                         batch_size, use_thread=use_thread, with_memory_cache=with_memory_cache,
                         with_file_cache=with_file_cache, cache_dir=cache_dir,
                         epoch_begin_callbacks=epoch_begin_callbacks,
                         epoch_end_callbacks=epoch_end_callbacks, stop_exhausted=stop_exhausted)


def data_iterator_csv_dataset(uri: str | os.PathLike, batch_size: int, shuffle: bool = False,
                              rng: np.random.RandomState | None = None, use_thread: bool = True,
                              normalize: bool = True, with_memory_cache: bool = True,
                              with_file_cache: bool = True,
                              cache_dir: str | os.PathLike | None = None,
                              epoch_begin_callbacks: Sequence[EpochCallback] = (),
                              epoch_end_callbacks: Sequence[EpochCallback] = (),
                              stop_exhausted: bool = False) -> DataIterator:
    """A ``DataIterator`` over the data set CSV at ``uri`` (a ``CsvDataSource``;
    images scaled to [0, 1] with ``normalize``), behind a file cache and a memory
    cache by default."""
    source = CsvDataSource(uri, shuffle=shuffle, rng=rng, normalize=normalize)
    return data_iterator(source, batch_size, use_thread=use_thread,
                         with_memory_cache=with_memory_cache, with_file_cache=with_file_cache,
                         cache_dir=cache_dir, epoch_begin_callbacks=epoch_begin_callbacks,
                         epoch_end_callbacks=epoch_end_callbacks, stop_exhausted=stop_exhausted)


def data_iterator_cache(uri: str | os.PathLike, batch_size: int, shuffle: bool = False,
                        rng: np.random.RandomState | None = None, use_thread: bool = True,
                        normalize: bool = True, with_memory_cache: bool = True,
                        epoch_begin_callbacks: Sequence[EpochCallback] = (),
                        epoch_end_callbacks: Sequence[EpochCallback] = (),
                        stop_exhausted: bool = False) -> DataIterator:
    """A ``DataIterator`` over the cache directory ``uri`` (a ``CacheDataSource``;
    uint8 and uint16 arrays scaled to [0, 1] with ``normalize``)."""
    source = CacheDataSource(uri, shuffle=shuffle, rng=rng, normalize=normalize)
    return data_iterator(source, batch_size, use_thread=use_thread,
                         with_memory_cache=with_memory_cache,
                         epoch_begin_callbacks=epoch_begin_callbacks,
                         epoch_end_callbacks=epoch_end_callbacks, stop_exhausted=stop_exhausted)


def data_iterator_concat_datasets(data_source_list: Sequence[DataSource], batch_size: int,
                                  shuffle: bool = False, rng: np.random.RandomState | None = None,
                                  use_thread: bool = True, with_memory_cache: bool = True,
                                  with_file_cache: bool = False,
                                  cache_dir: str | os.PathLike | None = None,
                                  epoch_begin_callbacks: Sequence[EpochCallback] = (),
                                  epoch_end_callbacks: Sequence[EpochCallback] = (),
                                  stop_exhausted: bool = False) -> DataIterator:
    """A ``DataIterator`` over the examples of several sources together (a
    ``ConcatDataSource``, shuffled together with ``shuffle``)."""
    source = ConcatDataSource(data_source_list, shuffle=shuffle, rng=rng)
    return data_iterator(source, batch_size, use_thread=use_thread,
                         with_memory_cache=with_memory_cache, with_file_cache=with_file_cache,
                         cache_dir=cache_dir, epoch_begin_callbacks=epoch_begin_callbacks,
                         epoch_end_callbacks=epoch_end_callbacks, stop_exhausted=stop_exhausted)
