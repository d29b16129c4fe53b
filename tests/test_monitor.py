"""dpnb.monitor and dpnb.logger against the files and messages recorded from nnabla 1.39
(tests/fixtures/nnabla/record_monitor.py), and the series listener hook."""
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import dpnb as nn
import dpnb.monitor as M
from dpnb.errors import DpnbError
from dpnb.logger import configure, logger, read_log_settings

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "nnabla")
RECORDED = os.path.join(FIXTURES, "monitor", "files")
_spec = importlib.util.spec_from_file_location("record_monitor",
                                               os.path.join(FIXTURES, "record_monitor.py"))
record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record)

with open(os.path.join(FIXTURES, "monitor", "log.json")) as _f:
    LOG = json.load(_f)

TIMES = re.compile(r"=[0-9.e-]+\[sec/(\d+)iter\] [0-9.e-]+\[sec\]")


def _files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, names in os.walk(root) for f in names)


def _mask_times(message):
    return TIMES.sub(r"=<t>[sec/\1iter] <t>[sec]", message)


@pytest.fixture
def written(tmp_path):
    """Run the recorded sequence on dpnb.monitor: (folder written, messages logged)."""
    root = str(tmp_path / "files")
    handler = record.Messages(root)
    logger.addHandler(handler)
    try:
        record.exercise(M, root)
    finally:
        logger.removeHandler(handler)
    return root, handler.messages


@pytest.fixture
def listeners():
    """Registers listeners for one test and removes them afterwards."""
    added = []

    def add(fn):
        M.add_series_listener(fn)
        added.append(fn)
        return fn

    yield add
    for fn in added:
        M.remove_series_listener(fn)


def test_same_files_as_nnabla(written):
    root, _ = written
    assert _files(root) == _files(RECORDED)


@pytest.mark.parametrize("name", ["train-loss.series.txt", "val-error.series.txt",
                                  "quiet.series.txt"])
def test_series_text_equals_nnabla(written, name):
    root, _ = written
    with open(os.path.join(root, name)) as f, open(os.path.join(RECORDED, name)) as g:
        assert f.read() == g.read()


def test_timer_lines_have_nnabla_indices_and_times(written):
    root, _ = written
    with open(os.path.join(root, "epoch-time.timer.txt")) as f:
        ours = [line.split(" ") for line in f.read().splitlines()]
    with open(os.path.join(RECORDED, "epoch-time.timer.txt")) as f:
        theirs = [line.split(" ") for line in f.read().splitlines()]
    assert [(r[0], r[2]) for r in ours] == [(r[0], r[2]) for r in theirs] == [("2", "3"), ("5", "3")]
    assert all(len(r) == 4 for r in ours)
    laps, totals = [float(r[1]) for r in ours], [float(r[3]) for r in ours]
    assert laps[0] == totals[0] and totals[1] == pytest.approx(laps[0] + laps[1])
    assert min(laps) >= 0 and totals == sorted(totals)


def test_image_pixels_equal_nnabla(written):
    root, _ = written
    images = [name for name in _files(RECORDED) if name.endswith(".png")]
    assert len(images) == 16
    for name in images:
        with Image.open(os.path.join(root, name)) as ours, \
                Image.open(os.path.join(RECORDED, name)) as theirs:
            assert (ours.format, ours.mode, ours.size) == (theirs.format, theirs.mode, theirs.size), name
            np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs), err_msg=name)


def test_recorded_images_are_not_trivial():
    """The comparison means something: tiles have padding and content, modes vary."""
    with Image.open(os.path.join(RECORDED, "tile-rgb", "000000.png")) as tile:
        pixels = np.asarray(tile)
    assert tile.mode == "RGB" and pixels.shape == (15, 15, 3)
    assert not pixels[4::5].any() and not pixels[:, 4::5].any()      # 1-pixel black padding
    assert len(np.unique(pixels)) > 50 and not pixels[10:, 5:].any()  # 5 of 9 tiles used
    with Image.open(os.path.join(RECORDED, "tile-gray", "000000.png")) as gray:
        assert gray.mode == "L" and np.asarray(gray).max() == 255


def test_logged_messages_equal_nnabla(written):
    _, messages = written
    assert [_mask_times(m) for m in messages] == [_mask_times(m) for m in LOG["messages"]]
    assert any("[sec/3iter]" in m for m in messages)


def test_tile_images_equals_nnabla():
    data = np.array(LOG["tile_images"]["input"])
    np.testing.assert_array_equal(M.tile_images(data, padsize=2, padval=-1),
                                  np.array(LOG["tile_images"]["output"]))


def test_series_file_is_emptied_on_creation_then_appended(tmp_path):
    mon = M.Monitor(str(tmp_path / "run"))
    path = tmp_path / "run" / "a-b.series.txt"
    path.write_text("old run\n")
    series = M.MonitorSeries("a b", mon, verbose=False)
    assert path.read_text() == ""
    series.add(0, 2.5)
    series.add(1, np.float32(0.125))
    assert path.read_text() == "0 2.5\n1 0.125\n"


def test_series_and_images_take_variables_and_ndarrays(tmp_path):
    mon = M.Monitor(str(tmp_path))
    v = nn.Variable((2, 3, 2, 2))
    v.d = np.arange(24).reshape(2, 3, 2, 2) / 23
    by_variable = M.MonitorImageTile("from variable", mon, verbose=False)
    by_variable.add(0, v)
    M.MonitorImageTile("from ndarray", mon, verbose=False).add(0, v.data)
    M.MonitorImageTile("from numpy", mon, verbose=False).add(0, v.d.copy())
    loaded = [np.asarray(Image.open(tmp_path / n / "000000.png"))
              for n in ("from-variable", "from-ndarray", "from-numpy")]
    np.testing.assert_array_equal(loaded[0], loaded[2])
    np.testing.assert_array_equal(loaded[1], loaded[2])
    loss = nn.Variable(())
    series = M.MonitorSeries("loss", mon, interval=2, verbose=False)
    for i, value in enumerate([1.0, 2.0]):
        loss.d = value
        series.add(i, loss)
    assert (tmp_path / "loss.series.txt").read_text() == "1 1.5\n"


def test_gpu_values_are_brought_to_the_host(tmp_path, gpu):
    from dpnb.ext_utils import get_extension_context

    mon = M.Monitor(str(tmp_path))
    images = np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2)
    with nn.context_scope(get_extension_context("cudnn")):
        v = nn.Variable(images.shape)
    v.d = gpu.asarray(images)
    M.MonitorImageTile("gpu", mon, verbose=False).add(0, v)
    M.MonitorImageTile("host", mon, verbose=False).add(0, images)
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "gpu" / "000000.png")),
                                  np.asarray(Image.open(tmp_path / "host" / "000000.png")))
    series = M.MonitorSeries("loss", mon, interval=2, verbose=False)
    series.add(0, gpu.asarray(np.float32(0.5)))
    series.add(1, gpu.asarray(np.float32(0.25)))
    assert (tmp_path / "loss.series.txt").read_text() == "1 0.375\n"


def test_image_errors_say_what_to_do(tmp_path):
    mon = M.Monitor(str(tmp_path))
    with pytest.raises(DpnbError, match=r"\[0, 1\].*normalize_method"):
        M.MonitorImageTile("raw", mon, normalize_method=record.identity).add(0, np.full((1, 1, 2, 2), 3.0))
    with pytest.raises(DpnbError, match=r"\(N, \.\.\., C, H, W\).*\(4, 4\)"):
        M.MonitorImage("flat", mon).add(0, np.zeros((4, 4)))
    with pytest.raises(DpnbError, match="needs a Monitor"):
        M.MonitorImage("none", None)
    with pytest.raises(DpnbError, match="interval must be a positive number of indices; got 0"):
        M.MonitorSeries("zero", interval=0)
    with pytest.raises(DpnbError, match="num_images must be a positive integer; got 2.5"):
        M.MonitorImage("half", mon, num_images=2.5)
    with pytest.raises(DpnbError, match="numbers"):
        M.MonitorSeries("text").add(0, "1.0")


def test_missing_pillow_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(DpnbError, match="pip install pillow"):
        M.MonitorImageTile("x", M.Monitor(str(tmp_path)), verbose=False).add(0, np.ones((1, 3, 2, 2)))


def test_plots_read_the_monitor_files(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series, timer = tmp_path / "s.series.txt", tmp_path / "t.timer.txt"
    series.write_text("0 0.5\n3 0.25\n")
    timer.write_text("2 30.0 3 30.0\n5 90.0 3 120.0\n")
    plt.figure()
    try:
        M.plot_series(str(series), plot_kwargs={"label": "loss"})
        M.plot_time_elapsed(str(timer), unit="m")
        M.plot_time_elapsed(str(timer), elapsed=True, unit="h")
        lines = plt.gca().lines
        assert lines[0].get_label() == "loss"
        np.testing.assert_allclose(lines[0].get_xydata(), [[0, 0.5], [3, 0.25]])
        np.testing.assert_allclose(lines[1].get_xydata(), [[2, 0.5], [5, 1.5]])
        np.testing.assert_allclose(lines[2].get_xydata(), [[2, 30 / 3600], [5, 120 / 3600]], rtol=1e-6)
    finally:
        plt.close()
    with pytest.raises(DpnbError, match="'s', 'm', 'h', 'd'"):
        M.plot_time_elapsed(str(timer), unit="w")


def test_logger_is_nnabla_s():
    assert logger.name == LOG["logger"]["name"] == "nnabla"
    assert logger.getEffectiveLevel() == LOG["logger"]["level"]
    assert not logger.propagate
    own = [h for h in logger.handlers if h not in logging.getLogger().handlers]
    assert len(own) == 1
    formatter = own[0].formatter
    lines = []
    for level in (logging.INFO, logging.WARNING):
        entry = logger.makeRecord(logger.name, level, "train.py", 7, "iter=%d", (3,), None)
        lines.append(formatter.format(entry).replace(formatter.formatTime(entry), "{asctime}"))
    assert lines == LOG["logger"]["lines"]


def test_logger_writes_to_the_current_stderr(capsys):
    logger.info("iter=%d {loss}=%s", 4, 0.5)
    logger.debug("not shown at INFO")
    err = capsys.readouterr().err
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \[nnabla\]\[INFO\]: "
                        r"iter=4 \{loss\}=0\.5\n", err), err


def test_logger_reads_nnabla_conf(tmp_path):
    conf, log_file = tmp_path / "my.conf", tmp_path / "run.log"
    conf.write_text(f"[LOG]\nlog_console_level = WARNING\nlog_console_format = <%(levelname)s> %(message)s\n"
                    f"log_file_name = {log_file}\nlog_file_format = %(name)s|%(message)s\n")
    code = ("import logging; from dpnb.logger import logger; logger.info('quiet'); "
            "logger.warning('loud'); root = logging.getLogger(); "
            "assert not root.handlers and root.level == logging.WARNING")
    env = dict(os.environ, NNABLA_CONFIG_FILE_PATH=str(conf), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "<WARNING> loud\n"
    assert log_file.read_text() == "nnabla|loud\n"


def test_bad_log_level_in_conf_is_a_clear_error(tmp_path):
    conf = tmp_path / "nnabla.conf"
    conf.write_text("[LOG]\nlog_console_level = LOUD\n")
    settings = read_log_settings([str(conf)])
    assert settings["log_console_level"] == "LOUD" and settings["log_file_name"] == ""
    with pytest.raises(DpnbError, match="log_console_level.*DEBUG, INFO.*'LOUD'"):
        configure(logging.getLogger("dpnb-test-bad-level"), settings)


def test_listeners_get_every_raw_value_in_order(listeners):
    seen = []
    listeners(lambda name, index, value: seen.append(("first", name, index, value)))
    listeners(lambda name, index, value: seen.append(("second", name, index, value)))
    series = M.MonitorSeries("val loss", interval=3, verbose=False)
    values = [0.5, np.float32(0.25), np.array([[2.0]]), 4]
    for i, v in enumerate(values):
        series.add(i, v)
    expected = [(who, "val loss", i, float(np.mean(v))) for i, v in enumerate(values)
                for who in ("first", "second")]
    assert seen == expected
    assert all(type(entry[3]) is float for entry in seen)


def test_listener_registration(listeners):
    seen = []
    fn = listeners(lambda name, index, value: seen.append(index))
    M.add_series_listener(fn)
    series = M.MonitorSeries("x", verbose=False)
    series.add(0, 1.0)
    M.remove_series_listener(fn)
    M.remove_series_listener(fn)
    series.add(1, 1.0)
    assert seen == [0]
    with pytest.raises(DpnbError, match="callable"):
        M.add_series_listener("report")


def test_raising_listener_is_logged_once_and_dropped(listeners, caplog, tmp_path):
    calls, seen = [], []

    def broken(name, index, value):
        calls.append(index)
        raise RuntimeError("display gone")

    listeners(broken)
    listeners(lambda name, index, value: seen.append(index))
    series = M.MonitorSeries("loss", M.Monitor(str(tmp_path)), verbose=False)
    with caplog.at_level(logging.WARNING, logger="dpnb.monitor"):
        for i in range(3):
            series.add(i, float(i))
    assert calls == [0] and seen == [0, 1, 2]
    warnings = [r for r in caplog.records if r.name == "dpnb.monitor"]
    assert len(warnings) == 1 and "no longer called" in warnings[0].getMessage()
    assert "display gone" in caplog.text
    assert (tmp_path / "loss.series.txt").read_text() == "0 0\n1 1\n2 2\n"
