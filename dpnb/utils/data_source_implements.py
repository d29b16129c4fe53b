"""nnabla's ``data_source_implements``: the data sources of data sets on disk.
``CsvDataSource`` reads a data set CSV (one example a row, numbers or files named
relative to the CSV), ``CacheDataSource`` a cache directory of .npy or .h5 files,
``ConcatDataSource`` joins sources; ``SimpleDataSource`` is the one of
``dpnb.utils.data_source``."""
from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import DpnbError
from . import cache_files
from .data_source import DataSource, SimpleDataSource
from .data_source_loader import FileReader, load

__all__ = ["SimpleDataSource", "CsvDataSource", "CacheDataSource", "ConcatDataSource"]


class CsvDataSource(DataSource):
    """The examples of a data set CSV file.

    The header names the variables, ``NAME[__INDEX][:LABEL]`` (columns starting
    with ``#`` are comments): a column ``x`` gives variable ``x``, columns
    ``y__0``, ``y__1`` ... give the vector ``y``.  A cell holds a number or the
    path, relative to the CSV, of a file loaded by its extension (images scaled
    to [0, 1] with ``normalize``)."""

    def __init__(self, filename: str | os.PathLike, shuffle: bool = False,
                 rng: np.random.RandomState | None = None, normalize: bool = False):
        super().__init__(shuffle=shuffle, rng=rng)
        self._filename = os.fspath(filename)
        self._normalize = normalize
        self._filereader = FileReader(self._filename)
        with self._filereader.open(textmode=True, encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise DpnbError(f"the data set CSV {self._filename!r} is empty; its first row "
                                "must name the variables, e.g. 'x:image,y:label'")
            rows = [row for row in reader if row]
        self._width = len(header)
        self._kept = [i for i, title in enumerate(header) if not title.startswith("#")]
        self._columns = [self._parse_column(header[i]) for i in self._kept]
        self._rows = rows
        self._variables = tuple(dict.fromkeys(name for name, _, _ in self._columns))
        self._size = len(self._rows)
        self._original_source_uri = self._filename
        self._original_order = list(range(self._size))
        self._order = list(range(self._size))
        self._generation = -1
        self.reset()

    @staticmethod
    def _parse_column(title: str) -> tuple[str, str | None, str | None]:
        """(variable, index, label) of a header cell ``NAME[__INDEX][:LABEL]``."""
        name, _, label = title.partition(":")
        variable, _, index = name.partition("__")
        return variable, (index if "__" in name else None), (label if ":" in title else None)

    def _value(self, cell: str) -> Any:
        try:
            return float(cell)
        except ValueError:
            pass
        loader = load(os.path.splitext(cell)[1].lower())
        with self._filereader.open(cell) as f:
            return loader(f, normalize=self._normalize)

    def _get_data(self, position: int) -> tuple:
        row_index = self._order[position]
        row = self._rows[row_index]
        if len(row) != self._width:
            raise DpnbError(f"a row of {self._filename!r} has {len(row)} cells, but the header "
                            f"has {self._width} columns: {row!r:.200}; fix the CSV")
        values: dict[str, Any] = {}
        for (variable, index, _), i in zip(self._columns, self._kept):
            value = self._value(row[i])
            if index is None:
                values[variable] = [value] if isinstance(value, float) else value
            else:
                values.setdefault(variable, []).append(value)
        return tuple(values.values())

    def reset(self) -> None:
        if self._shuffle:
            self._order = list(self._rng.permutation(self._size))
        self._generation += 1
        super().reset()


class ConcatDataSource(DataSource):
    """The examples of several sources one after the other (shuffled together
    with ``shuffle``); the variables are those of the first."""

    def __init__(self, data_source_list: Sequence[DataSource], shuffle: bool = True,
                 rng: np.random.RandomState | None = None):
        super().__init__(shuffle=shuffle, rng=rng)
        if not data_source_list or not all(isinstance(s, DataSource) for s in data_source_list):
            raise DpnbError(f"data_source_list must be a non-empty list of DataSource, got "
                            f"{[type(s).__name__ for s in data_source_list or []]}")
        self._data_sources = list(data_source_list)
        self._sw_points = list(np.cumsum([s.size for s in self._data_sources]))
        self._size = int(self._sw_points[-1])
        self._variables = self._data_sources[0].variables
        self.reset()

    def _get_data(self, position: int) -> tuple:
        index = int(self._indexes[position])
        which = int(np.searchsorted(self._sw_points, index, side="right"))
        start = int(self._sw_points[which - 1]) if which else 0
        return self._data_sources[which]._get_data(index - start)

    def reset(self) -> None:
        self._indexes = (self._rng.permutation(self._size) if self._shuffle
                         else np.arange(self._size))
        super().reset()

    def close(self) -> None:
        if not self._closed:
            for source in self._data_sources:
                source.close()
        super().close()


class CacheDataSource(DataSource):
    """The examples of a cache directory (``cache_files``): the .npy files listed
    in ``cache_index.csv`` with the variables in ``cache_info.csv``, as the file
    cache and ``create_cache`` write them, or else .h5 files (those of
    ``cache_index.csv``, or every one of the directory).  Shuffling permutes the
    files, then the examples inside each; ``normalize`` scales uint8 and uint16
    arrays to [0, 1]."""

    def __init__(self, cachedir: str | os.PathLike, shuffle: bool = False,
                 rng: np.random.RandomState | None = None, normalize: bool = False):
        super().__init__(shuffle=shuffle, rng=rng)
        self._cachedir = os.fspath(cachedir)
        self._normalize = normalize
        self._current_filename: str | None = None
        self._current_data: dict[str, np.ndarray] = {}
        self._generation = -1
        has_index = os.path.exists(os.path.join(self._cachedir, cache_files.INDEX))
        if os.path.exists(os.path.join(self._cachedir, cache_files.INFO)) and has_index:
            self._cache_type = ".npy"
            self._variables = cache_files.read_info(self._cachedir)
            self._cache_files = cache_files.read_index(self._cachedir)
        else:
            self._cache_type = ".h5"
            paths = ([p for p, _ in cache_files.read_index(self._cachedir)] if has_index else
                     [os.path.join(self._cachedir, n) for n in sorted(os.listdir(self._cachedir))
                      if os.path.splitext(n)[1].lower() == ".h5"])
            self._variables = None
            self._cache_files = [self._h5_entry(p) for p in paths]
        if not self._cache_files:
            raise DpnbError(f"{self._cachedir!r} holds no cache: expected {cache_files.INFO} and "
                            f"{cache_files.INDEX} with .npy files, or .h5 files; make one with "
                            "nnabla.utils.create_cache or a data iterator's file cache")
        self._original_order = [(name, j) for name, length in self._cache_files
                                for j in range(length)]
        self.reset()

    def _h5_entry(self, path: str) -> tuple[str, int]:
        """(path, examples) of an .h5 cache file, whose datasets are the variables."""
        names, length = cache_files.h5_variables_and_length(path)
        if self._variables is None:
            self._variables = names
        elif set(names) != set(self._variables):
            raise DpnbError(f"cache file {path!r} holds the variables {names}, the first file "
                            f"{self._variables}; every file of a cache holds the same variables")
        return path, length

    def _get_data(self, position: int) -> tuple:
        self._position = position
        filename, row = self._order[position]
        if filename != self._current_filename:
            self._current_data = cache_files.load(filename, self._variables, self._cache_type)
            self._current_filename = filename
        data = []
        for v in self._variables:
            d = self._current_data[v][row]
            if self._normalize and d.dtype == np.uint8:
                d = d.astype(np.float32) * (1.0 / 255.0)
            elif self._normalize and d.dtype == np.uint16:
                d = d.astype(np.float32) * (1.0 / 65535.0)
            data.append(d)
        return tuple(data)

    def reset(self) -> None:
        if self._shuffle:
            self._order = [(self._cache_files[i][0], int(j))
                           for i in self._rng.permutation(len(self._cache_files))
                           for j in self._rng.permutation(self._cache_files[i][1])]
        else:
            self._order = list(self._original_order)
        self._current_filename = None
        self._current_data = {}
        self._size = len(self._order)
        self._generation += 1
        super().reset()
