"""dpnb's parameters, scopes, initializer formulas, parametric functions and
F.max/F.min indices against nnabla 1.39's: the cases of tests/nnabla_cases/parameters.py,
recorded by tests/fixtures/nnabla/record_parameters.py."""
import ast
import inspect
import json
import os

import numpy as np
import pytest

import dpnb as nn
import dpnb.communicators as C
import dpnb.functions as F
import dpnb.initializer as I
import dpnb.parameter as P
import dpnb.parametric_functions as PF
from dpnb.errors import DpnbError
from nnabla_cases import assert_matches
from nnabla_cases import parameters as cases

with open(os.path.join(os.path.dirname(__file__), "fixtures", "nnabla", "parameters.json")) as f:
    NNABLA = json.load(f)


def names(grad_only=False):
    return cases.names(nn, grad_only)


# -- names and scopes -------------------------------------------------------------

def test_parametric_functions_name_parameters_as_nnabla():
    expected = {k: v for k, v in NNABLA["names"].items() if k != "scope_names"}
    assert_matches(cases.network_names(nn, PF), expected)


def test_sync_batch_normalization_uses_nnabla_s_scope_name():
    # the parameters exist before the (uninitialised) communicator is refused
    scope = NNABLA["names"]["scope_names"]["sync_batch_normalization"]
    comm = C.MultiProcessCommunicator(nn.Context())
    with pytest.raises(DpnbError, match=r"call comm.init\(\) first"):
        PF.sync_batch_normalization(nn.Variable((2, 3)), comm, name="s")
    assert names() == [f"s/{scope}/{k}" for k in ("beta", "gamma", "mean", "var")]


@pytest.mark.parametrize("scope", cases.SLASH_SCOPES)
def test_scopes_with_slashes(scope):
    assert_matches(cases.slash_scope(nn, PF, P, scope), NNABLA["scopes"][scope])


def test_get_current_parameter_scope_returns_the_scope_dict():
    expected = NNABLA["scopes"]
    assert_matches(cases.current_scopes(nn, PF),
                   {k: expected[k] for k in ("current_inside_b", "current_at_root")})


def test_get_parameters_path_and_params():
    assert_matches(cases.get_parameters_options(nn, PF), NNABLA["scopes"]["get_parameters"])


def test_clear_parameters_in_a_scope_and_a_given_scope_dict():
    expected = NNABLA["scopes"]
    assert_matches(cases.clear_and_local_scopes(nn, PF),
                   {k: expected[k] for k in ("clear_in_scope_a", "local_scope")})


def test_all_scope_cases_as_nnabla():
    assert_matches(cases.scopes(nn, PF, P), NNABLA["scopes"])


# -- get_parameter_or_create ---------------------------------------------------------

def test_get_parameter_or_create_with_arrays_and_need_grad():
    assert_matches(cases.get_parameter_or_create(nn, P, I), NNABLA["get_parameter_or_create"],
                   rtol=0, atol=0)


@pytest.mark.parametrize("label", sorted(cases.refused_calls(P)))
def test_get_parameter_or_create_refuses_what_nnabla_refuses(label):
    assert NNABLA["get_parameter_or_create"]["raises"][label] is True  # nnabla raised
    P.get_parameter_or_create("arr", initializer=np.zeros((2, 3)))
    with pytest.raises(DpnbError):
        cases.refused_calls(P)[label]()


# -- initializers ----------------------------------------------------------------

@pytest.mark.parametrize("case", NNABLA["initializers"]["cases"], ids=lambda c: str(c["args"]))
def test_glorot_and_he_values_and_types(case):
    inmaps, outmaps, kernel = case["args"]
    assert_matches(cases.initializer_formulas(I, inmaps, outmaps, tuple(kernel)), case,
                   rtol=1e-15, atol=0)
    # a list kernel works as well as a tuple
    assert [type(I.calc_normal_std_glorot(inmaps, outmaps, kernel)).__name__,
            type(I.calc_normal_std_he_forward(inmaps, outmaps, kernel)).__name__] == case["std_types"]


def test_initializer_cases_and_default_kernel_as_nnabla():
    assert_matches(cases.initializers(I), NNABLA["initializers"], rtol=1e-15, atol=0)


# -- F.max / F.min ----------------------------------------------------------------

def test_max_min_input_is_the_recorded_one():
    np.testing.assert_array_equal(cases.max_min_input(), np.array(NNABLA["max_min"]["x"], np.float32))


@pytest.mark.parametrize("case", NNABLA["max_min"]["cases"],
                         ids=lambda c: f"{c['fn']}-{c['axis']}-{c['keepdims']}-{sorted(c['flags'])}")
def test_max_and_min_values_indices_and_gradients(case):
    got = cases.max_min_case(nn, F, case["fn"], case["axis"], case["keepdims"], case["flags"])
    assert_matches(got, case, rtol=0, atol=0)
    x = nn.Variable.from_numpy_array(cases.max_min_input())
    result = getattr(F, case["fn"])(x, axis=tuple(case["axis"]) if isinstance(case["axis"], list)
                                    else case["axis"], keepdims=case["keepdims"], **case["flags"])
    outs = list(result) if isinstance(result, tuple) else [result]
    assert [str(o.dtype) for o in outs] == [o["dtype"] for o in case["outputs"]]


def test_max_min_cases_cover_the_recording():
    assert len(cases.max_min_cases(nn, F)) == len(NNABLA["max_min"]["cases"])


def test_gradient_through_only_index_as_nnabla():
    assert_matches(cases.grad_through_index(nn, F), NNABLA["max_min"]["grad_through_index"],
                   rtol=0, atol=0)


# -- parametric functions with explicit initializers ----------------------------------

def test_affine_with_array_initializers_and_apply():
    rec = NNABLA["parametric"]
    assert_matches(cases.affine_cases(nn, PF),
                   {k: rec[k] for k in ("affine_arrays", "affine_apply", "affine_multi_outmaps",
                                        "affine_wrong_array_shape_raises")}, rtol=1e-6, atol=0)
    with pytest.raises(DpnbError, match=r"initializer of 'bad/affine/W' gave shape \(5, 3\), expected \(6, 3\)"):
        cases.bad_affine(PF, cases.affine_input(nn))


def test_convolution_with_array_initializers_and_apply():
    rec = NNABLA["parametric"]
    assert_matches(cases.convolution_cases(nn, PF), {k: rec[k] for k in ("conv_arrays", "conv_apply")},
                   rtol=1e-5, atol=1e-5)


def test_default_initial_weights_equal_nnabla_s_for_the_same_rng():
    expected = NNABLA["parametric"]["default_init"]
    got = cases.default_init(nn, PF)
    assert list(got) == list(expected)
    assert_matches(got, expected, rtol=0, atol=0)


def test_batch_normalization_input_is_the_recorded_one():
    np.testing.assert_array_equal(cases.batch_normalization_input(),
                                  np.array(NNABLA["parametric"]["batch_normalization"]["x"], np.float32))


@pytest.mark.parametrize("label, axes", [("axes_1", 1), ("axes_1", [1]), ("axes_minus_1", -1),
                                         ("axes_minus_1", [-1]), ("axes_0_2", (0, 2))])
def test_batch_normalization_axes(label, axes):
    rec = NNABLA["parametric"]["batch_normalization"]
    assert_matches(cases.batch_normalization_case(nn, PF, axes), rec[label], rtol=1e-5, atol=1e-5)


def test_all_parametric_cases_as_nnabla():
    assert_matches(cases.parametric(nn, PF), NNABLA["parametric"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axes", [5, [5], [1, 1], [1, -2], "1", 1.0, [], None])
def test_batch_normalization_refuses_bad_axes(axes):
    with pytest.raises(DpnbError, match="PF.batch_normalization: axes (must|.* names an axis more than once)"):
        PF.batch_normalization(nn.Variable((4, 3, 2)), axes=axes)
    assert not names()


# -- signatures ------------------------------------------------------------------

DPNB_FUNCTIONS = cases.signature_targets(nn, F, I, P, PF)


def _default(value):
    """A default comparable across the two: sequences as lists."""
    return list(value) if isinstance(value, (list, tuple)) else value


def test_signature_labels_are_the_recorded_ones():
    assert list(DPNB_FUNCTIONS) == list(NNABLA["signatures"])


@pytest.mark.parametrize("label", DPNB_FUNCTIONS)
def test_signatures_match_nnabla(label):
    ours = [(p.name, None if p.default is p.empty else _default(p.default))
            for p in inspect.signature(DPNB_FUNCTIONS[label]).parameters.values()]
    theirs = [(name, None if default is None else _default(ast.literal_eval(default)))
              for name, default in NNABLA["signatures"][label]]
    assert ours == theirs
