"""The graph engine: define-and-run, eager mode, accumulation, buffers, errors."""
import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
from dpnb import DpnbError


def leaf(a, need_grad=True):
    return nn.Variable.from_numpy_array(np.asarray(a, dtype=np.float64), need_grad=need_grad)


def test_graph_is_defined_once_and_rerun_with_new_inputs():
    x = leaf(np.zeros(3))
    y = F.sum(F.mul2(x, x))
    for values in ([1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]):
        x.d = values
        y.forward()
        assert y.d == pytest.approx(np.sum(np.square(values)))
        x.g = 0
        y.backward()
        np.testing.assert_allclose(x.g, 2 * np.asarray(values))


def test_definition_does_not_compute_but_auto_forward_does():
    x = leaf([1.0, 2.0])
    y = F.mul_scalar(x, 3.0)
    assert y.shape == (2,)
    assert not y.data.allocated
    with nn.auto_forward():
        z = F.mul_scalar(x, 3.0)
    np.testing.assert_allclose(z.d, [3.0, 6.0])
    assert not nn.get_auto_forward()


def test_leaf_gradients_accumulate_across_backward_calls():
    x = leaf([1.0, -2.0])
    y = F.sum(F.mul_scalar(x, 5.0))
    y.forward()
    y.backward()
    y.backward()
    np.testing.assert_allclose(x.g, [10.0, 10.0])


def test_intermediate_gradients_are_those_of_the_last_call():
    x = leaf([1.0, 2.0])
    h = F.mul_scalar(x, 2.0)
    y = F.sum(F.mul2(h, h))
    y.forward()
    y.backward()
    y.backward()
    np.testing.assert_allclose(h.g, 2 * h.d)


def test_a_variable_used_twice_gets_both_gradients():
    x = leaf([3.0])
    y = F.add2(F.mul2(x, x), x)
    y.forward()
    y.backward()
    np.testing.assert_allclose(x.g, [7.0])


def test_need_grad_false_leaves_get_no_gradient_and_frozen_branches_are_skipped():
    x = leaf([1.0, 2.0])
    c = leaf([4.0, 5.0], need_grad=False)
    y = F.sum(F.mul2(x, c))
    y.forward()
    y.backward()
    np.testing.assert_allclose(x.g, [4.0, 5.0])
    assert not c.grad.allocated
    x.need_grad = False
    x.g = 0
    y.backward()
    np.testing.assert_allclose(x.g, [0.0, 0.0])


def test_backward_on_a_non_scalar_seeds_ones_and_grad_arrays_broadcast():
    x = leaf([1.0, 2.0])
    y = F.mul_scalar(x, 2.0)
    y.forward()
    y.backward()
    np.testing.assert_allclose(x.g, [2.0, 2.0])
    x.g = 0
    y.backward(np.array([1.0, 10.0]))
    np.testing.assert_allclose(x.g, [2.0, 20.0])
    x.g = 0
    y.backward(nn.NdArray.from_numpy_array(np.array([3.0, -1.0])))
    np.testing.assert_allclose(x.g, [6.0, -2.0])
    np.testing.assert_allclose(y.g, [0.0, 0.0])  # the root's own gradient is left alone
    with pytest.raises(DpnbError, match=r"shape \(2,\), got shape \(3,\)"):
        y.backward(np.ones(3))


def test_clear_buffer_frees_intermediates_and_reading_them_says_why():
    x = leaf([1.0, 2.0])
    h = F.mul_scalar(x, 2.0)
    kept = F.add_scalar(h, 1.0)
    kept.persistent = True
    y = F.sum(kept)
    y.forward(clear_buffer=True)
    assert y.d == pytest.approx(8.0)
    np.testing.assert_allclose(kept.d, [3.0, 5.0])
    with pytest.raises(DpnbError, match=r"freed by forward\(clear_buffer=True\)"):
        h.d
    y.forward()
    np.testing.assert_allclose(h.d, [2.0, 4.0])


def test_clear_no_need_grad_keeps_what_backward_reads():
    x = leaf([1.0, 2.0])
    h = F.mul_scalar(x, 2.0)      # backward of mul_scalar does not read h
    y = F.sum(F.mul2(h, h))       # but mul2's backward reads h
    y.forward(clear_no_need_grad=True)
    y.backward()
    np.testing.assert_allclose(x.g, 8 * np.array([1.0, 2.0]))


def test_reading_what_clear_no_need_grad_freed_names_that_flag():
    x = leaf([1.0, 2.0])
    h = F.mul_scalar(x, 2.0)      # add_scalar's backward does not read h
    y = F.sum(F.add_scalar(h, 1.0))
    y.forward(clear_no_need_grad=True)
    with pytest.raises(DpnbError, match=r"freed by forward\(clear_no_need_grad=True\)"):
        h.d


def test_backward_clear_buffer_frees_intermediate_gradients():
    x = leaf([1.0, 2.0])
    h = F.mul_scalar(x, 2.0)
    y = F.sum(F.mul2(h, h))
    y.forward()
    y.backward(clear_buffer=True)
    np.testing.assert_allclose(x.g, 8 * np.array([1.0, 2.0]))
    with pytest.raises(DpnbError, match=r"freed by backward\(clear_buffer=True\)"):
        h.d


def test_unlinked_shares_arrays_but_cuts_the_graph():
    x = leaf([1.0, 2.0])
    h = F.mul_scalar(x, 2.0)
    h.forward()
    u = h.unlinked()
    assert u.parent is None and u.d is h.d
    y = F.sum(F.mul2(u, u))
    u.need_grad = True
    y.forward()
    y.backward()
    np.testing.assert_allclose(u.g, 2 * h.d)
    assert not x.grad.allocated


def test_assignment_copies_with_a_cast_and_checks_the_shape():
    x = nn.Variable((2, 3))
    view = x.d
    x.d = np.arange(6, dtype=np.int64).reshape(2, 3)
    assert x.d is view and x.d.dtype == np.float32
    x.d[...] = 7
    assert float(x.d.sum()) == 42.0
    with pytest.raises(DpnbError, match=r"shape \(3, 2\).*shape \(2, 3\)"):
        x.d = np.zeros((3, 2))
    with pytest.raises(DpnbError, match=r"shape \(6,\)"):
        x.g = np.zeros(6)
    x.g = 1.5
    assert float(x.g.sum()) == 9.0


@pytest.mark.parametrize("value, error, match", [
    ("abc", TypeError, r"cannot assign 'abc' \(str\) to .*expected numbers"),
    (None, TypeError, r"cannot assign None \(NoneType\)"),
    ([[1, 2], [3]], ValueError, r"not a rectangular array of numbers.*shape \(2, 2\)"),
])
def test_assigning_what_is_not_numbers_says_so(value, error, match):
    x = nn.Variable((2, 2))
    x.d = 5
    with pytest.raises(error, match=match):
        x.d = value
    assert (x.d == 5).all()


@pytest.mark.parametrize("shape, match", [
    ((2.5, 2), r"whole numbers, got 2\.5 at axis 0"),
    (("a", 2), r"whole numbers, got 'a' at axis 0"),
    (None, r"an int or a sequence of ints, got None"),
])
def test_a_shape_of_what_is_not_whole_numbers_is_refused(shape, match):
    with pytest.raises(TypeError, match=match):
        nn.Variable(shape)
    assert nn.Variable((2.0, np.int64(3))).shape == (2, 3)


def test_ndarray_handles():
    x = nn.Variable((2, 2))
    x.data.fill(3)
    assert x.data.shape == (2, 2) and x.data.dtype == np.float32
    assert float(x.d.sum()) == 12.0
    x.data.zero()
    assert float(x.d.sum()) == 0.0


def test_definition_errors_name_the_function_and_shapes():
    a, b = leaf(np.zeros((2, 3))), leaf(np.zeros((4, 3)))
    with pytest.raises(DpnbError, match=r"Add2.*\(2, 3\).*\(4, 3\)"):
        F.add2(a, b)
    with pytest.raises(DpnbError, match="nn.Variable"):
        F.add2(a, np.zeros((2, 3)))


def test_operators_build_graph_nodes():
    x = leaf([2.0, 4.0])
    y = F.sum((x * x + 1.0) / 2.0 - x)
    y.forward()
    assert y.d == pytest.approx(((4 + 1) / 2 - 2) + ((16 + 1) / 2 - 4))
    y.backward()
    np.testing.assert_allclose(x.g, x.d - 1.0)


def test_long_chains_do_not_hit_the_recursion_limit():
    x = leaf([1.0])
    h = x
    for _ in range(3000):
        h = F.add_scalar(h, 1.0)
    h.forward()
    h.backward()
    assert h.d[0] == 3001.0 and x.g[0] == 1.0


def test_a_leaf_need_grad_changed_between_runs_is_honoured():
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0], need_grad=False)
    y = F.sum(F.mul2(x, w))
    y.forward()
    y.backward()
    np.testing.assert_allclose(x.g, [3.0, 4.0])
    assert not w.grad.allocated
    w.need_grad, x.need_grad = True, False
    x.g = 0
    y.forward()
    y.backward()
    np.testing.assert_allclose(w.g, [1.0, 2.0])
    np.testing.assert_allclose(x.g, [0.0, 0.0])
    w.need_grad = False
    calls = []
    y.backward(function_pre_hook=lambda f: calls.append(f.name))
    assert calls == [] and np.all(w.g == [1.0, 2.0])


def test_more_graph_on_top_of_a_cached_root():
    x = leaf([1.0, 2.0])
    h = F.mul_scalar(x, 2.0)
    h.forward()
    h.backward(np.ones(2))
    np.testing.assert_allclose(x.g, [2.0, 2.0])
    y = F.sum(F.mul2(h, h))
    x.d = [3.0, 4.0]
    x.g = 0
    y.forward()
    y.backward()
    np.testing.assert_allclose(y.d, 4 * (9 + 16))
    np.testing.assert_allclose(x.g, 8 * np.array([3.0, 4.0]))
    x.g = 0
    h.forward()
    h.backward(np.ones(2))
    np.testing.assert_allclose(x.g, [2.0, 2.0])


def test_reset_shape_after_a_cached_run_sets_the_graph_up_again():
    x = leaf(np.arange(6.0))
    y = F.sum(F.mul_scalar(x, 2.0), axis=0)
    y.forward()
    assert y.shape == () and float(y.d) == 30.0
    x.reset_shape((2, 3))
    y.forward()
    assert y.shape == (3,)
    np.testing.assert_allclose(y.d, [6.0, 10.0, 14.0])
    y.backward()
    np.testing.assert_allclose(x.g, np.full((2, 3), 2.0))


def test_cutting_a_parent_is_seen_by_a_cached_schedule():
    x = leaf([1.0, 2.0])
    h = F.mul_scalar(x, 2.0)
    y = F.add_scalar(h, 1.0)
    y.forward()
    np.testing.assert_allclose(y.d, [3.0, 5.0])
    h.parent = None  # h becomes a leaf holding its last value
    x.d = [10.0, 20.0]
    h.need_grad = True
    y.forward()
    np.testing.assert_allclose(y.d, [3.0, 5.0])
    y.backward(np.ones(2))
    np.testing.assert_allclose(h.g, [1.0, 1.0])
    assert not x.grad.allocated
    with pytest.raises(DpnbError, match="parent must be None or a Function"):
        h.parent = y.parent


def test_clear_no_need_grad_follows_need_grad_changes():
    x, w = leaf([1.0, 2.0], need_grad=False), leaf([3.0, 4.0], need_grad=False)
    h = F.mul_scalar(x, 2.0)
    y = F.sum(F.mul2(h, w))
    y.forward(clear_no_need_grad=True)
    with pytest.raises(DpnbError, match="freed"):
        h.d  # nothing needs a gradient: backward reads nothing
    w.need_grad = True
    y.forward(clear_no_need_grad=True)
    y.backward()
    np.testing.assert_allclose(w.g, [2.0, 4.0])


def test_hooks_with_clear_buffer_and_callbacks_in_order():
    x = leaf([1.0, 2.0])
    y = F.sum(F.mul_scalar(x, 2.0))
    events = []

    class Callback:
        def on_finish_function_backward(self, fn):
            events.append(("callback", fn.name))

        def on_finish(self):
            events.append(("finish",))

    y.forward(clear_buffer=True, function_post_hook=lambda f: events.append(("fwd", f.name)))
    y.backward(clear_buffer=True, communicator_callbacks=Callback(),
               function_post_hook=lambda f: events.append(("post", f.name)))
    assert events == [("fwd", "MulScalar"), ("fwd", "Sum"), ("post", "Sum"), ("callback", "Sum"),
                      ("post", "MulScalar"), ("callback", "MulScalar"), ("finish",)]
    np.testing.assert_allclose(x.g, [2.0, 2.0])


def test_function_outputs_are_arrays_even_from_numpy_reductions():
    y = F.mean(leaf([1.0, 2.0]))
    y.forward()
    assert isinstance(y.d, np.ndarray) and y.d.shape == ()
    y.d[...] = 7.0
    assert float(y.d) == 7.0


def test_pinned_parameter_arrays_refuse_type_and_size_changes():
    nn.clear_parameters()
    w = nn.get_parameter_or_create("w", (2, 3))
    with pytest.raises(DpnbError, match="flat parameter storage"):
        w.data.cast(np.float64)
    with pytest.raises(DpnbError, match="flat parameter storage"):
        w.reset_shape((4,), force=True)
    w.reset_shape((3, 2))
    assert w.d.shape == (3, 2) and w.data.dtype == np.float32
    nn.clear_parameters()


def test_data_and_grad_setters_copy_values():
    x = nn.Variable((2,))
    view = x.d
    x.data = nn.NdArray.from_numpy_array(np.array([4.0, 5.0]))
    x.grad = np.array([1.0, 2.0])
    assert x.d is view and x.d.tolist() == [4.0, 5.0] and x.g.tolist() == [1.0, 2.0]


def test_function_backward_with_fewer_accum_flags_accumulates_the_rest():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    y = F.mul2(a, b)
    y.g = 1.0
    a.g, b.g = 10.0, 10.0
    y.parent.backward([a, b], [y], [False])
    np.testing.assert_array_equal(a.g, [3.0, 4.0])      # written over
    np.testing.assert_array_equal(b.g, [11.0, 12.0])    # added to


def test_clear_all_graph_links_leaves_every_variable_a_leaf_with_its_data():
    x = leaf([1.0, 2.0])
    h = F.mul_scalar(x, 2.0)
    loss = F.sum(F.sin(h))
    loss.forward()
    loss.clear_all_graph_links()
    assert h.parent is None and loss.parent is None and x.function_references == []
    np.testing.assert_allclose(h.d, [2.0, 4.0])
    y = F.sum(h)                   # a graph built on h now starts there
    y.forward()
    y.backward()
    assert y.d == pytest.approx(6.0) and not x.g.any()


def test_rewire_on_joins_a_graph_built_before_onto_another():
    xa = nn.Variable.from_numpy_array(np.array([0.1, 0.7]), need_grad=True)
    ya = F.sin(xa)
    xb = nn.Variable((2,), need_grad=True)
    yb = F.mul_scalar(F.exp(xb), 2.0)  # built on xb before the rewiring
    xb.rewire_on(ya)
    yb.forward()
    np.testing.assert_allclose(yb.d, 2 * np.exp(np.sin(xa.d)))
    xa.grad.zero()
    yb.backward()
    np.testing.assert_allclose(xa.g, 2 * np.exp(np.sin(xa.d)) * np.cos(xa.d))


def test_rewire_on_refuses_what_it_cannot_replace():
    x = leaf([1.0, 2.0])
    with pytest.raises(DpnbError, match=r"rewire_on: this variable's shape \(3,\) differs "
                                        r"from \(2,\)"):
        nn.Variable((3,)).rewire_on(F.sin(x))
    with pytest.raises(DpnbError, match="rewire_on expects an nn.Variable, got ndarray"):
        nn.Variable((2,)).rewire_on(np.zeros(2))


def test_narrow_shares_rows_and_refuses_what_nnabla_cannot_narrow():
    a = nn.NdArray.from_numpy_array(np.arange(12.0).reshape(4, 3))
    b = a.narrow(0, 1, 2)
    b.fill(-1.0)
    np.testing.assert_array_equal(a.data[1:3], -1.0)
    np.testing.assert_array_equal(a.data[[0, 3]], [[0, 1, 2], [9, 10, 11]])
    with pytest.raises(DpnbError, match="narrow: only axis 0 can be narrowed"):
        a.narrow(1, 0, 1)
    with pytest.raises(DpnbError, match=r"narrow: rows 3 to 5 are outside axis 0 of shape \(4, 3\)"):
        a.narrow(0, 3, 2)
    # casting would move the rows out of a's memory: refused, as nnabla refuses it (RuntimeError)
    with pytest.raises(RuntimeError, match="cannot cast rows 1:3 of an array from float64 to "
                                           "float16: it is narrowed from another array"):
        b.cast(np.float16)
    with pytest.raises(RuntimeError, match="narrowed from another array"):
        b.view((6,)).cast(np.float32)
    assert b.cast(np.float64) is b.data and b.dtype == np.float64  # the same type: nothing to do


def test_function_info_names_the_type_and_its_nnabla_arguments():
    x = nn.Variable((2, 3))
    y = F.mul_scalar(F.softplus(x, beta=2.0), 0.5)
    assert y.parent.info == ("MulScalar", {"val": 0.5, "inplace": False})
    assert y.parent.inputs[0].parent.info.type_name == "SoftPlus"
    assert y.parent.inputs[0].parent.info.args == {"beta": 2.0}


def test_a_backward_post_hook_sees_the_gradients_of_the_functions_inputs():
    x = nn.Variable.from_numpy_array(np.array([1.0, 2.0]), need_grad=True)
    h = F.add_scalar(x, 1.0)
    y = F.mul_scalar(h, 0.5)
    y.forward()
    seen = {}
    y.backward(function_post_hook=lambda f: seen.setdefault(f.info.type_name,
                                                             f.inputs[0].g.copy()))
    np.testing.assert_allclose(seen["MulScalar"], [0.5, 0.5])  # h's, before AddScalar ran


def test_function_bases_patch_correlation_is_nnablas_raw_channel_last_function():
    rng = np.random.RandomState(0)
    a, b = rng.randn(1, 3, 4, 2), rng.randn(1, 3, 4, 2)
    with nn.auto_forward():
        y = nn.function_bases.patch_correlation(nn.Variable.from_numpy_array(a),
                                                nn.Variable.from_numpy_array(b))
    assert y.parent.name == "PatchCorrelation" and y.shape == (1, 3, 4, 1, 1)
    np.testing.assert_allclose(y.d[..., 0, 0], (a * b).sum(-1), rtol=1e-6)


def test_global_function_hooks_see_every_forward_and_backward_until_unset():
    x = nn.Variable.from_numpy_array(np.array([0.5, 1.5]), need_grad=True)
    y = F.exp(F.sin(x))
    seen = []
    nn.set_function_pre_hook("names", lambda f: seen.append(("pre", f.name)))
    nn.set_function_post_hook("values", lambda f: seen.append(("post", f.outputs[0].d.sum())))
    try:
        y.forward(function_pre_hook=lambda f: seen.append(("own", f.name)))
        y.backward()
        with nn.auto_forward():
            F.cos(x)
    finally:
        nn.unset_function_pre_hook("names")
        nn.unset_function_post_hook("values")
    s = np.sin(x.d)
    assert seen == [("pre", "Sin"), ("own", "Sin"), ("post", s.sum()),
                    ("pre", "Exp"), ("own", "Exp"), ("post", np.exp(s).sum()),
                    ("pre", "Exp"), ("post", np.exp(s).sum()), ("pre", "Sin"), ("post", s.sum()),
                    ("pre", "Cos"), ("post", np.cos(x.d).sum())]
    y.forward()
    assert len(seen) == 12
    with pytest.raises(DpnbError, match="no hook is set under 'names'"):
        nn.unset_function_pre_hook("names")


def test_a_variable_is_true_whatever_its_shape():
    assert nn.Variable(()) and nn.Variable((0, 3)) and nn.Variable((2,))
    assert len(nn.Variable((2, 3))) == 2


def test_ndarray_view_shares_memory_in_another_shape():
    a = nn.NdArray.from_numpy_array(np.arange(6.0))
    v = a.narrow(0, 0, 6).view((2, 3))
    v.data[1, 0] = 100.0
    np.testing.assert_array_equal(a.data, [0, 1, 2, 100, 4, 5])
    with pytest.raises(DpnbError, match=r"view: shape \(4,\) holds 4 elements"):
        a.view((4,))


def test_ndarray_zeroing_lasts_until_the_values_are_used():
    # the sequence nnabla 1.39's test_nd_array_narrow_zeroing checks on the real nnabla
    a = nn.NdArray(3)
    assert not a.zeroing
    a.zero()
    assert a.zeroing
    a.get_data("r")
    assert a.zeroing
    for use in (lambda: a.fill(3), lambda: a.cast(np.float16), lambda: a.get_data("rw"),
                lambda: a.data):
        a.zero()
        use()
        assert not a.zeroing
    x = nn.Variable.from_numpy_array(np.array([1.0, 2.0]), need_grad=True)
    y = F.sin(x)
    y.forward()
    x.grad.zero()
    y.backward()
    assert not x.grad.zeroing
    np.testing.assert_allclose(x.g, np.cos([1.0, 2.0]))
