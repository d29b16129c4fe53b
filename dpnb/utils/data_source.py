"""nnabla's data sources: the ``DataSource`` protocol that ``DataIterator`` reads,
``SimpleDataSource`` over a load function, the memory and file caches, and the
slice a rank reads.  Orders and random draws follow nnabla 1.39 call for call, so
a program seeded as under nnabla reads its examples in the same order."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..config import nnabla_config
from ..errors import DpnbError
from . import cache_files

logger = logging.getLogger(__name__)

DEFAULT_SEED = 313
"""nnabla's seed for the generator a data source makes when given none."""
MAX_PENDING_GENERATIONS = 15
"""How many epochs' orders a ``SimpleDataSource`` keeps for slices that lag behind."""


def _setting(name: str) -> str:
    """A setting of the ``[DATA_ITERATOR]`` section of ``nnabla_config``."""
    return nnabla_config.get("DATA_ITERATOR", name)


def _positive_setting(name: str) -> int:
    value = _setting(name)
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise DpnbError(f"the {name} of nnabla.conf's [DATA_ITERATOR] section (nnabla_config) "
                        f"must be a positive int, got {value!r}")
    return number


def _check_rng(rng: Any) -> Any:
    if rng is None:
        return np.random.RandomState(DEFAULT_SEED)
    if not callable(getattr(rng, "permutation", None)):
        raise DpnbError(f"rng must be a numpy.random.RandomState or None, got "
                        f"{type(rng).__name__}; pass numpy.random.RandomState(seed)")
    return rng


class DataSource:
    """Examples addressed by position; subclasses implement ``_get_data(position)``
    returning a tuple of arrays and set ``self._size`` and ``self._variables``."""

    def __init__(self, shuffle: bool = False, rng: np.random.RandomState | None = None):
        logger.debug("%s with shuffle=%s", type(self).__name__, shuffle)
        self._rng = _check_rng(rng)
        self._shuffle = shuffle
        self._variables: Sequence[str] | None = None
        self._size = 0
        self._position = 0
        self._order: list[int] | None = None
        self._original_order: list[int] | None = None
        self._original_source_uri: str | None = None
        self._closed = False

    def _get_data(self, position: int) -> tuple:
        raise DpnbError(f"{type(self).__name__} does not implement _get_data(position); a "
                        "DataSource subclass must define it to return the arrays of one example")

    def _get_data_of_generation(self, position: int, generation: int) -> tuple:
        """The example at ``position`` in the order of epoch ``generation``; sources
        that keep one order per epoch (SimpleDataSource) override it for slices."""
        return self._get_data(position)

    def _generate_order(self, generation: int) -> None:
        """Make the order of epoch ``generation`` if not made yet; a hook for slices,
        which sources without per-epoch orders leave empty."""

    def __next__(self) -> tuple:
        return self.next()

    def __enter__(self) -> DataSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release what the source holds (files, wrapped sources); safe to call twice."""
        self._closed = True

    @property
    def order(self) -> list[int] | None:
        """The current order of example indexes, where the source keeps one."""
        return self._order

    @property
    def variables(self) -> Sequence[str] | None:
        """Names of the arrays in each example, such as ``('x', 'y')``."""
        return self._variables

    def next(self) -> tuple:
        """The example at the current position, moving the position on by one."""
        data = self._get_data(self._position)
        self._position += 1
        return data

    @property
    def position(self) -> int:
        """Position of the next example within the current epoch."""
        return self._position

    @property
    def size(self) -> int:
        """Number of examples in one epoch."""
        return self._size

    @property
    def shuffle(self) -> bool:
        """Whether each epoch reads the examples in a new random order."""
        return self._shuffle

    @shuffle.setter
    def shuffle(self, value: bool) -> None:
        self._shuffle = value

    def reset(self) -> None:
        """Start a new epoch; subclasses reorder here and then call this."""
        self._position = 0

    def apply_order(self) -> None:
        """Called by the iterator after a batch in which an epoch ended: the moment
        for sources with per-epoch orders to move to the next one."""


class SimpleDataSource(DataSource):
    """Examples from ``load_func(index)``; with shuffle, each epoch has its own
    permutation, kept so that slices of the source read one shared order."""

    def __init__(self, load_func: Callable[[int], Sequence[Any]], num_examples: int,
                 shuffle: bool = False, rng: np.random.RandomState | None = None):
        super().__init__(shuffle=shuffle, rng=rng)
        if not callable(load_func):
            raise DpnbError(f"load_func must be a function of an example index, got "
                            f"{type(load_func).__name__}")
        if isinstance(num_examples, bool) or not isinstance(num_examples, (int, np.integer)) \
                or num_examples <= 0:
            raise DpnbError(f"num_examples must be a positive int, got {num_examples!r}")
        self._load_func = load_func
        self._size = int(num_examples)
        first = load_func(0)
        try:
            count = len(first)
        except TypeError:
            raise DpnbError(f"load_func(0) must return a tuple of arrays, got "
                            f"{type(first).__name__}; return e.g. (image, label)") from None
        self._variables = [f"x{i}" for i in range(count)]
        self._generation = 0
        self._orders: deque[tuple[int, np.ndarray]] = deque(maxlen=MAX_PENDING_GENERATIONS)
        self._orders_lock = threading.Lock()
        self.reset()
        self._generate_order(0)

    def _get_data(self, position: int) -> tuple:
        return self._get_data_of_generation(position, self._generation)

    def _get_data_of_generation(self, position: int, generation: int) -> tuple:
        with self._orders_lock:
            order = next((o for g, o in self._orders if g == generation), None)
        if order is None:
            raise DpnbError(f"the order of epoch {generation} is gone (orders kept: "
                            f"{[g for g, _ in self._orders]}); slices of one SimpleDataSource "
                            f"must stay within {MAX_PENDING_GENERATIONS} epochs of each other")
        return self._load_func(int(order[position]))

    def apply_order(self) -> None:
        self._generation += 1
        self._generate_order(self._generation)

    def _generate_order(self, generation: int) -> None:
        with self._orders_lock:
            if any(g == generation for g, _ in self._orders):
                return
            order = self._rng.permutation(self._size) if self._shuffle else np.arange(self._size)
            self._orders.append((generation, order))


class DataSourceWithMemoryCache(DataSource):
    """Keeps every example of ``data_source`` in memory after the first epoch, where
    the data set is under ``buffer_max_size`` bytes (default: the
    ``data_source_buffer_max_size`` of ``nnabla_config``, 1 GiB); it then shuffles
    the cache."""

    def __init__(self, data_source: DataSource, shuffle: bool = False,
                 rng: np.random.RandomState | None = None, *,
                 buffer_max_size: int | None = None):
        super().__init__(shuffle=shuffle, rng=rng)
        self._data_source = data_source
        self._size = data_source.size
        self._variables = data_source.variables
        self._order = list(range(self._size))
        self._cache: list[tuple] = []
        self._generation = -1
        sample_bytes = sum(np.asarray(d, dtype=np.float32 if isinstance(d, list) else None).nbytes
                           for d in data_source._get_data(0))
        if buffer_max_size is None:
            buffer_max_size = _positive_setting("data_source_buffer_max_size")
        self._on_memory = sample_bytes * self._size < buffer_max_size
        logger.debug("memory cache of %d examples of %d bytes: %s", self._size, sample_bytes,
                     "in memory" if self._on_memory else "passing through")

    @property
    def data_source(self) -> DataSource:
        """The wrapped source."""
        return self._data_source

    @property
    def on_memory(self) -> bool:
        """Whether the examples are kept in memory (else every read goes to the source)."""
        return self._on_memory

    def _get_data(self, position: int) -> tuple:
        if self._on_memory:
            index = self._order[position]
            if index < len(self._cache):
                data = self._cache[index]
            else:
                data = self._data_source._get_data(position)
                self._cache.append(data)
        else:
            data = self._data_source._get_data(position)
        self._position = position
        return data

    def reset(self) -> None:
        if self._on_memory:
            self._generation += 1
            if self._shuffle and self._generation > 0:
                self._order = list(self._rng.permutation(self._size))
            else:
                self._order = list(range(self._size))
            if self._position == 0:
                self._generation = -1
            else:
                self._data_source._position = self._position
                self._data_source.reset()
        else:
            self._data_source.reset()
        super().reset()

    def close(self) -> None:
        if not self._closed:
            self._data_source.close()
        super().close()


class DataSourceWithFileCache(DataSource):
    """Writes every example of ``data_source`` to cache files (``cache_files``, in
    the ``cache_file_format`` of ``nnabla_config``, .npy or .h5) and reads them
    back; without ``cache_dir`` the files live in a temporary directory (under the
    ``data_source_file_cache_location`` of ``nnabla_config`` where set) removed
    on close.  Each file holds ``data_source_file_cache_size``
    examples (100); shuffling permutes the files, then the examples inside each."""

    def __init__(self, data_source: DataSource, cache_dir: str | os.PathLike | None = None,
                 cache_file_name_prefix: str = "cache", shuffle: bool = False,
                 rng: np.random.RandomState | None = None):
        super().__init__(shuffle=shuffle, rng=rng)
        self._data_source = data_source
        self._size = data_source.size
        self._variables = data_source.variables
        self._prefix = cache_file_name_prefix
        self._lock = threading.Lock()
        self._cache_size = _positive_setting("data_source_file_cache_size")
        self._format = cache_files.check_format(_setting("cache_file_format"))
        if cache_dir is None:
            self._cache_dir = tempfile.mkdtemp(
                prefix="dpnb_cache_", dir=_setting("data_source_file_cache_location") or None)
            self._remove_dir = weakref.finalize(self, shutil.rmtree, self._cache_dir, True)
        else:
            self._cache_dir = os.fspath(cache_dir)
            os.makedirs(self._cache_dir, exist_ok=True)
            self._remove_dir = None
        self._files: list[str] = []
        self._file_order: list[int] = []
        self._row_orders: list[list[int]] = []
        self._current_file = -1
        self._current_arrays: dict[str, np.ndarray] = {}
        self._generation = -1
        try:
            self._write_cache()
        except BaseException:
            self.close()
            raise
        self._make_schedule()

    @property
    def data_source(self) -> DataSource:
        """The wrapped source."""
        return self._data_source

    @property
    def cache_dir(self) -> str:
        """The directory holding the cache files."""
        return self._cache_dir

    def _write_cache(self) -> None:
        logger.info("writing a file cache of %d examples to %s", self._size, self._cache_dir)
        for start in range(0, self._size, self._cache_size):
            stop = min(start + self._cache_size, self._size)
            examples = [self._data_source._get_data(p) for p in range(start, stop)]
            path = os.path.join(self._cache_dir,
                                cache_files.file_name(self._prefix, start, stop - 1, self._format))
            cache_files.save(path, self._variables, examples, self._format)
            self._files.append(path)
            self._file_order.append(len(self._file_order))
            self._row_orders.append(list(range(stop - start)))
        cache_files.write_tables(self._cache_dir,
                                 [(p, len(r)) for p, r in zip(self._files, self._row_orders)],
                                 self._variables, self._format)
        source = self._data_source
        cache_files.write_provenance(self._cache_dir, source._original_source_uri,
                                     source._original_order, source.order)

    def _make_schedule(self) -> None:
        """Position -> (file, row) for the current file and row orders."""
        self._schedule = [(f, r) for f in self._file_order for r in self._row_orders[f]]
        self._order = [f * self._cache_size + r for f, r in self._schedule]

    def _get_data(self, position: int) -> tuple:
        with self._lock:
            self._position = position
            file, row = self._schedule[position]
            if file != self._current_file:
                self._current_arrays = cache_files.load(self._files[file], self._variables,
                                                        self._format)
                self._current_file = file
            return tuple(self._current_arrays[v][row] for v in self._variables)

    def reset(self) -> None:
        with self._lock:
            if self._shuffle:
                self._file_order = list(self._rng.permutation(self._file_order))
                for i, rows in enumerate(self._row_orders):
                    self._row_orders[i] = list(self._rng.permutation(rows))
            self._make_schedule()
            self._data_source.reset()
            self._position = 0
            self._generation += 1

    def close(self) -> None:
        if not self._closed:
            if self._remove_dir is not None:
                self._remove_dir()
            self._data_source.close()
        super().close()


class SlicedDataSource(DataSource):
    """Positions ``slice_start`` to ``slice_end`` of ``data_source``, read in the
    order the whole source has in each epoch: how a rank reads its shard."""

    def __init__(self, data_source: DataSource, shuffle: bool = False,
                 rng: np.random.RandomState | None = None, slice_start: int | None = None,
                 slice_end: int | None = None):
        super().__init__(shuffle=shuffle, rng=rng)
        if slice_start is None or slice_end is None or not 0 <= slice_start < slice_end \
                or slice_end > data_source.size:
            raise DpnbError(f"a slice needs 0 <= slice_start < slice_end <= {data_source.size} "
                            f"(the source's size), got slice_start={slice_start!r}, "
                            f"slice_end={slice_end!r}")
        self._data_source = data_source
        self._variables = data_source.variables[:]
        self._slice_start = int(slice_start)
        self._slice_end = int(slice_end)
        self._size = self._slice_end - self._slice_start
        self._generation = 0

    @property
    def data_source(self) -> DataSource:
        """The whole source this slice reads from."""
        return self._data_source

    def apply_order(self) -> None:
        self._generation += 1
        self._data_source._generate_order(self._generation)

    def reset(self) -> None:
        self._data_source.reset()
        self._data_source._position = self._slice_start
        self._position = 0

    def _get_data(self, position: int) -> tuple:
        self._position = position
        return self._data_source._get_data_of_generation(self._slice_start + position,
                                                         self._generation)
