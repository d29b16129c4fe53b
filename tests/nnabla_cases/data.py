"""Data-iterator cases run with nnabla (record_data.py records them into data.json) and with
dpnb (test_utils_data.py compares): each takes the library's data_iterator module."""
import csv
import inspect
import os

import numpy as np

R = np.random.RandomState


def load(i):
    """Example i: a float32 pair and an int64 label."""
    return np.array([i, 100 + i], dtype=np.float32), np.array(i % 3, dtype=np.int64)


def load_scalar_label(i):
    """Example i with a Python int as its label (a file cache stores it as float32)."""
    return np.array([i, -i], dtype=np.float32), i


def cifar_like_source(DataSource):
    """A subclass of the library's DataSource shaped as the CIFAR-10 example's
    Cifar10DataSource, over small arrays."""

    class CifarLikeDataSource(DataSource):
        """n examples: x is the pair [2i, 2i+1] (float32), y is [i % 4] (int32)."""

        def _get_data(self, position):
            return self._images[self._indexes[position]], self._labels[self._indexes[position]]

        def __init__(self, n, shuffle=False, rng=None):
            super().__init__(shuffle=shuffle, rng=rng)
            self._images = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
            self._labels = (np.arange(n) % 4).reshape(n, 1).astype(np.int32)
            self._size = n
            self._variables = ('x', 'y')
            if rng is None:
                rng = np.random.RandomState(313)
            self.rng = rng
            self.reset()

        def reset(self):
            if self._shuffle:
                self._indexes = self.rng.permutation(self._size)
            else:
                self._indexes = np.arange(self._size)
            super().reset()

    return CifarLikeDataSource


def run(di, steps, positions=True):
    """The first ``steps`` batches of ``di`` with epoch (and position) after each; every
    batch must be a tuple of arrays of ``batch_size`` rows."""
    out = {"size": di.size, "batch_size": di.batch_size, "variables": list(di.variables),
           "batches": [], "epochs": [], "positions": [], "dtypes": None}
    for _ in range(steps):
        batch = di.next()
        assert isinstance(batch, tuple) and all(isinstance(b, np.ndarray) for b in batch)
        assert all(len(b) == di.batch_size for b in batch)
        out["batches"].append([b.tolist() for b in batch])
        out["dtypes"] = [str(b.dtype) for b in batch]
        out["epochs"].append(di.epoch)
        if positions:
            out["positions"].append(di.position)
    return out


def run_until_stop(di, limit=50):
    """Batches until StopIteration, and whether a further next() stops again."""
    out = {"batches": [], "stopped_again": False}
    for _ in range(limit):
        try:
            batch = di.next()
        except StopIteration:
            break
        out["batches"].append([b.tolist() for b in batch])
    try:
        di.next()
    except StopIteration:
        out["stopped_again"] = True
    return out


def cache_listing(cache_dir):
    """File names in a file cache directory and the rows of its index and info files."""
    rows = {}
    for name in ("cache_index.csv", "cache_info.csv"):
        with open(os.path.join(cache_dir, name)) as f:
            rows[name] = list(csv.reader(f))
    return {"files": sorted(os.listdir(cache_dir)), **rows}


def _subdir(parent, name):
    path = os.path.join(parent, name)
    os.makedirs(path, exist_ok=True)
    return path


def signatures(it, sources, loader):
    """Names, defaults (tuples as lists) and whether required, of the positional parameters
    (``self`` left out) of the public callables of the library's data_iterator (``it``),
    data_source (``sources``) and data_source_loader (``loader``) modules."""
    callables = {"DataSource": sources.DataSource.__init__,
                 "DataIterator": it.DataIterator.__init__, "DataIterator.slice": it.DataIterator.slice,
                 "SlicedDataSource": sources.SlicedDataSource.__init__,
                 "data_iterator": it.data_iterator, "data_iterator_simple": it.data_iterator_simple,
                 "download": loader.download}
    out = {}
    for name, func in callables.items():
        out[name] = [[p.name, None if p.default is inspect.Parameter.empty else
                      (list(p.default) if isinstance(p.default, tuple) else p.default),
                      p.default is inspect.Parameter.empty]
                     for p in inspect.signature(func).parameters.values()
                     if p.name != "self" and p.kind is not inspect.Parameter.KEYWORD_ONLY]
    return out


def simple_cases(it, use_thread):
    """data_iterator_simple without a file cache: plain, shuffled, memory cache, a batch
    larger than the data set, and a Python-int label."""
    sim = it.data_iterator_simple
    return {
        "simple_plain": run(sim(load, 7, 3, use_thread=use_thread), 6),
        "simple_shuffle": run(sim(load, 7, 3, shuffle=True, rng=R(0), use_thread=use_thread), 10),
        "simple_shuffle_memcache": run(sim(load, 7, 3, shuffle=True, rng=R(0),
                                           use_thread=use_thread, with_memory_cache=True), 10),
        "simple_batch_larger_than_size": run(sim(load, 7, 15, shuffle=True, rng=R(6),
                                                 use_thread=use_thread), 4),
        "nocache_scalar_label": run(sim(load_scalar_label, 5, 2, use_thread=use_thread), 4),
    }


def cifar_cases(it, Cifar, use_thread):
    """data_iterator over a CIFAR-like source (``Cifar``, from cifar_like_source): with and
    without the memory cache, and with the iterator sharing the source's rng."""
    shared = R(3)
    return {
        "cifar_memcache": run(it.data_iterator(Cifar(10, shuffle=True, rng=R(1)), 4, rng=R(2),
                                               use_thread=use_thread), 12),
        "cifar_nocache": run(it.data_iterator(Cifar(10, shuffle=True), 4, with_memory_cache=False,
                                              use_thread=use_thread), 12),
        "cifar_memcache_shared_rng": run(it.data_iterator(Cifar(10, shuffle=True, rng=shared), 4,
                                                          rng=shared, use_thread=use_thread), 12),
    }


def cifar_threaded(it, Cifar):
    """The CIFAR-like memory-cache case with the default prefetch thread (positions racy)."""
    return run(it.data_iterator(Cifar(10, shuffle=True, rng=R(1)), 4, rng=R(2)), 12, False)


def file_cache_cases(it, Cifar, use_thread, tmp):
    """File caches (in sub-directories of the existing directory ``tmp``), alone and with
    the memory cache, and the first cache's files."""
    sim = it.data_iterator_simple
    d1, d2, d3, d4 = (_subdir(tmp, n) for n in "abcd")
    out = {"simple_shuffle_filecache": run(sim(load, 230, 64, shuffle=True, rng=R(1),
                                               use_thread=use_thread, with_file_cache=True,
                                               cache_dir=d1), 12)}
    out["simple_shuffle_filecache"]["cache"] = cache_listing(d1)
    out["simple_shuffle_file_and_memcache"] = run(sim(
        load, 230, 64, shuffle=True, rng=R(2), use_thread=use_thread, with_file_cache=True,
        with_memory_cache=True, cache_dir=d2), 12)
    out["filecache_scalar_label"] = run(sim(load_scalar_label, 5, 2, use_thread=use_thread,
                                            with_file_cache=True, cache_dir=d3), 4)
    out["cifar_file_and_memcache"] = run(it.data_iterator(
        Cifar(10, shuffle=True, rng=R(7)), 4, rng=R(8), use_thread=use_thread,
        with_file_cache=True, cache_dir=d4), 12)
    return out


def slice_cases(it, Cifar, k, use_thread, tmp):
    """Slice ``k`` of 2 of fresh parents (as every rank builds its own): shuffled, over a
    memory cache, drop_last, use_cache, and use_cache into ``tmp`` with its files.  The
    slices use the default prefetch thread, so positions are not recorded."""
    sim = it.data_iterator_simple
    out = {}
    di = sim(load, 7, 2, shuffle=True, rng=R(3), use_thread=use_thread)
    out[f"simple_{k}"] = run(di.slice(rng=None, num_of_slices=2, slice_pos=k), 8, False)
    di = it.data_iterator(Cifar(9, shuffle=True, rng=R(4)), 2, rng=R(5), use_thread=use_thread)
    out[f"cifar_memcache_{k}"] = run(di.slice(rng=None, num_of_slices=2, slice_pos=k), 8, False)
    di = sim(load, 7, 2, use_thread=use_thread)
    out[f"drop_last_{k}"] = run(di.slice(None, num_of_slices=2, slice_pos=k, drop_last=True),
                                4, False)
    di = sim(load, 11, 2, shuffle=True, rng=R(9), use_thread=use_thread)
    out[f"use_cache_{k}"] = run(di.slice(R(10), num_of_slices=2, slice_pos=k, use_cache=True),
                                8, False)
    di = sim(load, 11, 2, shuffle=True, rng=R(11), use_thread=use_thread)
    out[f"use_cache_dir_{k}"] = run(di.slice(R(12), num_of_slices=2, slice_pos=k, use_cache=True,
                                             cache_dir=tmp), 8, False)
    out[f"use_cache_dir_{k}"]["files"] = sorted(os.listdir(tmp))
    return out


def slice_range_cases(it, n, parts, use_thread):
    """Every slice of ``parts`` over n examples in batches of one, for one epoch each."""
    di = it.data_iterator_simple(load, n, 1, use_thread=use_thread)
    out = {}
    for k in range(parts):
        s = di.slice(None, num_of_slices=parts, slice_pos=k)
        out[f"range_{n}_{parts}_{k}"] = run(s, s.size, False)
    return out


def slice_start_end(it, use_thread):
    """A slice given by slice_start and slice_end of a shuffled parent."""
    di = it.data_iterator_simple(load, 9, 2, shuffle=True, rng=R(13), use_thread=use_thread)
    return run(di.slice(None, slice_start=2, slice_end=7), 6, False)


def slice_of_file_cache(it, use_thread, tmp):
    """A use_cache slice of a parent with a file cache in ``tmp``, and the files there."""
    di = it.data_iterator_simple(load, 6, 2, use_thread=use_thread, with_file_cache=True,
                                 cache_dir=tmp)
    out = run(di.slice(None, num_of_slices=2, slice_pos=1, use_cache=True), 4, False)
    out["files"] = sorted(os.listdir(tmp))
    return out


def stop_cases(it, Cifar, use_thread):
    """stop_exhausted iterators, simple and CIFAR-like, read until they stop."""
    return {
        "stop_simple": run_until_stop(it.data_iterator_simple(
            load, 7, 3, shuffle=True, rng=R(4), use_thread=use_thread, stop_exhausted=True)),
        "stop_cifar_exact": run_until_stop(it.data_iterator(
            Cifar(8, shuffle=True, rng=R(5)), 4, rng=R(6), use_thread=use_thread,
            stop_exhausted=True)),
    }


def callback_calls(it, use_thread):
    """The order of epoch-begin and epoch-end callbacks (given and registered) and batches."""
    calls = []
    di = it.data_iterator_simple(load, 7, 15, use_thread=use_thread,
                                 epoch_begin_callbacks=[lambda e: calls.append(["begin", e])],
                                 epoch_end_callbacks=[lambda e: calls.append(["end", e])])
    di.register_epoch_end_callback(lambda e: calls.append(["end2", e]))
    for step in range(4):
        di.next()
        calls.append(["batch", step, di.epoch])
    return calls
