"""Data set CSV cases run with nnabla (record_csv_data.py records them into
csv_data.json) and with dpnb (test_csv_data.py compares): CsvDataSource,
ConcatDataSource, CreateCache with CacheDataSource, the CSV data iterators and the
file loaders.  Each takes the library's modules; the data set is written with
NumPy, Pillow and the csv module."""
import csv
import io
import os

import numpy as np
from PIL import Image

R = np.random.RandomState


def _plain(value):
    """A value of an example as JSON: arrays as [dtype, shape, values]."""
    if isinstance(value, np.ndarray):
        return [value.dtype.name, list(value.shape), value.ravel().tolist()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def write_dataset(tmp, n=7, name="data.csv"):
    """A data set CSV of ``n`` rows under ``tmp``: a gray PNG ``x``, a comment
    column, a two-column vector ``v``, a CSV file ``c`` and a label ``y``;
    returns its path."""
    rng = R(10)
    os.makedirs(os.path.join(tmp, "files"), exist_ok=True)
    rows = []
    for i in range(n):
        image = f"files/img_{i}.png"
        Image.fromarray(rng.randint(0, 256, (4, 3)).astype(np.uint8)).save(
            os.path.join(tmp, image))
        table = f"files/tab_{i}.csv"
        with open(os.path.join(tmp, table), "w") as f:
            for row in rng.randint(-9, 10, (2, 3)):
                f.write(",".join(str(v) for v in row) + "\n")
        rows.append([image, f"note {i}", str(i * 0.5), str(-i), table, str(i % 3)])
    path = os.path.join(tmp, name)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["x:image", "#comment", "v__0", "v__1:second", "c", "y:label"])
        writer.writerows(rows)
    return path


def source_cases(implements, path):
    """Examples of CsvDataSource over one and a half epochs, plain and shuffled
    (default and given generators), normalized or not."""
    cases = {}
    for shuffle, seed in ((False, None), (True, None), (True, 5)):
        for normalize in (False, True):
            rng = None if seed is None else R(seed)
            source = implements.CsvDataSource(path, shuffle=shuffle, rng=rng,
                                              normalize=normalize)
            examples = []
            for step in range(source.size + source.size // 2):
                if step == source.size:
                    source.reset()
                examples.append(_plain(source.next()))
            cases[f"csv-{shuffle}-{seed}-{normalize}"] = {
                "variables": list(source.variables), "size": source.size,
                "examples": examples}
    return cases


def concat_cases(implements, paths):
    """Examples of a ConcatDataSource of two CSV sources, plain and shuffled."""
    cases = {}
    for shuffle in (False, True):
        parts = [implements.CsvDataSource(p, shuffle=shuffle) for p in paths]
        source = implements.ConcatDataSource(parts, shuffle=shuffle, rng=R(4))
        source.reset()
        cases[f"concat-{shuffle}"] = {
            "size": source.size, "variables": list(source.variables),
            "labels": [_plain(source.next()[-1]) for _ in range(source.size)]}
    return cases


def iterator_cases(it, path, tmp):
    """Batches of data_iterator_csv_dataset (with and without the caches) over
    two and a half epochs, without threads."""
    cases = {}
    for memory, file in ((False, False), (True, False), (False, True), (True, True)):
        for shuffle in (False, True):
            cache_dir = os.path.join(tmp, f"cache-{memory}-{file}-{shuffle}") if file else None
            if cache_dir:
                os.makedirs(cache_dir)
            with it.data_iterator_csv_dataset(path, 3, shuffle=shuffle, rng=R(8),
                                              use_thread=False, with_memory_cache=memory,
                                              with_file_cache=file, cache_dir=cache_dir) as di:
                batches = [_plain(list(di.next())) for _ in range(6)]
                cases[f"iterator-{memory}-{file}-{shuffle}"] = {
                    "variables": list(di.variables), "batches": batches, "epoch": di.epoch}
            if file:
                cases[f"iterator-{memory}-{file}-{shuffle}-files"] = sorted(os.listdir(cache_dir))
    return cases


def _read_csv(path):
    with open(path, newline="") as f:
        return [row for row in csv.reader(f)]


def create_cache_cases(create_cache, implements, config, path, tmp):
    """Cache directories CreateCache writes (.npy and .h5, plain and shuffled,
    3 examples a file), and the examples CacheDataSource reads back from them."""
    cases = {}
    saved = {k: config.get("DATA_ITERATOR", k)
             for k in ("cache_file_format", "data_source_file_cache_size")}
    config.set("DATA_ITERATOR", "data_source_file_cache_size", "3")
    try:
        for fmt in (".npy", ".h5"):
            config.set("DATA_ITERATOR", "cache_file_format", fmt)
            for shuffle in (False, True):
                out = os.path.join(tmp, f"cache{fmt}-{shuffle}")
                os.makedirs(out)
                cc = create_cache.CreateCache(path, rng=R(6), shuffle=shuffle, num_of_threads=2)
                cc.create(out, normalize=False)
                case = {"files": sorted(os.listdir(out)),
                        "index": _read_csv(os.path.join(out, "cache_index.csv")),
                        "order": _read_csv(os.path.join(out, "order.csv"))}
                for normalize, read_shuffle in ((False, False), (True, True)):
                    source = implements.CacheDataSource(out, shuffle=read_shuffle, rng=R(9),
                                                        normalize=normalize)
                    case[f"read-{normalize}-{read_shuffle}"] = {
                        "variables": sorted(source.variables), "size": source.size,
                        "examples": [dict(zip(source.variables, _plain(list(source.next()))))
                                     for _ in range(source.size)]}
                    source.close()
                cases[f"create-{fmt}-{shuffle}"] = case
    finally:
        for k, v in saved.items():
            config.set("DATA_ITERATOR", k, v)
    return cases


def loader_cases(loader, tmp):
    """load_image, load_csv and load_npy of files and file objects, and the
    extensions get_file_extension finds."""
    rng = R(12)
    rgb = os.path.join(tmp, "rgb.png")
    Image.fromarray(rng.randint(0, 256, (3, 4, 3)).astype(np.uint8)).save(rgb)
    gray = os.path.join(tmp, "gray.png")
    Image.fromarray(rng.randint(0, 256, (3, 3)).astype(np.uint8)).save(gray)
    table = os.path.join(tmp, "t.csv")
    with open(table, "w") as f:
        f.write("1,2.5\n\n-3,4\n")
    array = os.path.join(tmp, "a.npy")
    np.save(array, rng.rand(2, 3))
    cases = {}
    for normalize in (False, True):
        with open(rgb, "rb") as f:
            cases[f"rgb-{normalize}"] = _plain(loader.load_image(f, normalize=normalize))
        with open(gray, "rb") as f:
            cases[f"gray-{normalize}"] = _plain(loader.load_image(f, normalize=normalize))
        with open(gray, "rb") as f:
            cases[f"gray-shape-{normalize}"] = _plain(loader.load_image(f, shape=(1, 3, 3),
                                                                        normalize=normalize))
    with open(table, "rb") as f:
        cases["csv"] = _plain(loader.load(".csv")(f))
    with open(table, "rb") as f:
        cases["csv-shape"] = _plain(loader.load_csv(f, shape=(4,)))
    cases["npy"] = _plain(loader.load_npy(array, shape=(3, 2)))
    with open(rgb, "rb") as f:
        cases["ext-named"] = loader.get_file_extension(f)
        cases["ext-bytes"] = loader.get_file_extension(io.BytesIO(f.read()))
    cases["ext-path"] = loader.get_file_extension("A/B.JPEG")
    return cases
