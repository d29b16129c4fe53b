"""Warping cases (see functions.py): affine_grid, warp_by_grid and warp_by_flow.

The grids and flows are drawn at random, so no point lies on a pixel boundary, where the
bilinear weights' derivative jumps and finite differences would straddle the kink.
nnabla's CPU warp_by_grid has no channel_last form and no grid gradient in nearest mode
(it raises), so those cases are not recorded here; tests/test_warping.py checks them."""
import numpy as np

from .functions import Case

R = np.random.RandomState(0)


def grid(*shape, spread=1.3):
    """Normalized coordinates in [-spread, spread): some points fall outside the source."""
    return R.uniform(-spread, spread, shape).astype(np.float32)


def theta(batch, d):
    """Affine maps near the identity, (B, d, d + 1)."""
    eye = np.concatenate([np.eye(d), np.zeros((d, 1))], axis=1)
    return (eye + 0.3 * R.randn(batch, d, d + 1)).astype(np.float32)


X2 = R.randn(2, 3, 5, 4).astype(np.float32)
X3 = R.randn(1, 2, 4, 3, 5).astype(np.float32)
G2 = grid(2, 3, 6, 2)
G2_FAR = grid(2, 3, 6, 2, spread=3.2)   # reflect: points folded more than once
G3 = grid(1, 3, 2, 4, 3)
G3_FAR = grid(1, 3, 2, 4, 3, spread=3.2)
DATA = R.randn(2, 3, 4, 5).astype(np.float32)
FLOW = (1.5 * R.randn(2, 2, 4, 5)).astype(np.float32)   # some reads clamp at the borders


def warp(label, x, g, **kw):
    nearest = kw.get("mode") == "nearest"
    return Case(f"warp_by_grid {label} " + " ".join(f"{k}={v}" for k, v in kw.items()),
                lambda lib, a, b: lib.F.warp_by_grid(a, b, **kw), (x, g),
                need_grad=(True, not nearest))


CASES = [
    Case("affine_grid 2d", lambda lib, t: lib.F.affine_grid(t, (3, 4)), (theta(2, 2),)),
    Case("affine_grid 2d align_corners",
         lambda lib, t: lib.F.affine_grid(t, (4, 3), align_corners=True), (theta(2, 2),)),
    Case("affine_grid 3d", lambda lib, t: lib.F.affine_grid(t, (2, 3, 4)), (theta(2, 3),)),
    Case("affine_grid 3d align_corners",
         lambda lib, t: lib.F.affine_grid(t, [3, 2, 2], True), (theta(1, 3),)),
    warp("2d", X2, G2),
    warp("2d", X2, G2, align_corners=True),
    warp("2d", X2, G2, padding_mode="repeat"),
    warp("2d", X2, G2, padding_mode="repeat", align_corners=True),
    warp("2d", X2, G2_FAR, padding_mode="reflect"),
    warp("2d", X2, G2_FAR, padding_mode="reflect", align_corners=True),
    warp("2d", X2, G2, mode="nearest"),
    warp("2d", X2, G2_FAR, mode="nearest", padding_mode="reflect"),
    warp("2d", X2, G2, mode="nearest", padding_mode="repeat", align_corners=True),
    warp("3d", X3, G3),
    warp("3d", X3, G3, padding_mode="repeat", align_corners=True),
    warp("3d", X3, G3_FAR, padding_mode="reflect"),
    warp("3d", X3, G3_FAR, mode="nearest", padding_mode="reflect", align_corners=True),
    Case("warp_by_flow", lambda lib, d, f: lib.F.warp_by_flow(d, f), (DATA, FLOW)),
]
