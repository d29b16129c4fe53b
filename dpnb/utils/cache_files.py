"""nnabla's data cache files, shared by the file cache of a data iterator,
``create_cache`` and ``CacheDataSource``: ``<prefix>_<first>_<last>.npy`` (one
array a variable, saved one after the other) or ``.h5`` (one dataset a
variable), listed in ``cache_index.csv`` (file, examples), with the variables of
.npy caches in ``cache_info.csv``, and, for a cache of a data set CSV, that CSV
(``original.csv``) and its rows' order in the cache (``order.csv``)."""
from __future__ import annotations

import csv
import os
from collections.abc import Sequence

import h5py
import numpy as np

from ..errors import DpnbError
from .data_source_loader import FileReader

FORMATS = (".npy", ".h5")
"""The cache file formats (nnabla.conf's ``cache_file_format``)."""
INDEX = "cache_index.csv"
INFO = "cache_info.csv"


def check_format(fmt: str) -> str:
    """``fmt`` where it is a cache file format, else a clear error."""
    if fmt not in FORMATS:
        raise DpnbError(f"the cache_file_format of nnabla.conf's [DATA_ITERATOR] section "
                        f"(nnabla_config) must be one of {list(FORMATS)}, got {fmt!r}")
    return fmt


def file_name(prefix: str, first: int, last: int, fmt: str) -> str:
    """nnabla's name of the cache file of examples ``first`` to ``last``."""
    return f"{prefix}_{first:08d}_{last:08d}{fmt}"


def stack(name: str, values: Sequence) -> np.ndarray:
    """One variable of a file's examples as one array; values that are not arrays
    become float32, as in nnabla's caches."""
    try:
        arrays = [v if isinstance(v, np.ndarray) else np.array(v).astype(np.float32)
                  for v in values]
    except (TypeError, ValueError) as e:
        raise DpnbError(f"variable {name!r} has a value that is not numeric ({e}); a cache "
                        "stores numeric arrays only: return NumPy arrays") from e
    shapes = sorted({a.shape for a in arrays})
    if len(shapes) > 1:
        raise DpnbError(f"variable {name!r} has examples of different shapes {shapes}; a cache "
                        "needs one shape per variable: pad or resize the data")
    stacked = np.stack(arrays)
    if stacked.dtype == object:
        raise DpnbError(f"variable {name!r} holds Python objects; a cache stores numeric "
                        "arrays only: return NumPy arrays")
    return stacked


def save(path: str, variables: Sequence[str], examples: Sequence[Sequence], fmt: str) -> None:
    """Write ``examples`` (tuples, one value a variable) to the cache file ``path``."""
    arrays = [stack(name, [e[i] for e in examples]) for i, name in enumerate(variables)]
    if fmt == ".h5":
        with h5py.File(path, "w") as h5:
            for name, array in zip(variables, arrays):
                h5.create_dataset(name, data=array)
    else:
        with open(path, "wb") as f:
            for array in arrays:
                np.save(f, array, allow_pickle=False)


def load(path: str, variables: Sequence[str], fmt: str) -> dict[str, np.ndarray]:
    """The arrays of the cache file ``path``, by variable."""
    if not os.path.exists(path):
        raise DpnbError(f"cache file {path!r} is missing; the cache was removed or is "
                        "incomplete: make it again")
    if fmt == ".h5":
        with h5py.File(path, "r") as h5:
            missing = [v for v in variables if v not in h5]
            if missing:
                raise DpnbError(f"cache file {path!r} lacks the variables {missing}; it holds "
                                f"{list(h5.keys())}: make the cache again")
            return {v: h5[v][()] for v in variables}
    with open(path, "rb") as f:
        return {v: np.load(f, allow_pickle=False) for v in variables}


def write_tables(cache_dir: str, entries: Sequence[tuple[str, int]], variables: Sequence[str],
                 fmt: str) -> None:
    """Write ``cache_index.csv`` for ``entries`` (path, examples), and, for .npy
    caches, ``cache_info.csv`` naming the variables."""
    with open(os.path.join(cache_dir, INDEX), "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        for path, length in entries:
            writer.writerow((os.path.basename(path), length))
    if fmt == ".npy":
        with open(os.path.join(cache_dir, INFO), "w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            for name in variables:
                writer.writerow((name,))


def write_provenance(cache_dir: str, source_uri: str | None,
                     original_order: Sequence[int] | None, order: Sequence[int] | None) -> None:
    """Write ``original.csv`` (a copy of the data set CSV at ``source_uri``) and
    ``order.csv`` (original row, row in the cache), where they are known."""
    if source_uri is not None:
        with FileReader(source_uri).open() as f, \
                open(os.path.join(cache_dir, "original.csv"), "wb") as out:
            out.write(f.read())
    if original_order is not None and order is not None:
        with open(os.path.join(cache_dir, "order.csv"), "w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            for original, row in zip(original_order, order):
                writer.writerow((int(original), int(row)))


def read_index(cache_dir: str) -> list[tuple[str, int]]:
    """(path, examples) of the files ``cache_index.csv`` lists, paths joined to
    ``cache_dir``."""
    with open(os.path.join(cache_dir, INDEX), newline="", encoding="utf-8-sig") as f:
        try:
            return [(os.path.join(cache_dir, row[0]), int(row[1]))
                    for row in csv.reader(f) if row]
        except (IndexError, ValueError) as e:
            raise DpnbError(f"{os.path.join(cache_dir, INDEX)!r} must have rows 'file,examples' "
                            f"({e}); make the cache again") from e


def read_info(cache_dir: str) -> list[str]:
    """The variables ``cache_info.csv`` names."""
    with open(os.path.join(cache_dir, INFO), newline="", encoding="utf-8-sig") as f:
        return [row[0] for row in csv.reader(f) if row]


def h5_variables_and_length(path: str) -> tuple[list[str], int]:
    """The variables of an .h5 cache file and its number of examples."""
    with h5py.File(path, "r") as h5:
        names = list(h5.keys())
        lengths = {len(h5[name]) for name in names}
    if len(lengths) != 1:
        raise DpnbError(f"cache file {path!r} has variables {names} of lengths "
                        f"{sorted(lengths)}; a cache file holds one length: make it again")
    return names, lengths.pop()
