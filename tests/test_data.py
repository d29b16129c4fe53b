"""dpnb.data: the CIFAR-10 reader on archives written in the official format,
sharding between ranks, the synthetic and digits datasets, and their errors."""
import io
import os
import pickle
import tarfile

import numpy as np
import pytest

from dpnb import DpnbError
from dpnb.data import ShardedBatches, even_split, load_cifar10, load_digits, synthetic
from dpnb.data import cifar10

BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def official_batches(n: int = 4, seed: int = 0) -> dict[str, tuple[bytes, np.ndarray, list]]:
    """Pickled batches laid out as in cifar-10-python.tar.gz: dicts with bytes keys,
    uint8 data (n, 3072) with rows R..., G..., B..., and a list of int labels."""
    rng = np.random.RandomState(seed)
    batches = {}
    for name in BATCHES:
        data = rng.randint(0, 256, size=(n, 3072)).astype(np.uint8)
        labels = [int(v) for v in rng.randint(0, 10, size=n)]
        content = {b"batch_label": name.encode(), b"labels": labels, b"data": data,
                   b"filenames": [f"img{i}.png".encode() for i in range(n)]}
        batches[name] = (pickle.dumps(content, protocol=2), data, labels)
    return batches


def write_archive(directory, batches, skip=()) -> str:
    path = os.path.join(directory, "cifar-10-python.tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        for name, (raw, _, _) in batches.items():
            if name in skip:
                continue
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return path


def expected(batches, names):
    images = np.concatenate([batches[n][1] for n in names]).reshape(-1, 3, 32, 32)
    labels = np.concatenate([batches[n][2] for n in names]).astype(np.int32).reshape(-1, 1)
    return images, labels


@pytest.mark.parametrize("layout", ["archive", "folder"])
def test_cifar10_reads_official_format(tmp_path, layout):
    batches = official_batches()
    if layout == "archive":
        write_archive(tmp_path, batches)
    else:
        folder = tmp_path / "cifar-10-batches-py"
        folder.mkdir()
        for name, (raw, _, _) in batches.items():
            (folder / name).write_bytes(raw)
    ds = load_cifar10(tmp_path)
    train_x, train_y = expected(batches, BATCHES[:5])
    test_x, test_y = expected(batches, BATCHES[5:])
    np.testing.assert_array_equal(ds.train_images, train_x)
    np.testing.assert_array_equal(ds.train_labels, train_y)
    np.testing.assert_array_equal(ds.test_images, test_x)
    np.testing.assert_array_equal(ds.test_labels, test_y)
    assert ds.train_images.dtype == np.uint8 and ds.train_labels.dtype == np.int32
    # Channel planes: the first 1024 bytes of a row are the red 32x32 image.
    np.testing.assert_array_equal(ds.train_images[0, 0], batches["data_batch_1"][1][0, :1024]
                                  .reshape(32, 32))
    x = ds.inputs(ds.train_images[:2])
    assert x.dtype == np.float32 and x.max() <= 1.0
    np.testing.assert_allclose(x, train_x[:2] / 255.0, rtol=1e-6)


def test_cifar10_missing_folder_names_expected_files(tmp_path):
    with pytest.raises(DpnbError, match=r"cifar-10-python\.tar\.gz.*data_batch_1.*test_batch"):
        load_cifar10(tmp_path / "nowhere")


def test_cifar10_folder_missing_batches(tmp_path):
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"")
    with pytest.raises(DpnbError, match="lacks data_batch_2, .*test_batch"):
        load_cifar10(tmp_path)


def test_cifar10_truncated_archive(tmp_path):
    path = write_archive(tmp_path, official_batches())
    with open(path, "rb") as f:
        raw = f.read()
    with open(path, "wb") as f:
        f.write(raw[:len(raw) // 2])
    with pytest.raises(DpnbError, match="corrupt or truncated.*download it again"):
        load_cifar10(tmp_path)


def test_cifar10_archive_without_a_batch(tmp_path):
    write_archive(tmp_path, official_batches(), skip={"test_batch"})
    with pytest.raises(DpnbError, match="no cifar-10-batches-py/test_batch"):
        load_cifar10(tmp_path)


def test_cifar10_truncated_batch(tmp_path):
    batches = official_batches()
    raw = batches["data_batch_3"][0]
    batches["data_batch_3"] = (raw[:len(raw) // 2],) + batches["data_batch_3"][1:]
    write_archive(tmp_path, batches)
    with pytest.raises(DpnbError, match="data_batch_3 .*corrupt or truncated"):
        load_cifar10(tmp_path)


def test_cifar10_refuses_code_in_pickles(tmp_path):
    batches = official_batches()
    batches["data_batch_1"] = (pickle.dumps({b"data": os.getcwd}, protocol=2),) \
        + batches["data_batch_1"][1:]
    write_archive(tmp_path, batches)
    with pytest.raises(DpnbError, match="unexpected object"):
        load_cifar10(tmp_path)


def test_cifar10_wrong_shapes(tmp_path):
    batches = official_batches()
    content = {b"data": np.zeros((4, 100), np.uint8), b"labels": [0, 1, 2, 3]}
    batches["test_batch"] = (pickle.dumps(content, protocol=2),) + batches["test_batch"][1:]
    write_archive(tmp_path, batches)
    with pytest.raises(DpnbError, match=r"expected uint8 data \(N, 3072\)"):
        load_cifar10(tmp_path)


def test_cifar10_download_offline_fails_clearly(tmp_path):
    with pytest.raises(DpnbError, match="could not download CIFAR-10.*offline"):
        cifar10.download_cifar10(tmp_path, url="http://127.0.0.1:9/cifar-10-python.tar.gz",
                                 timeout=5)
    assert os.listdir(tmp_path) == []


def test_cifar10_download_checks_md5(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    write_archive(source, official_batches())
    url = (source / "cifar-10-python.tar.gz").as_uri()
    target = tmp_path / "data"
    with pytest.raises(DpnbError, match="has MD5 .*damaged"):
        cifar10.download_cifar10(target, url=url)
    assert os.listdir(target) == []
    cifar10.download_cifar10(target, url=url, md5=None)
    assert load_cifar10(target).train_images.shape == (20, 3, 32, 32)


@pytest.mark.parametrize("n,size", [(40, 2), (41, 3), (100, 4)])
def test_shards_disjoint_and_covering(n, size):
    shards = [ShardedBatches(n, 3, rank, size, seed=5) for rank in range(size)]
    for epoch in range(3):
        parts = [s.shard(epoch) for s in shards]
        union = np.concatenate(parts)
        assert len(np.unique(union)) == len(union) == size * (n // size)
        left_out = np.setdiff1d(np.arange(n), union)
        assert len(left_out) == n % size
    # Every epoch is a new permutation, and batches walk through the shard in order.
    assert not np.array_equal(shards[0].shard(0), shards[0].shard(1))
    s = shards[1]
    per_epoch = np.concatenate([s.indices(i) for i in range(s.iters_per_epoch)])
    np.testing.assert_array_equal(per_epoch, s.shard(0)[:s.iters_per_epoch * 3])
    np.testing.assert_array_equal(s.indices(s.iters_per_epoch), s.shard(1)[:3])


def test_shards_depend_on_iteration_only():
    a, b = ShardedBatches(50, 4, 1, 2, seed=1), ShardedBatches(50, 4, 1, 2, seed=1)
    seq = [a.indices(i).copy() for i in range(20)]
    np.testing.assert_array_equal(b.indices(13), seq[13])
    np.testing.assert_array_equal(b.indices(2), seq[2])


def test_batch_larger_than_shard():
    with pytest.raises(DpnbError, match="batch size per rank must be in 1..25.*is 32"):
        ShardedBatches(50, 32, 0, 2)
    with pytest.raises(DpnbError, match="rank must be in 0..1"):
        ShardedBatches(50, 4, 2, 2)


@pytest.mark.parametrize("n,size", [(10, 3), (7, 2), (2, 4)])
def test_even_split_covers(n, size):
    parts = [np.arange(n)[even_split(n, r, size)] for r in range(size)]
    np.testing.assert_array_equal(np.concatenate(parts), np.arange(n))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_synthetic_is_reproducible_and_learnable():
    a, b = synthetic(64, 16, (1, 4, 4), 3, seed=2), synthetic(64, 16, (1, 4, 4), 3, seed=2)
    np.testing.assert_array_equal(a.train_images, b.train_images)
    assert a.train_images.shape == (64, 1, 4, 4) and a.test_labels.shape == (16, 1)
    assert a.train_labels.dtype == np.int32 and set(np.unique(a.train_labels)) <= {0, 1, 2}
    # Nearest class mean separates the classes well above chance.
    means = np.stack([a.train_images[a.train_labels[:, 0] == c].mean(0) for c in range(3)])
    dist = ((a.test_images[:, None] - means[None]) ** 2).sum(axis=(2, 3, 4))
    assert (dist.argmin(1) == a.test_labels[:, 0]).mean() > 0.6
    with pytest.raises(DpnbError, match="num_classes >= 2"):
        synthetic(num_classes=1)


def test_digits():
    ds = load_digits()
    assert ds.train_images.shape == (1438, 1, 8, 8) and ds.test_images.shape == (359, 1, 8, 8)
    x = ds.inputs(ds.train_images)
    assert x.min() == 0 and x.max() == 1 and ds.num_classes == 10
    assert set(np.unique(ds.test_labels)) == set(range(10))
