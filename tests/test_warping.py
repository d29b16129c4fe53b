"""What nnabla's CPU build cannot record for the warping functions: warp_by_grid with
``channel_last`` (nnabla's CPU kernel raises; its CUDA one has it), checked against the
channels-first results recorded from nnabla, transposed; nearest mode's grid gradient
(nnabla raises, dpnb gives zeros: the nearest pixel moves in steps); finite differences
of channel_last of first and second order; and the argument checks."""
from pathlib import Path

import numpy as np
import pytest
from nnabla_cases import functions, functions_warping as cases

import dpnb as nn
import dpnb.functions as F
import dpnb.parametric_functions as PF
from dpnb.errors import DpnbError
from dpnb.ext_utils import get_extension_context

FIXTURE = Path(__file__).parent / "fixtures" / "nnabla" / "functions" / "warping.npz"
LIB = functions.library(nn, F, PF, get_extension_context("cpu", type_config="double"))


def recorded(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURE) as data:
        prefix = name + functions.SEPARATOR
        return {k[len(prefix):]: data[k] for k in data.files if k.startswith(prefix)}


@pytest.mark.parametrize("name, x, grid, kw", [
    ("warp_by_grid 2d padding_mode=reflect", cases.X2, cases.G2_FAR,
     {"padding_mode": "reflect"}),
    ("warp_by_grid 3d padding_mode=repeat align_corners=True", cases.X3, cases.G3,
     {"padding_mode": "repeat", "align_corners": True}),
])
def test_channel_last_is_nnabla_channels_first_transposed(name, x, grid, kw):
    want = recorded(name)
    last = (0,) + tuple(range(2, x.ndim)) + (1,)
    xv = nn.Variable.from_numpy_array(x.transpose(last).copy(), need_grad=True)
    gv = nn.Variable.from_numpy_array(grid, need_grad=True)
    y = F.warp_by_grid(xv, gv, channel_last=True, **kw)
    y.forward()
    np.testing.assert_allclose(y.d, want["y0"].transpose(last), rtol=1e-4, atol=1e-5)
    gy = functions.output_grads([nn.Variable(want["y0"].shape)])[0]  # the recorded one
    y.backward(gy.transpose(last))
    np.testing.assert_allclose(xv.g, want["g0"].transpose(last), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gv.g, want["g1"], rtol=1e-4, atol=1e-5)


CHANNEL_LAST = [
    functions.Case("warp_by_grid 2d channel_last reflect align_corners",
                   lambda lib, a, b: lib.F.warp_by_grid(a, b, "linear", "reflect", True, True),
                   (cases.X2.transpose(0, 2, 3, 1).copy(), cases.G2_FAR)),
    functions.Case("warp_by_grid 3d channel_last",
                   lambda lib, a, b: lib.F.warp_by_grid(a, b, channel_last=True),
                   (cases.X3.transpose(0, 2, 3, 4, 1).copy(), cases.G3)),
]


@pytest.mark.parametrize("case", CHANNEL_LAST, ids=[c.name for c in CHANNEL_LAST])
def test_channel_last_derivatives_by_finite_differences(case):
    assert functions.finite_difference_errors(LIB, case) == []
    assert functions.second_order_errors(LIB, case) == []


def test_nearest_grid_gradient_is_zero():
    x = nn.Variable.from_numpy_array(cases.X2, need_grad=True)
    grid = nn.Variable.from_numpy_array(cases.G2, need_grad=True)
    y = F.warp_by_grid(x, grid, mode="nearest")
    y.forward()
    grid.g, x.g = 1.0, 0.0
    y.backward(clear_buffer=True)
    assert (grid.g == 1.0).all() and x.g.any()   # leaf gradients accumulate: zero added


@pytest.mark.parametrize("call, message", [
    (lambda x, g: F.warp_by_grid(x, g, mode="cubic"), "mode must be one of"),
    (lambda x, g: F.warp_by_grid(x, g, padding_mode="wrap"), "padding_mode must be one of"),
    (lambda x, g: F.warp_by_grid(x, g, align_corners=1), "align_corners must be a bool"),
    (lambda x, g: F.warp_by_grid(x, F.reshape(g, (2, 3, 4, 3))), "grid of shape"),
    (lambda x, g: F.warp_by_grid(F.reshape(x, (3, 2, 5, 4)), g), "one batch size"),
    (lambda x, g: F.affine_grid(F.reshape(g, (12, 2, 3)), (4, 4, 4)), "theta must have shape"),
    (lambda x, g: F.affine_grid(F.reshape(g, (12, 2, 3)), (4, 0)), "size must be"),
    (lambda x, g: F.warp_by_flow(x, g), "flow (N, 2, H, W)"),
])
def test_arguments_are_checked(call, message):
    x, g = nn.Variable(cases.X2.shape), nn.Variable(cases.G2.shape)
    with pytest.raises(DpnbError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(x, g)
