"""nnabla's data sources, data iterators and download helper: batches, epochs and
slices of the cases in tests/nnabla_cases/data.py compared with what nnabla 1.39 yields
(tests/fixtures/nnabla/data.json, written by record_data.py), caches on disk, and downloads
without a network."""
import functools
import http.server
import json
import os
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from nnabla_cases import data

from dpnb.errors import DpnbError
from dpnb.utils import data_iterator as it
from dpnb.utils import data_source as sources
from dpnb.utils import data_source_loader as loader
from dpnb.utils.data_iterator import DataIterator, data_iterator, data_iterator_simple
from dpnb.utils.data_source import (DataSource, DataSourceWithFileCache, DataSourceWithMemoryCache,
                                    SimpleDataSource)
from dpnb.utils.data_source_loader import download, get_data_home

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "nnabla" / "data.json").read_text())
R = np.random.RandomState
Cifar = data.cifar_like_source(DataSource)
load = data.load


def assert_recorded(got, fixture=FIXTURE):
    """Every case in ``got`` equals nnabla's recording under the same name."""
    for name, value in got.items():
        assert value == fixture[name], name


def counting_load(calls):
    """``load`` that also appends each index it reads to ``calls``."""
    def counted(i):
        calls.append(i)
        return load(i)
    return counted


# --- iterators against nnabla -------------------------------------------------------------

@pytest.mark.parametrize("use_thread", [False, True])
def test_simple_iterators_match_nnabla(use_thread):
    assert_recorded(data.simple_cases(it, use_thread))


@pytest.mark.parametrize("use_thread", [False, True])
def test_cifar_like_data_source_matches_nnabla(use_thread):
    assert_recorded(data.cifar_cases(it, Cifar, use_thread))


def test_threaded_iterator_matches_nnabla_threaded():
    assert data.cifar_threaded(it, Cifar) == FIXTURE["cifar_threaded"]


def test_file_caches_match_nnabla(tmp_path):
    assert_recorded(data.file_cache_cases(it, Cifar, True, tmp_path))


def test_memory_cache_over_its_limit_passes_reads_through():
    source = DataSourceWithMemoryCache(Cifar(10, shuffle=True), shuffle=True, buffer_max_size=1)
    assert not source.on_memory
    assert data.run(DataIterator(source, 4), 12) == FIXTURE["cifar_nocache"]


def test_memory_cache_keeps_examples_after_the_first_epoch():
    calls = []
    counted = counting_load(calls)
    di = data_iterator_simple(counted, 6, 3, with_memory_cache=True, use_thread=False)
    first = len(calls)
    for _ in range(8):
        di.next()
    assert len(calls) - first == 6


# --- slices --------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [0, 1])
def test_slices_match_nnabla(k, tmp_path):
    assert_recorded(data.slice_cases(it, Cifar, k, True, tmp_path), FIXTURE["slices"])


def test_two_slices_of_one_source_are_disjoint_shards():
    di = data_iterator_simple(load, 8, 2, shuffle=True, rng=R(3))
    shards = [di.slice(None, num_of_slices=2, slice_pos=k) for k in (0, 1)]
    for _ in range(3):
        seen = [s.next()[0][:, 0] for s in shards] + [s.next()[0][:, 0] for s in shards]
        assert sorted(np.concatenate(seen).tolist()) == list(range(8))


@pytest.mark.parametrize("n,parts", [(7, 3), (10, 3), (5, 4)])
def test_slice_ranges_match_nnabla(n, parts):
    got = data.slice_range_cases(it, n, parts, True)
    assert len(got) == parts
    assert_recorded(got, FIXTURE["slices"])


def test_slice_by_start_and_end_matches_nnabla():
    assert data.slice_start_end(it, True) == FIXTURE["slices"]["start_end"]


def test_slice_writes_its_cache_beside_the_parent_file_cache(tmp_path):
    got = data.slice_of_file_cache(it, True, tmp_path)
    assert got == FIXTURE["slices"]["parent_file_cache"]


@pytest.mark.parametrize("kwargs", [{}, {"num_of_slices": 2}, {"slice_start": 1},
                                    {"num_of_slices": 2, "slice_pos": 1, "slice_start": 0},
                                    {"num_of_slices": 2, "slice_pos": 2},
                                    {"num_of_slices": 0, "slice_pos": 0},
                                    {"slice_start": 3, "slice_end": 3},
                                    {"slice_start": 0, "slice_end": 8},
                                    {"num_of_slices": 8, "slice_pos": 0, "drop_last": True}])
def test_slice_rejects_bad_arguments(kwargs):
    di = data_iterator_simple(load, 7, 2)
    with pytest.raises(DpnbError, match="slice"):
        di.slice(None, **kwargs)


# --- stop_exhausted and callbacks ----------------------------------------------------------

@pytest.mark.parametrize("use_thread", [False, True])
def test_stop_exhausted_matches_nnabla(use_thread):
    assert_recorded(data.stop_cases(it, Cifar, use_thread))


def test_stop_exhausted_ends_a_for_loop():
    di = data_iterator_simple(load, 7, 3, shuffle=True, rng=R(4), stop_exhausted=True)
    assert [[b.tolist() for b in batch] for batch in di] == FIXTURE["stop_simple"]["batches"]
    assert di.epoch == 0


@pytest.mark.parametrize("use_thread", [False, True])
def test_epoch_callbacks_match_nnabla(use_thread):
    assert data.callback_calls(it, use_thread) == FIXTURE["callbacks"]


# --- signatures ----------------------------------------------------------------------------

def test_signatures_match_nnabla():
    assert data.signatures(it, sources, loader) == FIXTURE["signatures"]


# --- data sources and caches ---------------------------------------------------------------

def test_data_source_protocol():
    with Cifar(5) as ds:
        assert (ds.size, tuple(ds.variables), ds.position, ds.shuffle) == (5, ("x", "y"), 0, False)
        x, y = ds.next()
        assert x.tolist() == [0, 1] and y.tolist() == [0] and ds.position == 1
        x, _ = next(ds)
        assert x.tolist() == [2, 3] and ds.position == 2
        ds.shuffle = True
        ds.reset()
        assert ds.shuffle and ds.position == 0
        assert sorted(ds.next()[0][0] // 2 for _ in range(5)) == [0, 1, 2, 3, 4]
        assert ds.order is None


def test_data_source_without_get_data_says_what_to_implement():
    class Empty(DataSource):
        def __init__(self):
            super().__init__()
            self._size, self._variables = 3, ("x",)

    with pytest.raises(DpnbError, match="_get_data"):
        Empty().next()


def test_simple_data_source_orders():
    ds = SimpleDataSource(lambda i: (np.array(i),), 5, shuffle=True, rng=R(0))
    assert ds.variables == ["x0"]
    first = [int(ds.next()[0]) for _ in range(5)]
    assert first == R(0).permutation(5).tolist()


def test_file_cache_in_a_temporary_directory_is_removed_on_close():
    source = DataSourceWithFileCache(SimpleDataSource(load, 130))
    di = DataIterator(source, 10)
    cache = source.cache_dir
    assert sorted(os.listdir(cache)) == ["cache_00000000_00000099.npy",
                                          "cache_00000100_00000129.npy",
                                          "cache_index.csv", "cache_info.csv"]
    assert di.next()[0][:, 0].tolist() == list(range(10))
    with di:
        pass
    assert not os.path.exists(cache)


def test_file_cache_in_cache_dir_is_kept(tmp_path):
    with data_iterator_simple(load, 5, 2, with_file_cache=True, cache_dir=tmp_path / "c") as di:
        di.next()
    assert len(os.listdir(tmp_path / "c")) == 3


def test_file_cache_reads_from_disk_not_from_the_source(tmp_path):
    calls = []
    counted = counting_load(calls)
    di = data_iterator_simple(counted, 5, 2, with_file_cache=True, cache_dir=tmp_path)
    before = len(calls)
    batches = [di.next()[0][:, 0].tolist() for _ in range(5)]
    assert len(calls) == before and batches == [[0, 1], [2, 3], [4, 0], [1, 2], [3, 4]]


def test_a_removed_cache_file_is_reported(tmp_path):
    di = DataIterator(DataSourceWithFileCache(SimpleDataSource(load, 3), cache_dir=tmp_path), 1,
                      use_thread=False)
    os.unlink(tmp_path / "cache_00000000_00000002.npy")
    with pytest.raises(DpnbError, match="missing"):
        di.next()


def test_file_cache_rejects_examples_of_different_shapes(tmp_path):
    with pytest.raises(DpnbError, match="different shapes"):
        DataSourceWithFileCache(SimpleDataSource(lambda i: (np.zeros(i + 1),), 3),
                                cache_dir=tmp_path)


# --- iterator errors and threads -----------------------------------------------------------

def test_iterator_rejects_bad_input():
    with pytest.raises(DpnbError, match="batch_size"):
        data_iterator_simple(load, 5, 0)
    with pytest.raises(DpnbError, match="DataSource"):
        data_iterator([1, 2, 3], 2)
    with pytest.raises(DpnbError, match="num_examples"):
        data_iterator_simple(load, 0, 2)

    class NoSize(DataSource):
        def __init__(self):
            super().__init__()
            self._variables = ("x",)

    with pytest.raises(DpnbError, match="_size"):
        DataIterator(NoSize(), 2)


def test_short_examples_are_reported():
    di = data_iterator_simple(lambda i: (np.zeros(2), np.zeros(1)) if i == 0 else (np.zeros(2),),
                              3, 2, use_thread=False)
    with pytest.raises(DpnbError, match="2 arrays"):
        di.next()


def test_an_error_in_the_background_reader_reaches_next():
    def failing(i):
        if i == 4:
            raise RuntimeError("disk gone")
        return load(i)

    di = data_iterator_simple(failing, 8, 2)
    di.next()
    di.next()
    with pytest.raises(RuntimeError, match="disk gone"):
        di.next()
    di.close()
    with pytest.raises(DpnbError, match="closed"):
        di.next()


def test_background_reader_runs_ahead_by_one_batch():
    reads = []
    di = data_iterator_simple(lambda i: reads.append(i) or load(i), 8, 2)
    start = len(reads)
    assert di.next()[0][:, 0].tolist() == [0, 1]
    deadline = time.monotonic() + 10
    while len(reads) < start + 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert reads[start:] == [0, 1, 2, 3]
    assert di.position == 2
    assert di.next()[0][:, 0].tolist() == [2, 3]
    di.close()


# --- downloads -----------------------------------------------------------------------------

@pytest.fixture
def data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path / "nnabla_data"


def test_data_home_is_nnabla_data_in_home(data_home):
    assert get_data_home() == str(data_home) and data_home.is_dir()


def test_existing_file_is_used_without_network(data_home):
    data_home.mkdir()
    (data_home / "archive.tar.gz").write_bytes(b"local bytes")
    with download("http://127.0.0.1:9/some/archive.tar.gz") as f:
        assert f.read() == b"local bytes"
    assert download("http://127.0.0.1:9/some/archive.tar.gz", open_file=False) is None


def test_offline_without_the_file_names_the_path(data_home):
    expected = os.path.join(str(data_home), "missing.bin")
    with pytest.raises(DpnbError) as info:
        download("http://127.0.0.1:9/missing.bin")
    assert repr(expected) in str(info.value) and "offline" in str(info.value)
    assert not os.path.exists(expected)
    with pytest.raises(DpnbError, match="names no file"):
        download("http://127.0.0.1:9/dir/")


@pytest.fixture
def http_server(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_download_from_a_server_writes_atomically(data_home, http_server):
    root, url = http_server
    payload = os.urandom(3 * (1 << 20) + 17)
    (root / "data.bin").write_bytes(payload)
    with download(f"{url}/data.bin") as f:
        assert f.read() == payload
    assert sorted(os.listdir(data_home)) == ["data.bin"]
    (root / "data.bin").write_bytes(b"new")
    with download(f"{url}/data.bin") as f:
        assert f.read() == payload
    with download(f"{url}/data.bin", allow_overwrite=True) as f:
        assert f.read() == b"new"
    target = Path(root.parent) / "out" / "x.bin"
    assert download(f"{url}/data.bin", output_file=target, open_file=False) is None
    assert target.read_bytes() == b"new"


def test_failed_download_keeps_the_previous_file(data_home, http_server):
    _, url = http_server
    data_home.mkdir()
    (data_home / "gone.bin").write_bytes(b"old")
    with pytest.raises(DpnbError, match="gone.bin"):
        download(f"{url}/gone.bin", allow_overwrite=True)
    assert (data_home / "gone.bin").read_bytes() == b"old"
    assert os.listdir(data_home) == ["gone.bin"]


def test_downloaded_archive_opens_with_tarfile_as_nnabla_examples_do(data_home, http_server):
    root, url = http_server
    member = root.parent / "batch.bin"
    member.write_bytes(b"\x01\x02\x03")
    with tarfile.open(root / "toy.tar.gz", "w:gz") as tar:
        tar.add(member, arcname="toy/batch.bin")
    with tarfile.open(fileobj=download(f"{url}/toy.tar.gz"), mode="r:gz") as tar:
        assert tar.extractfile("toy/batch.bin").read() == b"\x01\x02\x03"
    assert (data_home / "toy.tar.gz").is_file()
