"""Every solver against nnabla 1.39 (recorded by tests/fixtures/nnabla/record_solvers.py):
five updates of four float32 parameters with fixed gradients, with and without weight
decay, learning-rate schedules and gradient operations, every update-changing option;
then the states, their names in nnabla's .h5 files, and nnabla's own state files."""
import json
import os

import h5py
import numpy as np
import pytest

import dpnb as nn
import dpnb.solvers as S
from dpnb.solvers import runs
from dpnb.context import to_module
from dpnb.ext_utils import get_extension_context

HERE = os.path.join(os.path.dirname(__file__), "fixtures", "nnabla")
with open(os.path.join(HERE, "solvers.json")) as f:
    META = json.load(f)
RECORD = dict(np.load(os.path.join(HERE, "solvers.npz")))
CASES = {case["name"]: case for case in META["cases"]}
SAVED = [name for name in CASES if f"{name}/file.h5" in RECORD]
RTOL, ATOL = 2e-5, 2e-6


def make_params() -> dict:
    """The recorded initial values as flat-storage parameters, in the recorded order."""
    for key in META["shapes"]:
        scope, short = key.split("/")
        with nn.parameter_scope(scope):
            nn.get_parameter_or_create(short, RECORD[f"init/{key}"].shape, RECORD[f"init/{key}"])
    return nn.get_parameters()


def run_case(case: dict, steps: int | None = None) -> tuple[S.Solver, dict, list]:
    """The case's solver after ``steps`` (all) recorded updates, its parameters, and
    their values after each update."""
    params = make_params()
    solver = getattr(S, case["solver"])(**case["kwargs"])
    solver.set_parameters(params)
    trace = []
    for i in range(META["steps"] if steps is None else steps):
        for key, p in params.items():
            p.g = RECORD[f"grad/{key}"][i]
        if case["lrs"] is not None:
            solver.set_learning_rate(case["lrs"][i])
        for op, value in case["ops"]:
            getattr(solver, op)(value)
        if case["decays"] is not None and case["decays"][i] is not None:
            solver.weight_decay(case["decays"][i])
        solver.update()
        trace.append({key: to_module(p.d, np).copy() for key, p in params.items()})
    return solver, params, trace


def assert_states(solver: S.Solver, case: dict) -> None:
    states = solver.get_states()
    assert {k: sorted(s.pstate) for k, s in states.items()} == case["states"]
    assert {k: s.t for k, s in states.items()} == case["t"]
    for key, state in states.items():
        for name, value in state.pstate.items():
            want = RECORD[f"{case['name']}/state/{key}/{name}"]
            np.testing.assert_allclose(to_module(value.d, np), want, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{key}/{name}")


@pytest.mark.parametrize("cpu_slice", [runs.CPU_SLICE, 5], ids=["one-slice", "slices-of-5"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_updates_and_states_match_nnabla(monkeypatch, name, cpu_slice):
    """Slices of 5 elements cut across parameters, so per-parameter norms (Lamb,
    Lars) must add up over slices."""
    monkeypatch.setattr(runs, "CPU_SLICE", cpu_slice)
    case = CASES[name]
    solver, params, trace = run_case(case)
    assert len(solver.runs) == 1
    for key in params:
        for i, values in enumerate(trace):
            np.testing.assert_allclose(values[key], RECORD[f"{name}/w/{key}"][i], rtol=RTOL,
                                       atol=ATOL, err_msg=f"{key} after update {i + 1}")
    assert_states(solver, case)


@pytest.mark.parametrize("name", sorted(CASES))
def test_updates_and_states_match_nnabla_on_gpu(name, gpu):
    """One run per solver on the GPU: per-parameter norms by segment sums there too."""
    case = CASES[name]
    with nn.context_scope(get_extension_context("cudnn")):
        solver, params, trace = run_case(case)
        for key in params:
            for i, values in enumerate(trace):
                np.testing.assert_allclose(values[key], RECORD[f"{name}/w/{key}"][i], rtol=RTOL,
                                           atol=ATOL, err_msg=f"{key} after update {i + 1}")
        assert_states(solver, case)


@pytest.mark.parametrize("name", sorted(CASES))
def test_info_and_fused_decay_match_nnabla(name):
    case = CASES[name]
    solver = getattr(S, case["solver"])(**case["kwargs"])
    assert solver.name == case["solver"]
    assert sorted(solver.info) == sorted(case["info"])
    for key, value in case["info"].items():
        assert type(solver.info[key]) is type(value), key
        assert solver.info[key] == pytest.approx(value, rel=1e-7), key
    assert solver.weight_decay_is_fused() is case["fused"]
    if case["lrs"] is not None:
        solver.set_learning_rate(case["lrs"][-1])
    assert solver.learning_rate() == pytest.approx(case["learning_rate"], rel=1e-7)


@pytest.mark.parametrize("ext", [".h5", ".protobuf"])
@pytest.mark.parametrize("name", SAVED)
def test_loads_the_state_files_nnabla_wrote(tmp_path, name, ext):
    case = CASES[name]
    path = tmp_path / f"states{ext}"
    path.write_bytes(RECORD[f"{name}/file{ext}"].tobytes())
    solver = getattr(S, case["solver"])(**case["kwargs"])
    solver.set_parameters(make_params())
    solver.load_states(path)
    assert_states(solver, case)


@pytest.mark.parametrize("name", SAVED)
def test_h5_state_files_have_nnabla_s_entries(tmp_path, name):
    case = CASES[name]
    solver, _, _ = run_case(case)
    solver.save_states(tmp_path / "states.h5")
    entries = []
    with h5py.File(tmp_path / "states.h5", "r") as f:
        f.visititems(lambda n, o: entries.append(n) if isinstance(o, h5py.Dataset) else None)
    assert sorted(entries) == case["h5_entries"]


@pytest.mark.parametrize("ext", [".h5", ".protobuf", ".npz"])
@pytest.mark.parametrize("name", SAVED)
def test_saved_states_continue_like_nnabla(tmp_path, name, ext):
    """Two updates, save, a fresh solver loads them and makes the other three: nnabla's values."""
    case = CASES[name]
    first, params, _ = run_case(case, steps=2)
    first.save_states(tmp_path / f"states{ext}")
    solver = getattr(S, case["solver"])(**case["kwargs"])
    solver.set_parameters(params)
    solver.load_states(tmp_path / f"states{ext}")
    for i in range(2, META["steps"]):
        for key, p in params.items():
            p.g = RECORD[f"grad/{key}"][i]
        solver.update()
    for key, p in params.items():
        np.testing.assert_allclose(p.d, RECORD[f"{name}/w/{key}"][-1], rtol=RTOL, atol=ATOL,
                                   err_msg=key)
    assert_states(solver, case)
