"""Solver hooks and protobuf states as nnabla 1.39 has them: ``update``,
``weight_decay``, ``scale_grad``, ``clip_grad_by_norm`` and the ``check_*_grad``
calls take pre/post hooks called around each parameter; ``set_states_to_protobuf``
and ``set_states_from_protobuf`` move states through an ``Optimizer`` message;
``set_parameters({})`` and partial ``set_states`` work.  Values are checked against
tests/fixtures/nnabla/solver_states.json (recorded with nnabla)."""
import json
from pathlib import Path

import numpy as np
import pytest

import dpnb as nn
import dpnb.solvers as S
from dpnb.errors import DpnbError
from dpnb.formats import nnabla_pb2

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "nnabla" / "solver_states.json")
                     .read_text())


def make_params(record, layout):
    """The recorded parameters: loose variables, or adjacent in flat storage (one run)."""
    initial = {n: np.array(v, dtype=np.float32) for n, v in record["initial"].items()}
    if layout == "loose":
        return {n: nn.Variable.from_numpy_array(v, need_grad=True) for n, v in initial.items()}
    for name, value in initial.items():
        nn.get_parameter_or_create(name, value.shape, value)
    return nn.get_parameters()


def set_grads(params, grads):
    for n, v in params.items():
        v.g = np.array(grads[n], dtype=np.float32)


def assert_close(params, expected):
    for n, v in params.items():
        np.testing.assert_allclose(v.d, np.array(expected[n]), rtol=2e-5, atol=1e-6, err_msg=n)


@pytest.mark.parametrize("layout", ["loose", "flat"])
@pytest.mark.parametrize("name", sorted(FIXTURE))
def test_hooked_steps_and_protobuf_states_match_nnabla(name, layout):
    record = FIXTURE[name]
    params = make_params(record, layout)
    solver = getattr(S, name)(**record["hyper"])
    solver.set_parameters(params)
    calls = {}

    def hook(label):
        return lambda: calls.__setitem__(label, calls.get(label, 0) + 1)

    for grads in record["grads"][:2]:
        set_grads(params, grads)
        solver.weight_decay(0.01, pre_hook=hook("decay_pre"), post_hook=hook("decay_post"))
        solver.scale_grad(0.5, pre_hook=hook("scale_pre"), post_hook=hook("scale_post"))
        solver.clip_grad_by_norm(1.0, pre_hook=hook("clip_pre"), post_hook=hook("clip_post"))
        assert not solver.check_inf_or_nan_grad(pre_hook=hook("check_pre"),
                                                post_hook=hook("check_post"))
        solver.update(update_pre_hook=hook("update_pre"), update_post_hook=hook("update_post"))
    assert calls == record["hook_calls"]
    assert_close(params, record["after_hooked_steps"])

    optimizer = nnabla_pb2.Optimizer()
    optimizer.name = "opt"
    solver.set_states_to_protobuf(optimizer)
    assert optimizer.solver.type == ""
    written = {n: {"t": s.t, "arrays": {k: (list(p.shape.dim), list(p.data))
                                        for k, p in s.state_parameter.items()}}
               for n, s in optimizer.solver.states.items()}
    assert sorted(written) == sorted(record["states"])
    for n, state in record["states"].items():
        assert written[n]["t"] == state["t"]
        assert sorted(written[n]["arrays"]) == sorted(state["arrays"])
        for k, array in state["arrays"].items():
            shape, data = written[n]["arrays"][k]
            assert shape == array["shape"]
            np.testing.assert_allclose(data, array["data"], rtol=2e-5, atol=1e-7)

    fresh = getattr(S, name)(**record["hyper"])
    fresh.set_parameters(params)
    fresh.set_states_from_protobuf(optimizer)
    set_grads(params, record["grads"][2])
    fresh.update()
    assert_close(params, record["after_restored_update"])


def test_check_hooks_stop_after_the_first_bad_gradient():
    params = {n: nn.Variable.from_numpy_array(np.ones(3), need_grad=True) for n in "abc"}
    solver = S.Sgd()
    solver.set_parameters(params)
    params["b"].g[1] = np.inf
    log = []
    assert solver.check_inf_grad(pre_hook=lambda: log.append("pre"),
                                 post_hook=lambda: log.append("post"))
    assert log == ["pre", "post", "pre", "post"]  # a, then b (found), as nnabla stops
    assert not solver.check_nan_grad(pre_hook=lambda: log.append("nan"))
    assert log.count("nan") == 3


def test_hooks_must_be_callables():
    solver = S.Sgd()
    solver.set_parameters({"a": nn.Variable.from_numpy_array(np.ones(2), need_grad=True)})
    with pytest.raises(DpnbError, match="update_pre_hook must be a callable.*got 3"):
        solver.update(update_pre_hook=3)
    with pytest.raises(DpnbError, match="post_hook must be a callable"):
        solver.scale_grad(2.0, post_hook="no")


def test_fused_weight_decay_calls_no_hooks():
    solver = S.AdamW()
    solver.set_parameters({"a": nn.Variable.from_numpy_array(np.ones(2), need_grad=True)})
    log = []
    solver.weight_decay(0.1, pre_hook=lambda: log.append("pre"))
    assert log == []


def trained(names=("a", "b")):
    params = {n: nn.Variable.from_numpy_array(np.arange(3.0) + i, need_grad=True)
              for i, n in enumerate(names)}
    solver = S.Momentum(lr=0.1)
    solver.set_parameters(params)
    for v in params.values():
        v.g = 1.0
    solver.update()
    return solver, params


def test_set_states_to_protobuf_keeps_other_entries_and_the_type():
    solver, _ = trained()
    optimizer = nnabla_pb2.Optimizer()
    optimizer.solver.type = "Momentum"
    optimizer.solver.states["other"].t = 9
    optimizer.solver.states["a"].t = 99
    optimizer.solver.states["a"].state_parameter["stale"].data.append(1.0)
    solver.set_states_to_protobuf(optimizer)
    assert optimizer.solver.type == "Momentum"
    assert sorted(optimizer.solver.states) == ["a", "b", "other"]
    assert optimizer.solver.states["other"].t == 9
    a = optimizer.solver.states["a"]
    assert a.t == 1 and sorted(a.state_parameter) == ["m"]
    np.testing.assert_allclose(a.state_parameter["m"].data, [0.1, 0.1, 0.1])


def test_set_states_from_protobuf_sets_what_it_holds_only():
    solver, params = trained()
    before = {n: s.pstate["m"].d.copy() for n, s in solver.get_states().items()}
    solver.set_states_from_protobuf(nnabla_pb2.Optimizer())  # nothing in it: nothing changes
    optimizer = nnabla_pb2.Optimizer()
    entry = optimizer.solver.states["b"]
    entry.t = 4
    entry.state_parameter["m"].shape.dim.append(3)
    entry.state_parameter["m"].data.extend([1.0, 2.0, 3.0])
    solver.set_states_from_protobuf(optimizer)
    states = solver.get_states()
    assert states["a"].t == 1 and states["b"].t == 4
    np.testing.assert_array_equal(states["a"].pstate["m"].d, before["a"])
    np.testing.assert_array_equal(states["b"].pstate["m"].d, [1.0, 2.0, 3.0])


def test_set_states_from_protobuf_refuses_what_does_not_fit():
    solver, _ = trained()
    with pytest.raises(DpnbError, match="expects an Optimizer message.*got NNablaProtoBuf"):
        solver.set_states_from_protobuf(nnabla_pb2.NNablaProtoBuf())
    with pytest.raises(DpnbError, match="expects an Optimizer message.*got str"):
        solver.set_states_to_protobuf("states.protobuf")
    optimizer = nnabla_pb2.Optimizer()
    optimizer.solver.states["z"].t = 1
    with pytest.raises(DpnbError, match=r"parameters it does not have: \['z'\]"):
        solver.set_states_from_protobuf(optimizer)
    optimizer = nnabla_pb2.Optimizer()
    optimizer.solver.states["a"].state_parameter["m"].shape.dim.append(3)
    optimizer.solver.states["a"].state_parameter["m"].data.append(1.0)
    with pytest.raises(DpnbError, match="has 1 values for a/m of shape"):
        solver.set_states_from_protobuf(optimizer)


def test_partial_set_states_keeps_the_other_states():
    solver, _ = trained()
    other, _ = trained(("a", "b"))
    states = solver.get_states()
    states["a"].t = 3
    other.set_states({"a": states["a"]})
    assert {n: s.t for n, s in other.get_states().items()} == {"a": 3, "b": 1}


def test_empty_set_parameters_clears_or_adds_nothing():
    solver, params = trained()
    solver.set_parameters({}, reset=False)
    assert list(solver.get_parameters()) == ["a", "b"]
    solver.set_parameters({})
    assert solver.get_parameters() == {}
    log = []
    solver.update(update_pre_hook=lambda: log.append("pre"))
    assert log == [] and not solver.check_inf_grad()


def test_global_solver_hooks_run_around_each_parameter_until_unset():
    import dpnb as nn
    import dpnb.solvers as S
    params = {"a": nn.Variable.from_numpy_array(np.ones(2), need_grad=True),
              "b": nn.Variable.from_numpy_array(np.ones(3), need_grad=True)}
    for p in params.values():
        p.g = 1.0
    solver = S.Sgd(0.5)
    solver.set_parameters(params)
    calls = []
    nn.set_solver_pre_hook("count", lambda: calls.append("global pre"))
    nn.set_solver_post_hook("count", lambda: calls.append("global post"))
    try:
        solver.update(update_pre_hook=lambda: calls.append("own pre"))
    finally:
        nn.unset_solver_pre_hook("count")
        nn.unset_solver_post_hook("count")
    assert calls == ["global pre", "own pre", "global post"] * 2
    np.testing.assert_allclose(params["a"].d, 0.5)
    solver.update()
    assert len(calls) == 6
    with pytest.raises(nn.DpnbError, match="no hook is set under 'count'"):
        nn.unset_solver_post_hook("count")
