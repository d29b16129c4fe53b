"""nnabla's decorators for user-written functions: PF.parametric_function_api scopes
a parametric function (and adds ``name``), F.function_api and S.solver_api pass the
current context.  Expected names and signatures are what nnabla 1.39 gives for the
same definitions."""
import inspect

import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
import dpnb.parametric_functions as PF
import dpnb.solvers as S
from dpnb import DpnbError
from dpnb.ext_utils import get_extension_context


@PF.parametric_function_api("mine", [("W", "weight", "(k,)", True)])
def mine(x, k=2, fix_parameters=False):
    """Multiply by a learned vector."""
    w = PF.get_parameter_or_create("W", (k,), np.full(k, 2.0), True, not fix_parameters)
    return F.mul2(x, w)


def test_parametric_function_api_scopes_and_adds_name():
    nn.clear_parameters()
    x = nn.Variable.from_numpy_array(np.array([1.0, 3.0]))
    mine(x)
    y = mine(x, 2, False, "blk")
    mine(x, name="b2")
    assert str(inspect.signature(mine)) == "(x, k=2, fix_parameters=False, name=None)"
    assert list(nn.get_parameters()) == ["mine/W", "blk/mine/W", "b2/mine/W"]
    y.forward()
    np.testing.assert_array_equal(y.d, [2.0, 6.0])
    assert "Parameters registered in the scope ``mine``" in mine.__doc__
    assert "W (need_grad=True): weight (shape: (k,))" in mine.__doc__
    nn.clear_parameters()


def test_parametric_function_api_defaults_to_the_function_name():
    @PF.parametric_function_api()
    def layer(x, fix_parameters=False):
        """A layer."""
        PF.get_parameter_or_create("b", (1,), np.zeros(1), True, not fix_parameters)
        return x

    nn.clear_parameters()
    layer(nn.Variable((1,)), name="top")
    assert list(nn.get_parameters()) == ["top/layer/b"]
    nn.clear_parameters()


def test_parametric_function_api_refuses_functions_without_fix_parameters():
    with pytest.raises(DpnbError, match=r"bad\(x\) must take fix_parameters"):
        @PF.parametric_function_api("bad")
        def bad(x):
            return x
    with pytest.raises(DpnbError, match="already takes name"):
        @PF.parametric_function_api("named")
        def named(x, fix_parameters=False, name=None):
            return x


@pytest.mark.parametrize("decorator", [F.function_api, S.solver_api])
def test_context_decorators_pass_the_current_context(decorator):
    @decorator
    def f(ctx, x, y=1):
        return ctx, x, y

    assert str(inspect.signature(f)) == "(x, y=1)"
    assert f(3)[1:] == (3, 1)
    double = get_extension_context("cpu", type_config="double")
    with nn.context_scope(double):
        assert f(3, y=2)[0] is double
    assert f(3)[0] is nn.get_current_context()


def test_context_decorators_need_a_context_argument():
    with pytest.raises(DpnbError, match="must take the context as its first argument"):
        F.function_api(lambda *xs: xs)
