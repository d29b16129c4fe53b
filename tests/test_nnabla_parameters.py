"""dpnb's parameters, scopes, initializer formulas, parametric functions and
F.max/F.min indices against nnabla 1.39's, recorded by
tests/fixtures/nnabla/record_parameters.py."""
import ast
import inspect
import json
import os
from collections import OrderedDict

import numpy as np
import pytest

import dpnb as nn
import dpnb.communicators as C
import dpnb.functions as F
import dpnb.initializer as I
import dpnb.parameter as P
import dpnb.parametric_functions as PF
from dpnb.errors import DpnbError
from dpnb.graph import no_grad

with open(os.path.join(os.path.dirname(__file__), "fixtures", "nnabla", "parameters.json")) as f:
    NNABLA = json.load(f)


def names(grad_only=False):
    return list(nn.get_parameters(grad_only=grad_only))


def small_network(x):
    """The network of the recording script."""
    h = PF.convolution(x, 4, (3, 3), pad=(1, 1), name="c1")
    h = PF.batch_normalization(h, name="b1")
    h = PF.convolution(h, 4, (3, 3), pad=(1, 1))
    h = PF.batch_normalization(h)
    h = PF.convolution(h, 4, (1, 1), name="blk/c2", with_bias=False)
    h = PF.affine(h, 5, name="fc")
    return PF.affine(h, 3)


# -- names and scopes -------------------------------------------------------------

def test_parametric_functions_name_parameters_as_nnabla():
    expected = NNABLA["names"]
    x = nn.Variable((2, 3, 6, 6))
    small_network(x)
    assert names() == expected["network"]
    assert names(grad_only=True) == expected["network_grad_only"]
    nn.clear_parameters()
    with nn.parameter_scope("net"):
        small_network(x)
    assert names() == expected["network_in_scope"]


def test_sync_batch_normalization_uses_nnabla_s_scope_name():
    # the parameters exist before the (uninitialised) communicator is refused
    scope = NNABLA["names"]["scope_names"]["sync_batch_normalization"]
    comm = C.MultiProcessCommunicator(nn.Context())
    with pytest.raises(DpnbError, match=r"call comm.init\(\) first"):
        PF.sync_batch_normalization(nn.Variable((2, 3)), comm, name="s")
    assert names() == [f"s/{scope}/{k}" for k in ("beta", "gamma", "mean", "var")]


@pytest.mark.parametrize("scope", ["a/b", "/a/", "a//b", "", "/"])
def test_scopes_with_slashes(scope):
    expected = NNABLA["scopes"][scope]
    with nn.parameter_scope(scope):
        PF.affine(nn.Variable((2, 4)), 2)
        nn.get_parameter_or_create("p/q", (3,))
        assert names() == expected["inside"]
    assert names() == expected["outside"]


def build_scopes():
    """The scopes of the recording script: a/affine and a/b/f/affine."""
    x = nn.Variable((2, 4))
    with nn.parameter_scope("a") as a:
        PF.affine(x, 2)
        with nn.parameter_scope("b") as b:
            PF.affine(x, 2, name="f")
            current = nn.get_current_parameter_scope()
            inside = {"type": type(current).__name__, "keys": list(current),
                      "is_yielded": current is b, "is_child_of_a": a["b"] is b}
    return inside


def test_get_current_parameter_scope_returns_the_scope_dict():
    expected = NNABLA["scopes"]
    assert build_scopes() == expected["current_inside_b"]
    root = nn.get_current_parameter_scope()
    assert {"type": type(root).__name__, "keys": list(root),
            "affine_keys": list(root["a"]["affine"])} == expected["current_at_root"]


def test_get_parameters_path_and_params():
    expected = NNABLA["scopes"]["get_parameters"]
    build_scopes()
    assert names() == expected["default"]
    assert list(nn.get_parameters(path="zz")) == expected["path_zz"]
    with nn.parameter_scope("a"):
        assert list(nn.get_parameters(path="zz")) == expected["path_zz_in_a"]
    assert list(nn.get_parameters(params=OrderedDict(pre=None))) == expected["params_given"]
    given = OrderedDict()
    assert (nn.get_parameters(params=given) is given) is expected["params_is_returned"]


def test_clear_parameters_in_a_scope_and_a_given_scope_dict():
    expected = NNABLA["scopes"]
    build_scopes()
    with nn.parameter_scope("a"):
        nn.clear_parameters()
    assert {"names": names(), "root_keys": list(nn.get_current_parameter_scope())} == \
        expected["clear_in_scope_a"]
    nn.clear_parameters()
    local = OrderedDict()
    with nn.parameter_scope("loc", scope=local):
        PF.affine(nn.Variable((2, 4)), 2)
    assert {"global_names": names(), "local_keys": list(local),
            "local_inner": list(local["loc"]["affine"])} == expected["local_scope"]


# -- get_parameter_or_create ---------------------------------------------------------

def test_get_parameter_or_create_with_arrays_and_need_grad():
    expected = NNABLA["get_parameter_or_create"]
    p = P.get_parameter_or_create("arr", initializer=np.arange(6.0).reshape(2, 3))
    assert {"shape": list(p.shape), "need_grad": p.need_grad, "value": p.d.tolist()} == \
        expected["array_without_shape"]

    def registered():
        return nn.get_parameters(grad_only=False)["arr"]

    q = P.get_parameter_or_create("arr", (2, 3), need_grad=False)
    assert {"returned": q.need_grad, "registered": registered().need_grad,
            "in_grad_only": "arr" in nn.get_parameters()} == expected["regrab_need_grad_false"]
    r = P.get_parameter_or_create("arr", (2, 3), need_grad=True, as_need_grad=False)
    assert {"returned": r.need_grad, "registered": registered().need_grad,
            "same_object": r is registered(),
            "same_data": bool(np.shares_memory(r.d, registered().d))} == expected["as_need_grad_false"]
    u = P.get_parameter_or_create("s/t/u", (3,), I.ConstantInitializer(2))
    assert names() == expected["slash_name"]
    assert [p.name, u.name] == expected["returned_names"]
    with no_grad():
        g = P.get_parameter_or_create("arr", (2, 3), need_grad=True)
    assert {"returned": g.need_grad, "registered": registered().need_grad} == expected["in_no_grad"]


@pytest.mark.parametrize("label, call", [
    ("wrong_array_shape", lambda: P.get_parameter_or_create("w", (3,), np.zeros(2))),
    ("existing_other_shape", lambda: P.get_parameter_or_create("arr", (3, 3))),
    ("no_shape_no_initializer", lambda: P.get_parameter_or_create("none")),
    ("list_initializer", lambda: P.get_parameter_or_create("l", (2,), [1, 2])),
])
def test_get_parameter_or_create_refuses_what_nnabla_refuses(label, call):
    assert NNABLA["get_parameter_or_create"][label] is not None  # nnabla raised
    P.get_parameter_or_create("arr", initializer=np.zeros((2, 3)))
    with pytest.raises(DpnbError):
        call()


# -- initializers ----------------------------------------------------------------

@pytest.mark.parametrize("case", NNABLA["initializers"]["cases"], ids=lambda c: str(c["args"]))
def test_glorot_and_he_values_and_types(case):
    inmaps, outmaps, kernel = case["args"]
    lim = I.calc_uniform_lim_glorot(inmaps, outmaps, tuple(kernel))
    np.testing.assert_allclose(lim, case["uniform_lim_glorot"], rtol=1e-15)
    assert [type(lim).__name__] + [type(v).__name__ for v in lim] == case["uniform_lim_glorot_types"]
    for name in ("normal_std_glorot", "normal_std_he_forward", "normal_std_he_backward"):
        value = getattr(I, f"calc_{name}")(inmaps, outmaps, tuple(kernel))
        np.testing.assert_allclose(value, case[name], rtol=1e-15)
    assert [type(I.calc_normal_std_glorot(inmaps, outmaps, kernel)).__name__,
            type(I.calc_normal_std_he_forward(inmaps, outmaps, kernel)).__name__] == case["std_types"]
    np.testing.assert_allclose(I.calc_uniform_lim_glorot(4, 2), NNABLA["initializers"]["default_kernel"])


# -- F.max / F.min ----------------------------------------------------------------

@pytest.mark.parametrize("case", NNABLA["max_min"]["cases"],
                         ids=lambda c: f"{c['fn']}-{c['axis']}-{c['keepdims']}-{sorted(c['flags'])}")
def test_max_and_min_values_indices_and_gradients(case):
    x = nn.Variable.from_numpy_array(np.array(NNABLA["max_min"]["x"], dtype=np.float32), need_grad=True)
    axis = tuple(case["axis"]) if isinstance(case["axis"], list) else case["axis"]
    result = getattr(F, case["fn"])(x, axis=axis, keepdims=case["keepdims"], **case["flags"])
    outs = list(result) if isinstance(result, tuple) else [result]
    assert len(outs) == len(case["outputs"])
    for out, expected in zip(outs, case["outputs"]):
        out.forward()
        assert list(out.shape) == expected["shape"] and str(out.dtype) == expected["dtype"]
        assert out.need_grad == expected["need_grad"]
        np.testing.assert_array_equal(out.d, np.array(expected["value"], dtype=expected["dtype"]))
    if "grad" in case:
        x.grad.zero()
        outs[0].backward(np.ones(outs[0].shape))
        np.testing.assert_array_equal(x.g, case["grad"])


def test_gradient_through_only_index_as_nnabla():
    x = nn.Variable.from_numpy_array(np.array(NNABLA["max_min"]["x"], dtype=np.float32), need_grad=True)
    index = F.max(x, axis=1, only_index=True)
    index.forward()
    x.grad.zero()
    index.backward(np.ones(index.shape))
    np.testing.assert_array_equal(x.g, NNABLA["max_min"]["grad_through_index"])


# -- parametric functions with explicit initializers ----------------------------------

def test_affine_with_array_initializers_and_apply():
    rec = NNABLA["parametric"]
    arrays = rec["affine_arrays"]
    x = nn.Variable.from_numpy_array(np.array(arrays["x"], dtype=np.float32))
    w, b = np.array(arrays["w"]), np.array(arrays["b"])
    y = PF.affine(x, 3, w_init=w, b_init=b)
    y.forward()
    np.testing.assert_allclose(y.d, arrays["y"], rtol=1e-6)
    assert names() == arrays["names"]
    y = PF.affine(x, 3, w_init=w, b_init=b, apply_w=lambda v: v * 2, apply_b=lambda v: v - 1,
                  name="applied")
    y.forward()
    np.testing.assert_allclose(y.d, rec["affine_apply"]["y"], rtol=1e-6)
    np.testing.assert_allclose(nn.get_parameters()["applied/affine/W"].d, rec["affine_apply"]["W"],
                               rtol=1e-6)
    y = PF.affine(x, (2, 2), w_init=np.ones((6, 2, 2)) * 0.5, b_init=np.array([[0.0, 1], [2, 3]]),
                  name="multi")
    y.forward()
    assert list(y.shape) == rec["affine_multi_outmaps"]["shape"]
    np.testing.assert_allclose(y.d, rec["affine_multi_outmaps"]["y"], rtol=1e-6)
    assert rec["affine_wrong_array_shape"] is not None  # nnabla raised
    with pytest.raises(DpnbError, match=r"initializer of 'bad/affine/W' gave shape \(5, 3\), expected \(6, 3\)"):
        PF.affine(x, 3, w_init=np.zeros((5, 3)), name="bad")


def test_convolution_with_array_initializers_and_apply():
    rec = NNABLA["parametric"]
    arrays = rec["conv_arrays"]
    x = nn.Variable.from_numpy_array(np.array(arrays["x"], dtype=np.float32))
    w, b = np.array(arrays["w"]), np.array(arrays["b"])
    y = PF.convolution(x, 3, (3, 3), pad=(1, 1), w_init=w, b_init=b)
    y.forward()
    np.testing.assert_allclose(y.d, arrays["y"], rtol=1e-5, atol=1e-5)
    y = PF.convolution(x, 3, (3, 3), w_init=w, b_init=b, apply_w=lambda v: v * 0.5,
                       apply_b=lambda v: v + 1, name="applied")
    y.forward()
    np.testing.assert_allclose(y.d, rec["conv_apply"]["y"], rtol=1e-5, atol=1e-5)


def test_default_initial_weights_equal_nnabla_s_for_the_same_rng():
    x = nn.Variable((2, 2, 5, 5))
    PF.convolution(x, 4, (3, 3), rng=np.random.RandomState(0), name="c")
    PF.affine(x, 5, rng=np.random.RandomState(0), name="f")
    expected = NNABLA["parametric"]["default_init"]
    params = nn.get_parameters()
    assert list(params) == list(expected)
    for name, rec in expected.items():
        assert list(params[name].shape) == rec["shape"] and str(params[name].dtype) == rec["dtype"]
        np.testing.assert_array_equal(params[name].d, np.array(rec["value"], dtype=rec["dtype"]))


@pytest.mark.parametrize("label, axes", [("axes_1", 1), ("axes_1", [1]), ("axes_minus_1", -1),
                                         ("axes_minus_1", [-1]), ("axes_0_2", (0, 2))])
def test_batch_normalization_axes(label, axes):
    rec = NNABLA["parametric"]["batch_normalization"]
    x = nn.Variable.from_numpy_array(np.array(rec["x"], dtype=np.float32))
    y = PF.batch_normalization(x, axes=axes)
    y.forward()
    np.testing.assert_allclose(y.d, rec[label]["y"], rtol=1e-5, atol=1e-5)
    assert {k: list(v.shape) for k, v in nn.get_parameters(grad_only=False).items()} == \
        rec[label]["shapes"]


@pytest.mark.parametrize("axes", [5, [5], [1, 1], [1, -2], "1", 1.0, [], None])
def test_batch_normalization_refuses_bad_axes(axes):
    with pytest.raises(DpnbError, match="axes must be an int or a list of distinct ints in"):
        PF.batch_normalization(nn.Variable((4, 3, 2)), axes=axes)
    assert not names()


# -- signatures ------------------------------------------------------------------

DPNB_FUNCTIONS = {
    "PF.affine": PF.affine, "PF.convolution": PF.convolution,
    "PF.batch_normalization": PF.batch_normalization,
    "PF.sync_batch_normalization": PF.sync_batch_normalization,
    "F.max": F.max, "F.min": F.min, "parameter_scope": nn.parameter_scope,
    "get_parameters": nn.get_parameters, "get_parameter_or_create": P.get_parameter_or_create,
    "set_parameter": P.set_parameter, "get_parameter": P.get_parameter,
    "pop_parameter": P.pop_parameter, "clear_parameters": nn.clear_parameters,
    "get_current_parameter_scope": nn.get_current_parameter_scope,
    "save_parameters": nn.save_parameters, "load_parameters": nn.load_parameters,
    "I.calc_uniform_lim_glorot": I.calc_uniform_lim_glorot,
    "I.calc_normal_std_glorot": I.calc_normal_std_glorot,
    "I.calc_normal_std_he_forward": I.calc_normal_std_he_forward,
    "I.calc_normal_std_he_backward": I.calc_normal_std_he_backward,
}
def _default(value):
    """A default comparable across the two: sequences as lists."""
    return list(value) if isinstance(value, (list, tuple)) else value


@pytest.mark.parametrize("label", DPNB_FUNCTIONS)
def test_signatures_match_nnabla(label):
    ours = [(p.name, None if p.default is p.empty else _default(p.default))
            for p in inspect.signature(DPNB_FUNCTIONS[label]).parameters.values()]
    theirs = [(name, None if default is None else _default(ast.literal_eval(default)))
              for name, default in NNABLA["signatures"][label]]
    assert ours == theirs
