"""Data set CSVs on dpnb against nnabla 1.39 (recorded in
tests/fixtures/nnabla/csv_data.json by record_csv_data.py): CsvDataSource,
ConcatDataSource, CreateCache and CacheDataSource, data_iterator_csv_dataset and
the file loaders; and the nnabla.conf settings the caches follow."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from dpnb.config import nnabla_config
from dpnb.errors import DpnbError
from dpnb.utils import create_cache
from dpnb.utils import data_iterator as it
from dpnb.utils import data_source_implements as implements
from dpnb.utils import data_source_loader as loader
from nnabla_cases import csv_data

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "nnabla" / "csv_data.json").read_text())


def assert_recorded(got):
    """Every case in ``got`` equals nnabla's recording under the same name, floats
    to float32 precision (nnabla and dpnb scale images in different steps)."""
    for name, value in got.items():
        np.testing.assert_equal(json.loads(json.dumps(value), parse_float=lambda v: round(
            float(v), 6)), json.loads(json.dumps(FIXTURE[name]), parse_float=lambda v: round(
                float(v), 6)), err_msg=name)


@pytest.fixture
def dataset(tmp_path):
    return csv_data.write_dataset(str(tmp_path))


def test_csv_data_source_matches_nnabla(dataset):
    assert_recorded(csv_data.source_cases(implements, dataset))


def test_concat_data_source_matches_nnabla(dataset, tmp_path):
    other = csv_data.write_dataset(str(tmp_path / "other"), n=4)
    assert_recorded(csv_data.concat_cases(implements, [dataset, other]))


def test_csv_data_iterators_match_nnabla(dataset, tmp_path):
    assert_recorded(csv_data.iterator_cases(it, dataset, str(tmp_path)))


def test_create_cache_and_cache_data_source_match_nnabla(dataset, tmp_path):
    assert_recorded(csv_data.create_cache_cases(create_cache, implements, nnabla_config,
                                                dataset, str(tmp_path)))


def test_data_iterator_cache_reads_what_create_cache_wrote(dataset, tmp_path):
    create_cache.CreateCache(dataset).create(str(tmp_path / "c"), normalize=False)
    source = implements.CsvDataSource(dataset, normalize=False)
    with it.data_iterator_cache(str(tmp_path / "c"), 7, normalize=False,
                                use_thread=False) as di:
        batch = dict(zip(di.variables, di.next()))
    for i in range(7):
        for name, value in zip(source.variables, source.next()):
            np.testing.assert_array_equal(batch[name][i], np.asarray(value, np.float32)
                                          if isinstance(value, list) else value)


def test_file_loaders_match_nnabla(tmp_path):
    assert_recorded(csv_data.loader_cases(loader, str(tmp_path)))


def test_load_image_resizes_to_channel_height_width(tmp_path):
    from PIL import Image
    img = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    Image.fromarray(img).save(tmp_path / "a.png")
    out = loader.load_image(str(tmp_path / "a.png"), shape=(3, 2, 3))
    want = np.asarray(Image.fromarray(img).resize((3, 2), Image.Resampling.BILINEAR))
    np.testing.assert_array_equal(out, want.transpose(2, 0, 1))
    with pytest.raises(DpnbError, match="shape"):
        loader.load_image(str(tmp_path / "a.png"), shape=(1, 2, 3))


def test_file_cache_follows_the_cache_size_setting(dataset, tmp_path):
    saved = nnabla_config.get("DATA_ITERATOR", "data_source_file_cache_size")
    nnabla_config.set("DATA_ITERATOR", "data_source_file_cache_size", "3")
    try:
        with it.data_iterator_csv_dataset(dataset, 2, cache_dir=str(tmp_path / "c"),
                                          use_thread=False):
            pass
    finally:
        nnabla_config.set("DATA_ITERATOR", "data_source_file_cache_size", saved)
    npy = sorted(f for f in os.listdir(tmp_path / "c") if f.endswith(".npy"))
    assert npy == ["cache_00000000_00000002.npy", "cache_00000003_00000005.npy",
                   "cache_00000006_00000006.npy"]


def test_config_defaults_are_nnablas():
    assert dict(nnabla_config["DATA_ITERATOR"]) == {
        "cache_file_format": ".npy", "data_source_file_cache_num_of_threads": "10",
        "cache_file_cache_num_of_threads": "4", "data_source_file_cache_size": "100",
        "data_source_file_cache_location": "", "data_source_buffer_max_size": "1073741824"}


def test_bad_csv_rows_and_unknown_files_are_reported(tmp_path):
    (tmp_path / "a.csv").write_text("x,y\n1,2\n4,b.xyz\n3\n")
    source = implements.CsvDataSource(str(tmp_path / "a.csv"))
    assert source.next() == ([1.0], [2.0])
    with pytest.raises(DpnbError, match="not supported"):
        source._get_data(1)
    with pytest.raises(DpnbError, match="has 1 cells, but the header has 2 columns"):
        source._get_data(2)


def test_remote_and_missing_caches_are_refused(tmp_path):
    with pytest.raises(DpnbError, match="local disk"):
        create_cache.CreateCache("http://example.com/a.csv")
    with pytest.raises(DpnbError, match="holds no cache"):
        implements.CacheDataSource(str(tmp_path))


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32])
def test_wav_files_load_as_scipy_reads_them(tmp_path, dtype):
    wavfile = pytest.importorskip("scipy.io.wavfile")
    info = np.iinfo(dtype)
    samples = np.random.RandomState(0).randint(info.min, info.max, (50, 2)).astype(dtype)
    wavfile.write(tmp_path / "a.wav", 8000, samples)
    want = wavfile.read(tmp_path / "a.wav")[1]
    with open(tmp_path / "a.wav", "rb") as f:
        got = loader.load(".wav")(f)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(loader.load_wav(str(tmp_path / "a.wav"), shape=(100,)),
                                  want.reshape(100))
