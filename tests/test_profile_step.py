"""benchmarks/profile_step.py's accounting: function and operator names into families,
and a pass's time charged from one function's start to the next's."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def profile_step():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import profile_step
        yield profile_step
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("name, family", [
    ("Convolution", "convolution"), ("aten::convolution_backward", "convolution"),
    ("aten::mkldnn_convolution", "convolution"), ("BatchNormalization", "normalization"),
    ("aten::native_batch_norm_backward", "normalization"), ("MaxPooling", "pooling"),
    ("ReLU", "activation"), ("aten::clamp_min", "activation"), ("Affine", "matrix product"),
    ("aten::addmm", "matrix product"), ("LSTM", "recurrent"),
    ("SoftmaxCrossEntropy", "loss"), ("aten::_log_softmax", "loss"), ("Softmax", "attention"),
    ("Optimizer.step#Adam.step", "optimizer"), ("Reshape", "data movement"),
    ("Mean", "reduction"), ("Add2", "elementwise"), ("Bogus", "other"),
])
def test_names_fall_into_families(profile_step, name, family):
    assert profile_step.family(name) == family


def test_a_pass_charges_each_function_until_the_next_starts(profile_step, monkeypatch):
    clock = iter([1.0, 3.0, 3.5, 7.0])
    monkeypatch.setattr(profile_step.time, "perf_counter", lambda: next(clock))
    seconds = profile_step.collections.Counter()
    timer = profile_step.PassTimer(seconds)
    for name in ("Convolution", "ReLU", "Convolution"):
        timer(SimpleNamespace(name=name))
    timer.finish()
    assert seconds == {"convolution": 2.0 + 3.5, "activation": 0.5}


def test_the_dpnb_worker_accounts_for_each_phase(profile_step):
    result = profile_step.dpnb_worker("transformer", 2)
    assert set(result["phases_s"]) == set(profile_step.PHASES)
    families = result["families_s"]
    assert families["update"] == {"optimizer": pytest.approx(families["update"]["optimizer"])}
    assert {"matrix product", "attention", "normalization"} <= set(families["forward"])
    for phase in ("forward", "backward"):  # the hooked pass takes about as long as the plain one
        assert 0.3 < sum(families[phase].values()) / result["phases_s"][phase] < 3


def test_runs_are_summarised_by_their_medians(profile_step):
    def run(forward, conv):
        return {"phases_s": {"forward": forward, "backward": 2.0, "update": 0.1},
                "families_s": {"forward": {"convolution": conv}, "backward": {},
                               "update": {"optimizer": 0.1}}}
    summary = profile_step.median_profile([run(1.0, 0.5), run(3.0, 0.7), run(2.0, 0.6)])
    assert summary["phases_s"] == {"forward": 2.0, "backward": 2.0, "update": 0.1}
    assert summary["families_s"]["forward"] == {"convolution": 0.6}
    assert profile_step.median_profile([run(1.0, 0.5), {**run(1.0, 0.5), "families_s": {
        "forward": {}, "backward": {}, "update": {}}}])["families_s"]["forward"] == {
            "convolution": 0.25}              # a family missing from a run counts as 0 there
