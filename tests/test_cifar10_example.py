"""The data-parallel classification example, run under MPI (mostly 2 ranks) on tiny synthetic
data: resuming gives exactly the parameters of an uninterrupted run, the monitor
files and checkpoints appear, and bad settings fail on every rank before training;
and the docstring's digits command, with its defaults, learns digits to >= 97 %."""
import ast
import json
import re
import shutil

import h5py
import numpy as np
import pytest

from dpnb.testing import run_script

from dpnb.examples.cifar10 import SCRIPT
TINY = ["--dataset", "synthetic", "-b", "4", "--nmaps", "4", "-e", "0.1", "-v", "4", "-s", "4",
        "-m", "2", "--no-progress"]


def run_example(n: int, monitor, *args: str, expect_ok: bool = True, timeout: float = 60) -> str:
    run = run_script(n, SCRIPT, "-o", str(monitor), *args, timeout=timeout)
    if expect_ok:
        assert run.returncode == 0, f"{run.ending}:\n{run.output}"
    else:
        assert run.returncode not in (0, None), f"{run.ending}:\n{run.output}"
        assert "Traceback" not in run.output, run.output
    return run.output


def load(path) -> dict:
    """Every array of an .npz archive, or every dataset of an .h5 file by its path."""
    if str(path).endswith(".h5"):
        found = {}
        with h5py.File(path, "r") as f:
            f.visititems(lambda name, item: found.__setitem__(name, item[()])
                         if isinstance(item, h5py.Dataset) else None)
        return found
    with np.load(path) as archive:
        return {name: archive[name] for name in archive.files}


def assert_same_files(a, b):
    x, y = load(a), load(b)
    assert sorted(x) == sorted(y)
    for name in x:
        np.testing.assert_array_equal(x[name], y[name], err_msg=name)


def rows(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """8 iterations without interruption."""
    monitor = tmp_path_factory.mktemp("straight")
    run_example(2, monitor, *TINY, "-i", "8")
    return monitor


def test_resume_matches_uninterrupted_run(straight, tmp_path):
    run_example(2, tmp_path, *TINY, "-i", "4")
    first = rows(tmp_path / "train.jsonl")
    # A crash during a later checkpoint leaves a partial directory; it must be ignored.
    (tmp_path / "checkpoint_00000006").mkdir()
    (tmp_path / "checkpoint_00000006" / "params.h5").write_bytes(b"PK\x03")
    output = run_example(2, tmp_path, *TINY, "-i", "8", "--resume")
    assert f"resuming at iteration 4 from {tmp_path}" in output
    pointer = json.loads((tmp_path / "checkpoint.json").read_text())
    assert pointer["iteration"] == 8 and pointer["run"]["ranks"] == 2
    assert sorted(p.name for p in tmp_path.glob("checkpoint_*")) == ["checkpoint_00000008"]
    for name in ("params.h5", "solver.h5"):
        assert_same_files(straight / "checkpoint_00000008" / name,
                          tmp_path / "checkpoint_00000008" / name)
    a = load(straight / "checkpoint_00000008" / "state.npz")
    b = load(tmp_path / "checkpoint_00000008" / "state.npz")
    np.testing.assert_array_equal(a["rng"], b["rng"])
    assert a["rng"].shape == (2, 627) and not np.array_equal(a["rng"][0], a["rng"][1])
    # Losses, errors and validation rows follow the uninterrupted run's exactly.
    resumed, uninterrupted = rows(tmp_path / "train.jsonl"), rows(straight / "train.jsonl")
    assert resumed[:len(first)] == first
    for key in ("iteration", "loss", "error", "lr"):
        assert [r[key] for r in resumed] == [r[key] for r in uninterrupted], key
    for key in ("iteration", "loss", "error"):
        assert ([r[key] for r in rows(tmp_path / "validation.jsonl")]
                == [r[key] for r in rows(straight / "validation.jsonl")]), key


def test_monitor_files_and_checkpoints(straight):
    train, val = rows(straight / "train.jsonl"), rows(straight / "validation.jsonl")
    assert [r["iteration"] for r in train] == [2, 4, 6, 8]
    assert [r["iteration"] for r in val] == [4, 8]
    for r in train:
        assert set(r) == {"iteration", "epoch", "loss", "error", "lr", "time", "images_per_s"}
        assert np.isfinite(r["loss"]) and 0 <= r["error"] <= 1 and r["images_per_s"] > 0
    # Linear warmup over 0.1 epoch (6.4 iterations) from 0.05 to 0.05 x 2 ranks.
    assert train[0]["lr"] == pytest.approx(0.05 * (1 + 1 / 6.4))
    assert train[-1]["lr"] == pytest.approx(0.1)
    assert (straight / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Only the latest checkpoint is kept, and it is complete.
    assert sorted(p.name for p in straight.glob("checkpoint_*")) == ["checkpoint_00000008"]
    assert not list(straight.glob(".*.tmp"))
    assert int(load(straight / "checkpoint_00000008" / "state.npz")["iteration"]) == 8


def test_all_reduce_callback_gives_the_same_parameters(straight, tmp_path):
    run_example(2, tmp_path, *TINY, "-i", "8", "-s", "8", "--with-all-reduce-callback")
    assert_same_files(straight / "checkpoint_00000008" / "params.h5",
                      tmp_path / "checkpoint_00000008" / "params.h5")


@pytest.mark.parametrize("during_backward", [False, True])
def test_gradient_reducer_gives_the_same_parameters(straight, tmp_path, during_backward):
    extra = ["--with-all-reduce-callback"] if during_backward else []
    run_example(2, tmp_path, *TINY, "-i", "8", "-s", "8", "--with-gradient-reducer", *extra)
    assert_same_files(straight / "checkpoint_00000008" / "params.h5",
                      tmp_path / "checkpoint_00000008" / "params.h5")


def test_resume_refuses_other_rank_count(straight, tmp_path):
    shutil.copytree(straight, tmp_path / "m")
    output = run_example(1, tmp_path / "m", *TINY, "-i", "12", "--resume", expect_ok=False)
    assert "ranks: checkpoint 2, this run 1" in output and "mpiexec -n" in output


def test_resume_refuses_other_network(straight, tmp_path):
    shutil.copytree(straight, tmp_path / "m")
    args = [a if a != "4" or i != TINY.index("--nmaps") + 1 else "8" for i, a in enumerate(TINY)]
    output = run_example(2, tmp_path / "m", *args, "-i", "12", "--resume", expect_ok=False)
    assert output.count("holds a different network") == 2, output
    assert "--nmaps" in output


def test_resume_without_checkpoint(tmp_path):
    output = run_example(2, tmp_path, *TINY, "-i", "2", "--resume", expect_ok=False)
    assert "no checkpoint" in output


def test_batch_larger_than_shard(tmp_path):
    output = run_example(2, tmp_path, *TINY[:2], "-b", "300", "-i", "1", expect_ok=False)
    assert "batch size per rank must be in 1..256" in output and "is 300" in output


def test_missing_cifar10_names_expected_files(tmp_path):
    output = run_example(2, tmp_path / "m", "--dataset", "cifar10", "--data-dir",
                         str(tmp_path / "none"), "-i", "1", expect_ok=False)
    assert "cifar-10-python.tar.gz" in output and "data_batch_1" in output


def test_digits_with_sync_bn(tmp_path):
    run_example(2, tmp_path, "--dataset", "digits", "--sync-bn", "-b", "16", "--nmaps", "4",
                "-i", "3", "--no-progress")
    val = rows(tmp_path / "validation.jsonl")
    assert [r["iteration"] for r in val] == [3] and 0 <= val[0]["error"] <= 1


def test_resnet23_with_sync_bn(tmp_path):
    run_example(2, tmp_path, *TINY, "--sync-bn", "-i", "4")
    val = rows(tmp_path / "validation.jsonl")
    assert [r["iteration"] for r in val] == [4] and np.isfinite(val[0]["loss"])


def test_cifar10_from_official_archive(tmp_path):
    from test_data import official_batches, write_archive

    write_archive(tmp_path, official_batches(n=8))
    run_example(2, tmp_path / "m", "--dataset", "cifar10", "--data-dir", str(tmp_path), "-b", "4",
                "--nmaps", "4", "--epochs", "2", "--no-progress")
    val = rows(tmp_path / "m" / "validation.jsonl")
    assert [r["iteration"] for r in val] == [5, 10] and val[0]["epoch"] == 1.0


def docstring_digits_options() -> list[str]:
    """The options of the digits command that the example's docstring shows."""
    doc = ast.get_docstring(ast.parse(SCRIPT.read_text()))
    command = next(line.split() for line in doc.splitlines() if "--dataset digits" in line)
    assert command[:6] == ["mpiexec", "-n", "2", "python", "-m", "dpnb.examples.cifar10"], command
    return command[6:]


@pytest.mark.parametrize("ranks", [2, 1])
def test_digits_defaults_reach_97_percent(tmp_path, ranks):
    options = docstring_digits_options()
    assert options == ["-c", "cpu", "--dataset", "digits"]  # nothing but the defaults
    output = run_example(ranks, tmp_path, *options)
    val = rows(tmp_path / "validation.jsonl")
    assert [r["epoch"] for r in val] == [float(e) for e in range(1, 11)]
    assert 1 - val[-1]["error"] >= 0.97, val[-1]
    final = re.findall(r"final test accuracy ([0-9.]+) \(loss", output)
    assert final == [f"{1 - val[-1]['error']:.4f}"], output[-2000:]


def test_explicit_options_win_over_dataset_defaults(tmp_path):
    run_example(2, tmp_path, "--dataset", "digits", "--epochs", "2", "--nmaps", "4",
                "--no-progress")
    assert [r["epoch"] for r in rows(tmp_path / "validation.jsonl")] == [1.0, 2.0]
    params = load(tmp_path / "checkpoint_00000022" / "params.h5")
    assert [v.shape[0] for k, v in params.items() if k.startswith("conv1/")
            and k.endswith("/W")] == [4]  # the first convolution's output maps


def test_nmaps_below_one_is_refused(tmp_path):
    output = run_example(2, tmp_path, "--dataset", "digits", "--nmaps", "0", expect_ok=False)
    assert "--nmaps must be at least 1, got 0" in output and "digits (32)" in output
