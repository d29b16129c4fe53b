"""nnabla's ``create_cache``: ``CreateCache`` turns a data set CSV into a cache
directory (``cache_files``) that ``CacheDataSource`` and ``data_iterator_cache``
read, with nnabla's ``original.csv`` (the CSV) and ``order.csv`` (original row,
row in the cache) beside it."""
from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..config import nnabla_config
from ..errors import DpnbError
from . import cache_files
from .data_source_implements import CsvDataSource

__all__ = ["CreateCache"]

logger = logging.getLogger(__name__)


def _setting(name: str) -> str:
    return nnabla_config.get("DATA_ITERATOR", name)


class CreateCache(CsvDataSource):
    """A data set CSV on the local disk, to be written as a cache by ``create``:
    in the CSV's order, or shuffled once with ``rng`` (seed 313 by default), in
    files of the ``data_source_file_cache_size`` of ``nnabla_config`` built by
    ``num_of_threads`` threads (default: its ``data_source_file_cache_num_of_threads``)."""

    def __init__(self, input_csv_filename: str | os.PathLike,
                 rng: np.random.RandomState | None = None, shuffle: bool = False,
                 num_of_threads: int | None = None):
        if "://" in os.fspath(input_csv_filename):
            raise DpnbError(f"CreateCache reads a CSV on the local disk, got "
                            f"{os.fspath(input_csv_filename)!r}; for a remote data set use "
                            "data_iterator_csv_dataset(uri, ..., cache_dir=DIR), which caches it")
        super().__init__(input_csv_filename, shuffle=shuffle, rng=rng)
        if num_of_threads is not None and (isinstance(num_of_threads, bool) or
                                           not isinstance(num_of_threads, (int, np.integer))
                                           or num_of_threads < 0):
            raise DpnbError(f"num_of_threads must be an int >= 0 or None (0 and None take "
                            f"nnabla.conf's setting), got {num_of_threads!r}")
        self._num_of_threads = int(num_of_threads or
                                   _setting("data_source_file_cache_num_of_threads"))

    def create(self, output_cache_dirname: str | os.PathLike, normalize: bool = True,
               cache_file_name_prefix: str = "cache") -> None:
        """Write the cache to ``output_cache_dirname`` (images scaled to [0, 1] with
        ``normalize``), in the ``cache_file_format`` of ``nnabla_config``."""
        directory = os.fspath(output_cache_dirname)
        os.makedirs(directory, exist_ok=True)
        self._normalize = normalize
        fmt = cache_files.check_format(_setting("cache_file_format"))
        size = int(_setting("data_source_file_cache_size"))
        if size <= 0:
            raise DpnbError(f"the data_source_file_cache_size of nnabla.conf's [DATA_ITERATOR] "
                            f"section (nnabla_config) must be positive, got {size}")
        chunks = [range(start, min(start + size, self._size))
                  for start in range(0, self._size, size)]

        def write(chunk: range) -> tuple[str, int]:
            path = os.path.join(directory, cache_files.file_name(
                cache_file_name_prefix, chunk.start, chunk.stop - 1, fmt))
            cache_files.save(path, self._variables, [self._get_data(p) for p in chunk], fmt)
            logger.info("created cache file %s", path)
            return path, len(chunk)

        with ThreadPoolExecutor(max_workers=self._num_of_threads) as pool:
            entries = list(pool.map(write, chunks))
        cache_files.write_tables(directory, entries, self._variables, fmt)
        cache_files.write_provenance(directory, self._filename, self._original_order, self._order)
