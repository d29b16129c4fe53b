"""Activation cases (see functions.py): every function and option, inputs kept at
least 0.1 away from each function's kinks."""
import numpy as np

from .functions import Case

R = np.random.RandomState(0)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


def away(*shape, kinks=(0.0,), low=-3.0, high=3.0):
    """Uniform float32 inputs at least 0.1 from every kink."""
    x = R.uniform(low, high, shape)
    for k in kinks:
        near = np.abs(x - k) < 0.1
        x[near] = k + np.where(x[near] >= k, 0.1, -0.1) + np.sign(x[near] - k + 1e-9) * 0.05
    return x.astype(np.float32)


def elementwise(name, fn, kinks=(0.0,), low=-3.0, high=3.0):
    return Case(name, fn, (away(3, 4, kinks=kinks, low=low, high=high),))


CASES = [
    elementwise("relu", lambda lib, x: lib.F.relu(x)),
    elementwise("relu inplace", lambda lib, x: lib.F.relu(x, inplace=True)),
    elementwise("elu", lambda lib, x: lib.F.elu(x)),
    elementwise("elu alpha", lambda lib, x: lib.F.elu(x, alpha=0.4)),
    elementwise("leaky_relu", lambda lib, x: lib.F.leaky_relu(x)),
    elementwise("leaky_relu alpha", lambda lib, x: lib.F.leaky_relu(x, alpha=0.3)),
    elementwise("leaky_relu inplace", lambda lib, x: lib.F.leaky_relu(x, 0.2, inplace=True)),
    elementwise("tanh", lambda lib, x: lib.F.tanh(x)),
    elementwise("sigmoid", lambda lib, x: lib.F.sigmoid(x)),
    Case("softmax", lambda lib, x: lib.F.softmax(x), (u(2, 3, 4),)),
    Case("softmax axis", lambda lib, x: lib.F.softmax(x, axis=1), (u(2, 3, 4),)),
    Case("softmax axis negative", lambda lib, x: lib.F.softmax(x, axis=-3), (u(2, 3, 4),)),
    Case("log_softmax", lambda lib, x: lib.F.log_softmax(x), (u(2, 3, 4),)),
    Case("log_softmax axis", lambda lib, x: lib.F.log_softmax(x, axis=0), (u(2, 3, 4),)),
    elementwise("relu6", lambda lib, x: lib.F.relu6(x), kinks=(0.0, 6.0), low=-2, high=8),
    elementwise("selu", lambda lib, x: lib.F.selu(x)),
    elementwise("selu scale alpha", lambda lib, x: lib.F.selu(x, scale=1.5, alpha=0.7)),
    Case("celu", lambda lib, x: lib.F.celu(x), (away(2, 3, 2),)),
    Case("celu alpha axis", lambda lib, x: lib.F.celu(x, alpha=0.5, axis=2), (away(2, 3, 2),)),
    Case("celu axis negative", lambda lib, x: lib.F.celu(x, axis=-3), (away(2, 3, 2),)),
    Case("crelu", lambda lib, x: lib.F.crelu(x), (away(2, 3, 2),)),
    Case("crelu axis", lambda lib, x: lib.F.crelu(x, axis=0), (away(2, 3, 2),)),
    elementwise("gelu", lambda lib, x: lib.F.gelu(x)),
    elementwise("mish", lambda lib, x: lib.F.mish(x)),
    elementwise("swish", lambda lib, x: lib.F.swish(x)),
    elementwise("softplus", lambda lib, x: lib.F.softplus(x)),
    elementwise("softplus beta", lambda lib, x: lib.F.softplus(x, beta=2.5)),
    elementwise("softplus negative beta", lambda lib, x: lib.F.softplus(x, beta=-0.5)),
    elementwise("softsign", lambda lib, x: lib.F.softsign(x)),
    elementwise("log_sigmoid", lambda lib, x: lib.F.log_sigmoid(x)),
    elementwise("hard_sigmoid", lambda lib, x: lib.F.hard_sigmoid(x), kinks=(-2.5, 2.5), low=-4, high=4),
    elementwise("hard_tanh", lambda lib, x: lib.F.hard_tanh(x), kinks=(-1.0, 1.0)),
    elementwise("tanh_shrink", lambda lib, x: lib.F.tanh_shrink(x)),
    Case("prelu shared", lambda lib, x, w: lib.F.prelu(x, w), (away(2, 3, 2), u())),
    Case("prelu shared size 1", lambda lib, x, w: lib.F.prelu(x, w), (away(2, 3, 2), u(1))),
    Case("prelu channels", lambda lib, x, w: lib.F.prelu(x, w), (away(2, 3, 2), u(3))),
    Case("prelu base_axis", lambda lib, x, w: lib.F.prelu(x, w, base_axis=2), (away(2, 3, 2), u(2))),
    Case("prelu base_axis 0", lambda lib, x, w: lib.F.prelu(x, w, base_axis=0), (away(2, 3, 2), u(2))),
    Case("prelu base_axis negative", lambda lib, x, w: lib.F.prelu(x, w, base_axis=-2),
         (away(2, 3, 2), u(3))),
    Case("PF.prelu", lambda lib, x: lib.PF.prelu(x), (away(2, 3, 2),)),
    Case("PF.prelu not shared", lambda lib, x: lib.PF.prelu(x, shared=False), (away(2, 3, 2),)),
    Case("PF.prelu base_axis name", lambda lib, x: lib.PF.prelu(x, base_axis=2, shared=False,
                                                                name="act"), (away(2, 3, 2),)),
    # A fixed slope gets no gradient, so central differences (which move it) cannot agree.
    Case("PF.prelu fixed (no fd: the slope is held)",
         lambda lib, x: lib.PF.prelu(x, fix_parameters=True), (away(2, 3, 2),), fd=False),
    Case("PF.prelu slope_init", lambda lib, x: lib.PF.prelu(
        x, shared=False, slope_init=lib.PF.ConstantInitializer(0.5)), (away(2, 3, 2),),
        params=lambda name, shape, rng: np.full(shape, 0.5)),
]
