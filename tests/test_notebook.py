"""Notebook helpers without a cluster: summaries, comparison, sync reports, plots,
the progress monitor's bookkeeping and the %dpnb magic's parsing."""
import numpy as np
import pytest

from dpnb.errors import DpnbError
from dpnb.notebook import PerRank, ProgressMonitor, compare, plot_grads, plot_losses
from dpnb.notebook.inspect import SyncReport, max_rank_difference, summarize
from dpnb.cluster.engine.calls import KEY
from dpnb.notebook.table import Table


def test_table_text_and_html():
    table = Table(["a", "long name"], [[1, "<x>"], [22, "y"]], title="t")
    assert str(table).splitlines() == ["t", "a   long name", "--  ---------", "1   <x>", "22  y"]
    html = table._repr_html_()
    assert "<td>&lt;x&gt;</td>" in html and "<caption>t</caption>" in html


def test_summarize_arrays_and_values():
    text = summarize(np.array([3.0, 4.0, 0.0, 0.0, 1.0], dtype=np.float32))
    assert text.startswith("float32(5,) norm=5.09902 [3., 4., 0., 0.")
    assert text.endswith(", ...]")
    assert summarize(np.float64(2.5) * np.ones(1)) == "float64(1,) [2.5]"
    assert summarize(7) == "7" and len(summarize("x" * 200)) == 80


def test_per_rank_repr():
    gathered = PerRank({0: {"w": np.ones(3)}, 1: {"w": np.zeros(3)}}, title="grads")
    text = repr(gathered)
    assert "rank  name  value" in text and "norm=1.73205" in text and "norm=0 " in text
    assert gathered[1]["w"].sum() == 0 and "<table>" in gathered._repr_html_()
    assert "rank  value" in repr(PerRank({0: 1, 1: 2}))


def test_max_rank_difference():
    assert max_rank_difference([np.ones(3), np.ones(3)]) == 0.0
    assert max_rank_difference([np.ones(3), np.array([1.0, 3.0, 0.5]), np.ones(3)]) == 2.0
    assert max_rank_difference([np.ones(3), np.ones(4)]) == float("inf")


def test_compare_before_and_after():
    before = {0: {"w": np.array([1.0, 2.0]), "b": np.array([0.5])},
              1: {"w": np.array([3.0, 2.0]), "b": np.array([0.5])}}
    after = {r: {"w": np.array([2.0, 2.0]), "b": np.array([0.5])} for r in (0, 1)}
    result = compare(before, after)
    assert [(r.stage, r.name) for r in result.rows] == [
        ("before", "w"), ("before", "b"), ("after", "w"), ("after", "b")]
    w_before = result.rows[0]
    assert w_before.max_difference == 2.0 and not w_before.agree
    assert w_before.norms == pytest.approx([np.sqrt(5), np.sqrt(13)])
    assert result.rows[1].agree
    assert not result.agree("before") and result.agree("after") and result.agree()
    assert "ranks agree" in repr(result) and "NO" in repr(result)
    assert compare(before, atol=2.0).agree()
    single = compare({0: np.ones(2), 1: np.ones(2)})
    assert single.rows[0].name == "value" and single.agree()


def test_compare_missing_parameter():
    result = compare({0: {"w": np.ones(1)}, 1: {}})
    assert not result.agree() and result.rows[0].max_difference == float("inf")


def test_sync_report():
    assert "yes" in repr(SyncReport([0, 1], 3, {}))
    report = SyncReport([0, 1], 3, {"w": PerRank({0: np.zeros(2), 1: np.ones(2)})})
    assert not report.in_sync
    assert "1 of 3 parameters differ" in repr(report) and "1.41421" in repr(report)


def test_plot_grads_and_losses():
    before = {r: {"w": np.arange(6.0) + r, "b": np.ones(2) * r} for r in (0, 1)}
    after = {r: {"w": np.arange(6.0) + 0.5, "b": np.ones(2) * 0.5} for r in (0, 1)}
    fig = plot_grads(before, after)
    assert len(fig.axes) == 4 and fig.axes[0].get_title() == "w (before all_reduce)"
    assert len(fig.axes[0].lines) == 2
    np.testing.assert_array_equal(fig.axes[1].lines[1].get_ydata(), np.arange(6.0) + 0.5)
    fig = plot_losses({0: [(1, 2.0), (2, 1.0)], 1: [(1, 3.0), (2, 1.5)]})
    assert [line.get_label() for line in fig.axes[0].lines] == ["rank 0", "rank 1"]


class FakeResult:
    """What ProgressMonitor reads of an ipyparallel AsyncResult: per-engine data that
    IOPub fills, whether the result came, and whether every engine's output did."""

    def __init__(self, engines=2):
        self.data = [{} for _ in range(engines)]
        self.finished = False
        self.output_complete = False
        self.waited = []

    def __getitem__(self, key):
        assert key == "data"
        return self.data

    def done(self):
        return self.finished

    def wait_for_output(self, timeout):
        self.waited.append(timeout)
        return self.output_complete


def _report(rank, step, total=4, first=1, elapsed=0.5):
    return {KEY: {"rank": rank, "step": step, "total": total, "first": first,
                  "elapsed": elapsed, "losses": [(s, 1.0 / s) for s in range(1, step + 1)]}}


def test_progress_monitor_follows_a_run_until_every_output_came():
    monitor = ProgressMonitor(display=False)
    result = FakeResult()
    monitor.watch(result)
    result.data[0].update(_report(0, 1))
    monitor.poll()
    assert monitor.runs == []
    result.data[1].update(_report(1, 3, first=2, elapsed=1.5))
    result.data[0].update(_report(0, 4))
    result.finished = True                 # the results came, rank 1's last report not yet
    monitor.poll()
    assert monitor.runs == []
    result.data[1].update(_report(1, 4, first=2, elapsed=2.0))
    result.output_complete = True
    monitor.poll()
    assert len(monitor.runs) == 1
    run = monitor.runs[0]
    assert run.steps == {0: 4, 1: 4} and run.total == 4 and run.losses[0][-1] == (4, 0.25)
    assert run.first == 1 and run.elapsed == 2.0
    monitor.poll()
    assert len(monitor.runs) == 1          # finished runs are not watched any more


def test_after_cell_waits_for_the_output_of_finished_tasks():
    """A short loop: the results came before the reports (which travel on IOPub); the
    hook waits for the output so that the run finishes in this cell, every rank in it."""
    monitor = ProgressMonitor(display=False, output_wait=3.0)
    result, running = FakeResult(engines=1), FakeResult(engines=1)
    monitor.watch(result)
    monitor.watch(running)
    result.finished = True

    def arrive(timeout):
        result.waited.append(timeout)
        result.data[0].update(_report(0, 4))
        result.output_complete = True
        return True

    result.wait_for_output = arrive
    monitor.after_cell()
    assert 0 < result.waited[0] <= 3.0 and running.waited == []   # a running task is not waited for
    assert [r.steps for r in monitor.runs] == [{0: 4}]


def test_progress_monitor_finishes_a_run_whose_output_never_completes():
    """An engine that died sends no more output: the run ends ``output_wait`` after the result."""
    monitor = ProgressMonitor(display=False, output_wait=0.0)
    result = FakeResult()
    monitor.watch(result)
    result.data[0].update(_report(0, 1))
    result.finished = True
    monitor.poll()
    assert monitor.runs[0].step == 1


def test_a_task_without_reports_leaves_no_run():
    monitor = ProgressMonitor(display=False)
    result = FakeResult()
    monitor.watch(result)
    result.finished = result.output_complete = True
    monitor.poll()
    assert monitor.runs == []


def test_progress_bar_rate_counts_from_the_engines_first_report(capsys):
    """The bar may be made after the loop ended; its rate is the engines' own: steps
    after the cell's first report over the seconds since."""
    monitor = ProgressMonitor()
    result = FakeResult(engines=1)
    monitor.watch(result)
    result.data[0].update(_report(0, 30, total=30, first=5, elapsed=2.5))
    result.finished = result.output_complete = True
    monitor.poll()
    shown = capsys.readouterr().err
    assert "30/30 [00:02<00:00, 10.00step/s]" in shown, shown


def test_report_outside_engines_is_quiet():
    from dpnb.notebook import report

    report(1, 2, loss=0.5)
    report(2, 2, loss=0.25)


def test_dpnb_magic_help_and_errors(capsys):
    from dpnb.cluster import registry
    from dpnb.notebook.magics import dpnb_magic

    dpnb_magic("")
    assert "%dpnb start [-n N]" in capsys.readouterr().out
    assert "%dpnb sync" in dpnb_magic.__doc__
    with pytest.raises(DpnbError, match="(?s)invalid choice.*%dpnb start"):
        dpnb_magic("bogus")
    with pytest.raises(DpnbError, match="argument -n: invalid int"):
        dpnb_magic("start -n two")
    if registry.active() is None:
        with pytest.raises(DpnbError, match=r"no cluster is running.*dpnb start"):
            dpnb_magic("status")
        dpnb_magic("stop")                                     # nothing to stop: no error


def test_named_arrays_travel_as_flat_storage_views_and_come_back_by_name():
    """Flat-storage gradients are sent as one view of the storage (ipyparallel sends
    top-level arrays without copying them); other variables as buffers of their own."""
    import dpnb as nn
    import dpnb.parametric_functions as PF
    from dpnb.cluster.engine import calls as remote

    x = nn.Variable((2, 3))
    PF.affine(x, 4, name="fc")
    params = list(nn.get_parameters().items())
    for _, p in params:
        p.g = np.random.RandomState(0).randn(*p.shape)
    outside = nn.Variable.from_numpy_array(np.arange(6.0).reshape(2, 3))
    outside.g = np.full((2, 3), 7.0)
    layout, *buffers = packed = remote.pack(params + [("outside", outside)], gradients=True)
    assert len(buffers) == 2 and [entry[:2] for entry in layout] == [
        ("fc/affine/W", 0), ("fc/affine/b", 0), ("outside", 1)]
    assert all(np.shares_memory(buffers[0], p.g) for _, p in params)
    unpacked = remote.unpack(packed)
    assert [name for name, _ in unpacked] == ["fc/affine/W", "fc/affine/b", "outside"]
    for (name, value), (_, p) in zip(unpacked, params + [("outside", outside)]):
        np.testing.assert_array_equal(value, p.g)
        assert value.dtype == p.g.dtype and value.shape == p.shape
    data = dict(remote.unpack(remote.pack([("outside", outside)])))
    np.testing.assert_array_equal(data["outside"], outside.d)
    assert remote.unpack(remote.pack([])) == []


def test_gathers_bring_gpu_values_to_the_host(gpu):
    """What the notebook gathers from an engine whose network is on the GPU comes back as
    NumPy arrays equal to the device's: gradients and values packed from GPU flat storage,
    checksums of the parameters' bytes, and CuPy arrays nested in an evaluated result."""
    import dpnb as nn
    import dpnb.parametric_functions as PF
    from dpnb.cluster.engine import calls as remote
    from dpnb.context import to_module
    from dpnb.ext_utils import get_extension_context

    rng = np.random.RandomState(0)
    host = {}
    for extension in ("cpu", "cudnn"):
        nn.clear_parameters()
        with nn.context_scope(get_extension_context(extension)):
            PF.affine(nn.Variable((2, 3)), 4, name="fc")
        params = nn.get_parameters()
        if extension == "cpu":
            values = {name: rng.randn(*p.shape).astype(np.float32) for name, p in params.items()}
        for name, p in params.items():
            p.d, p.g = values[name], 2 * values[name]
        host[extension] = (remote.unpack(remote.gradients()),
                           remote.unpack(remote.parameter_values(list(params))),
                           remote.checksums())
    on_gpu = [(name, p.d) for name, p in params.items()]
    assert all(type(v).__module__.split(".")[0] == "cupy" for _, v in on_gpu)
    for gathered, expected in zip(host["cudnn"][:2], host["cpu"][:2]):
        assert [name for name, _ in gathered] == [name for name, _ in expected]
        for (_, got), (_, want) in zip(gathered, expected):
            assert type(got) is np.ndarray
            np.testing.assert_array_equal(got, want)
    assert host["cudnn"][2] == host["cpu"][2]
    nested = remote.to_host({"w": on_gpu, "scalar": gpu.float32(1.5) * gpu.ones(())})
    assert type(nested["w"][0][1]) is np.ndarray and type(nested["scalar"]) is np.ndarray
    np.testing.assert_array_equal(nested["w"][0][1], to_module(on_gpu[0][1], np))


def test_cluster_gone_shows_as_its_message_alone(capsys):
    """A cell that meets a gone cluster shows one line: the frames are dpnb's and
    ipyparallel's, none of the user's."""
    from IPython.core.interactiveshell import InteractiveShell

    from dpnb.errors import ClusterGone

    shell = InteractiveShell.instance()
    shell.user_ns["ClusterGone"] = ClusterGone
    result = shell.run_cell("raise ClusterGone('the controller is gone; cluster.restart()')")
    assert isinstance(result.error_in_exec, ClusterGone)
    shown = capsys.readouterr()
    text = (shown.out + shown.err).strip()
    assert text == "ClusterGone: the controller is gone; cluster.restart()", text
