"""Variables, NdArrays and graph passes behave as nnabla 1.39's, checked against
tests/fixtures/nnabla/graph.json (written by record_graph.py with the real nnabla)."""
import gc
import json
from pathlib import Path

import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
from dpnb import DpnbError

REC = json.loads((Path(__file__).parent / "fixtures" / "nnabla" / "graph.json").read_text())


def leaf(values, need_grad=True):
    return nn.Variable.from_numpy_array(np.asarray(values, np.float32), need_grad=need_grad)


def doubled():
    x = leaf([1.0, 2.0, 3.0])
    y = F.mul_scalar(x, 2.0)
    y.forward()
    return x, y


def test_backward_seeds():
    rec = REC["backward"]
    x, y = doubled()
    y.backward()
    np.testing.assert_allclose(x.g, rec["default_on_non_scalar"]["x_g"])
    np.testing.assert_allclose(y.g, rec["default_on_non_scalar"]["y_g"])

    x, y = doubled()
    y.g = np.array(rec["none_uses_y_g"]["y_g_set"])
    y.backward(grad=None)
    np.testing.assert_allclose(x.g, rec["none_uses_y_g"]["x_g"])
    np.testing.assert_allclose(y.g, rec["none_uses_y_g"]["y_g"])

    x, y = doubled()
    y.g = rec["scalar_leaves_y_g"]["y_g_set"]
    y.backward(grad=rec["scalar_leaves_y_g"]["grad"])
    np.testing.assert_allclose(x.g, rec["scalar_leaves_y_g"]["x_g"])
    np.testing.assert_allclose(y.g, rec["scalar_leaves_y_g"]["y_g"])

    x, y = doubled()
    y.backward(grad=np.array(rec["array"]["grad"]))
    np.testing.assert_allclose(x.g, rec["array"]["x_g"])
    np.testing.assert_allclose(y.g, rec["array"]["y_g"])

    x, y = doubled()
    y.backward(grad=nn.NdArray.from_numpy_array(np.array(rec["ndarray"]["grad"])))
    np.testing.assert_allclose(x.g, rec["ndarray"]["x_g"])

    x = leaf([1.0, 2.0, 3.0])
    h = F.mul_scalar(x, 2.0)
    y = F.sum(h)
    y.forward()
    y.backward()
    y.backward()
    np.testing.assert_allclose(x.g, rec["twice"]["x_g"])
    np.testing.assert_allclose(h.g, rec["twice"]["h_g"])
    np.testing.assert_allclose(y.g, rec["twice"]["y_g"])


def test_backward_from_a_leaf_is_an_error():
    assert REC["backward"]["leaf_raises"]
    with pytest.raises(DpnbError, match="leaf"):
        leaf([1.0, 2.0]).backward()


def test_hooks_see_each_function_that_runs():
    rec = REC["hooks"]
    x = leaf([1.0, 2.0, 3.0])
    h = F.mul_scalar(x, 2.0)
    c = leaf([1.0, 1.0, 1.0], need_grad=False)
    y = F.sum(F.add2(h, F.add2(c, c)))
    calls = []
    y.forward(function_pre_hook=lambda f: calls.append(["pre", f.name]),
              function_post_hook=lambda f: calls.append(["post", f.name]))
    assert calls == rec["forward"]
    calls = []
    y.backward(function_pre_hook=lambda f: calls.append(["pre", f.name]),
               function_post_hook=lambda f: calls.append(["post", f.name]))
    assert calls == rec["backward"]
    np.testing.assert_allclose(x.g, rec["x_g"])
    frozen = F.sum(F.mul_scalar(leaf([1.0, 2.0], need_grad=False), 2.0))
    frozen.forward()
    calls = []
    frozen.backward(function_pre_hook=lambda f: calls.append(f.name))
    assert calls == rec["backward_no_grad"]


def test_hooks_get_the_function_objects_around_their_run():
    x = leaf([1.0, 2.0])
    y = F.mul_scalar(x, 3.0)
    seen = []
    y.forward(function_pre_hook=lambda f: seen.append((f, f.outputs[0].data.allocated)),
              function_post_hook=lambda f: seen.append((f, float(f.outputs[0].d.sum()))))
    assert seen == [(y.parent, False), (y.parent, 9.0)]


@pytest.mark.parametrize("name", ["mean", "sum", "max"])
def test_reductions_give_writable_zero_d_arrays(name):
    rec = REC["outputs"][name]
    y = getattr(F, name)(leaf([[1.0, 2.0], [3.0, 4.0]]))
    y.forward()
    assert type(y.d).__name__ == rec["type"] and list(y.d.shape) == rec["shape"]
    assert y.d.flags.writeable == rec["writeable"] and float(y.d) == rec["value"]
    y.d[...] = 5.0
    assert float(y.d) == 5.0


def test_reshape_is_linked_and_shares_data():
    rec = REC["variable"]["reshape"]
    x = leaf(np.arange(6).reshape(2, 3))
    y = x.reshape((3, 2))
    x.d[0, 0] = 100
    z = F.sum(F.mul2(y, y))
    z.forward()
    z.backward()
    assert y.parent.name == rec["parent"] and y.parent.inplace == rec["inplace"]
    assert y.need_grad == rec["need_grad"]
    assert np.shares_memory(y.d, x.d) == rec["shares_data"]
    assert np.shares_memory(y.g, x.g) == rec["shares_grad"]
    np.testing.assert_allclose(y.d[0], rec["y_d_row0"])
    np.testing.assert_allclose(x.g, rec["x_g"])


def test_reshape_unlinked_shares_data_and_gradient():
    rec = REC["variable"]
    x = leaf(np.arange(6).reshape(2, 3))
    u = x.reshape((6,), unlink=True)
    assert (u.parent is None) == rec["reshape_unlink"]["parent_is_none"]
    assert u.need_grad == rec["reshape_unlink"]["need_grad"]
    assert np.shares_memory(u.d, x.d) == rec["reshape_unlink"]["shares_data"]
    assert np.shares_memory(u.g, x.g) == rec["reshape_unlink"]["shares_grad"]
    frozen = leaf(np.arange(6), need_grad=False)
    assert [frozen.reshape((2, 3)).need_grad,
            frozen.reshape((2, 3), unlink=True).need_grad] == rec["reshape_need_grad_false"]
    with pytest.raises(DpnbError, match=r"\(6,\) \(6 elements\) to \(4,\)"):
        frozen.reshape((4,), unlink=True)


def test_reset_shape():
    rec = REC["variable"]["reset_shape"]
    v = leaf(np.arange(6))
    v.reset_shape((2, 3))
    assert list(v.shape) == rec["same_size"]["shape"]
    np.testing.assert_array_equal(v.d, rec["same_size"]["d"])
    assert rec["other_size_raises"]
    with pytest.raises(DpnbError, match=r"from \(2, 3\) \(6 elements\) to \(4,\).*force=True"):
        v.reset_shape((4,))
    v.reset_shape((4,), force=True)
    assert list(v.shape) == rec["forced"]["shape"] and v.g.shape == (4,)
    np.testing.assert_array_equal(v.d, rec["forced"]["d"])

    v = leaf(np.arange(6))
    w = F.mul_scalar(v, 2.0)
    v.reset_shape((2, 3))
    assert list(w.shape) == rec["downstream_before_forward"]
    w.forward()
    assert list(w.shape) == rec["downstream_after_forward"]
    np.testing.assert_array_equal(w.d, rec["downstream_d"])


def test_unlinked_variables():
    rec = REC["variable"]["unlinked"]
    h = F.mul_scalar(leaf([1.0, 2.0]), 2.0)
    h.name, h.info, h.persistent = "h", {"tag": 1}, True
    u1, u2 = h.get_unlinked_variable(), h.get_unlinked_variable(need_grad=False)
    assert [u1.parent is None, u2.parent is None] == rec["parent_is_none"]
    assert [u1.need_grad, u2.need_grad, h.need_grad] == rec["need_grad"]
    assert u1.name == rec["name"] and (u1.info is None) == rec["info_is_none"]
    assert u1.persistent == rec["persistent"]
    assert h.unlinked(need_grad=False).need_grad == rec["deprecated_alias_need_grad"]
    h.forward()
    assert u1.d is h.d and u1.grad is h.grad


def test_apply_name_info_defaults():
    rec = REC["variable"]
    a = leaf([1.0])
    r = a.apply(persistent=True, need_grad=False, name="a")
    assert [r is a, a.persistent, a.need_grad, a.name] == [
        rec["apply"]["returns_self"], rec["apply"]["persistent"], rec["apply"]["need_grad"],
        rec["apply"]["name"]]
    fresh = nn.Variable((2, 3))
    assert fresh.name == rec["defaults"]["name"]
    assert (fresh.info is None) == rec["defaults"]["info_is_none"]
    fresh.info = {"k": 1}
    assert fresh.info == {"k": 1}
    with pytest.raises(DpnbError, match="'colour' is not a settable attribute"):
        a.apply(colour="red")


def test_rank_function_references_size_from_axis():
    rec = REC["variable"]
    x = leaf([1.0, 2.0])
    h = F.mul_scalar(x, 2.0)
    h2 = F.add2(h, x)
    h3 = F.add2(F.mul_scalar(h2, 1.0), h)
    assert [x.rank, h.rank, h2.rank, h3.rank] == rec["rank"]
    refs = rec["function_references"]
    assert [f.name for f in x.function_references] == refs["x"]
    assert [f.name for f in h.function_references] == refs["h"]
    assert [f.name for f in h3.function_references] == refs["h3"]
    t = nn.Variable((2, 3, 4))
    assert {str(a): t.size_from_axis(a) for a in (-2, -1, 0, 1, 2, 3)} == rec["size_from_axis"]
    assert t.size_from_axis() == rec["size_from_axis_default"]


def test_visit_in_forward_order():
    rec = REC["variable"]["visit"]
    x = leaf([1.0, 2.0])
    out = F.add2(F.mul_scalar(x, 2.0), F.identity(x))
    names = []
    assert (out.visit(lambda f: names.append(f.name)) is None) == rec["returns_none"]
    assert names == rec["names"]
    checked = []
    assert out.visit_check(lambda f: checked.append(f.name) or f.name == "Identity") == rec["found"]
    assert checked == rec["check_names"]
    results = {"false": False, "none": None, "zero": 0, "one": 1}
    assert {key: repr(out.visit_check(lambda f, r=r: r))
            for key, r in results.items()} == rec["unfound"]
    last = out.visit_check(lambda f: None if f.name == "Add2" else False)
    assert repr(last) == rec["last_result"]


def test_function_references_are_weak():
    x = leaf([1.0])
    kept = F.mul_scalar(x, 2.0)
    F.add_scalar(x, 1.0)  # its output is dropped at once, and with it the function
    gc.collect()  # a function and its outputs refer to each other
    assert x.function_references == [kept.parent]


def test_sink():
    rec = REC["sink"]
    x = leaf([1.0, 2.0, 3.0])
    a = F.mul_scalar(x, 2.0)
    b = F.sum(F.mul2(x, x))
    s = F.sink(a, b)
    s.forward()
    s.backward()
    ones = rec["ones"]
    assert list(s.shape) == ones["shape"] and s.need_grad == ones["need_grad"]
    assert s.parent.name == ones["parent"]
    np.testing.assert_allclose(a.d, ones["a_d"])
    assert float(b.d) == ones["b_d"]
    np.testing.assert_allclose(x.g, ones["x_g"])
    np.testing.assert_allclose(a.g, ones["a_g"])
    assert float(b.g) == ones["b_g"]

    x.g = 0
    a.g = np.array(rec["held"]["a_g"])
    b.g = rec["held"]["b_g"]
    s2 = F.sink(a, b, one_input_grad=False)
    s2.forward()
    s2.backward()
    np.testing.assert_allclose(x.g, rec["held"]["x_g"])

    x = leaf([1.0, 2.0, 3.0])
    both = F.sink(F.mean(x), F.sum(F.mul2(x, x)))
    both.forward()
    both.backward()
    np.testing.assert_allclose(x.g, rec["two_losses_x_g"], rtol=1e-6)
    frozen = F.sink(F.mul_scalar(leaf([1.0], need_grad=False), 2.0))
    assert frozen.need_grad == rec["no_grad_input_need_grad"]


def test_sink_needs_inputs():
    with pytest.raises(DpnbError, match="Sink: needs at least one input"):
        F.sink()


def test_no_grad():
    rec = REC["no_grad_forward_all"]
    x = leaf([1.0, 2.0, 3.0])
    with nn.no_grad():
        h = F.mul_scalar(x, 2.0)
        with nn.auto_forward():
            e = F.mul_scalar(x, 2.0)
    y = F.sum(F.mul_scalar(h, 3.0))
    y.forward()
    y.backward()
    static, eager = rec["no_grad_static"], rec["no_grad_auto_forward"]
    assert [h.need_grad, h.parent is not None] == [static["need_grad"], static["has_parent"]]
    np.testing.assert_allclose(x.g, static["x_g"])
    assert [e.need_grad, e.parent is not None] == [eager["need_grad"], eager["has_parent"]]
    np.testing.assert_allclose(e.d, eager["d"])
    assert not nn.graph.get_no_grad()
    with nn.no_grad(), nn.no_grad(False), nn.auto_forward():
        assert F.mul_scalar(x, 2.0).parent is not None


def test_forward_all():
    rec = REC["no_grad_forward_all"]
    x = leaf([1.0, 2.0])
    h = F.mul_scalar(x, 2.0)
    a = F.add_scalar(h, 1.0)
    b = F.mul_scalar(h, 3.0)
    calls = []
    returned = nn.forward_all([a, b], function_pre_hook=lambda f: calls.append(f.name))
    shared = rec["forward_all"]
    assert (returned is None) == shared["returns_none"] and calls == shared["calls"]
    np.testing.assert_allclose(a.d, shared["a_d"])
    np.testing.assert_allclose(b.d, shared["b_d"])
    calls = []
    nn.forward_all((h, a), function_pre_hook=lambda f: calls.append(f.name))
    assert calls == rec["forward_all_upstream_calls"]
    assert rec["forward_all_single_raises"]
    with pytest.raises(DpnbError, match="list of nn.Variable"):
        nn.forward_all(a)


def test_forward_all_clear_buffer_keeps_the_given_variables():
    x = leaf([1.0, 2.0])
    h = F.mul_scalar(x, 2.0)
    a = F.add_scalar(h, 1.0)
    b = F.mul_scalar(a, 3.0)
    nn.forward_all([a, b], clear_buffer=True)
    np.testing.assert_allclose(a.d, [3.0, 5.0])
    np.testing.assert_allclose(b.d, [9.0, 15.0])
    with pytest.raises(DpnbError, match="freed by clear_buffer"):
        h.d


def test_ndarray():
    rec = REC["ndarray"]
    a = nn.NdArray((2, 3))
    assert {"shape": list(a.shape), "dtype": str(a.data.dtype), "size": a.size, "ndim": a.ndim,
            "size_from_axis_1": a.size_from_axis(1)} == rec["default"]
    assert list(nn.NdArray(3).shape) == rec["int_shape"]
    assert list(nn.NdArray().shape) == rec["no_shape"]
    src = np.arange(6).reshape(2, 3)
    b = nn.NdArray.from_numpy_array(src)
    src[0, 0] = 9
    assert str(b.dtype) == rec["from_numpy_array"]["dtype"]
    assert b.data.tolist() == rec["from_numpy_array"]["d"]
    c = nn.NdArray((2,))
    c.fill(3)
    assert c.data.tolist() == rec["fill_zero"]["filled"]
    c.zero()
    assert c.data.tolist() == rec["fill_zero"]["zeroed"]
    d = nn.NdArray.from_numpy_array(np.array([1.7, -2.2], np.float32))
    r = d.cast(np.int32)
    assert type(r).__name__ == rec["cast"]["returned_type"] and r.tolist() == rec["cast"]["values"]
    assert str(d.dtype) == rec["cast"]["dtype"] and d.data.dtype == np.int32
    e = nn.NdArray.from_numpy_array(np.array([1.0, 2.0], np.float32))
    g = rec["get_data"]
    assert e.get_data("r").flags.writeable == g["r_writeable"]
    assert e.get_data("rw").flags.writeable == g["rw_writeable"]
    assert str(e.get_data("r", dtype=np.float64).dtype) == g["dtype_arg"]
    assert str(e.dtype) == g["dtype_after"]
    f = nn.NdArray((2,))
    assert (f.copy_from(e) is f) == rec["copy_from"]["returns_self"]
    assert f.data.tolist() == rec["copy_from"]["d"]


def test_ndarray_errors_and_context():
    with pytest.raises(DpnbError, match="mode must be one of"):
        nn.NdArray((2,)).get_data("x")
    with pytest.raises(DpnbError, match="non-negative"):
        nn.NdArray((2, -1))
    with nn.context_scope(nn.Context(["cpu:double"])):
        assert nn.NdArray((1,)).dtype == np.float64
    with pytest.raises(DpnbError, match="expects an nn.NdArray"):
        nn.NdArray((2,)).copy_from(np.zeros(2))
