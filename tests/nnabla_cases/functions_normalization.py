"""Normalization cases (see functions.py)."""
import numpy as np

from .functions import Case

R = np.random.RandomState(2)


def u(*shape, low=-1.0, high=1.0):
    """Uniform float32 inputs."""
    return R.uniform(low, high, shape).astype(np.float32)


def counted(name, shape, rng):
    """Parameter values with a batch count ``t`` of 3 (mean subtraction's)."""
    return np.full(shape, 3.0) if name.endswith("/t") else rng.uniform(-1.0, 1.0, shape)


RUNNING = (True, False, False)  # x has a gradient; the running mean and count do not
VECTOR = (True, False)  # spectral norm's w has a gradient; the singular vector u does not


def adapted_batch_normalization(lib, x, beta, gamma):
    """Batch normalization keeping axes 1 and 3, through nnabla's adapter: a one-axis
    batch normalization of the adapted input, then back to the input's layout."""
    adapter = lib.F.BatchNormalizationInOutAdapter(4, [1, 3])
    return adapter.inv(lib.F.batch_normalization(adapter(x), beta, gamma, None, None, axes=[2]))


CASES = [
    # Batch normalization; running statistics are updated in place with batch_stat.
    Case("PF.batch_normalization", lambda lib, x: lib.PF.batch_normalization(x), (u(4, 3, 2),)),
    Case("batch_normalization",
         lambda lib, x, b, g, m, v: lib.F.batch_normalization(x, b, g, m, v),
         (u(4, 3, 2), u(1, 3, 1), u(1, 3, 1), u(1, 3, 1), u(1, 3, 1, low=0.5, high=1.5)),
         need_grad=(True, True, True, False, False)),
    Case("batch_normalization axis 2 decay eps output_stat",
         lambda lib, x, b, g, m, v: lib.F.batch_normalization(
             x, b, g, m, v, axes=[2], decay_rate=0.7, eps=0.01, output_stat=True),
         (u(2, 3, 2), u(1, 1, 2), u(1, 1, 2), u(1, 1, 2), u(1, 1, 2, low=0.5, high=1.5)),
         need_grad=(True, True, True, False, False)),
    # With several axes nnabla 1.39 updates copies of the running statistics, never the
    # statistics given (dpnb updates them: test_functions_normalization.py), so none here.
    Case("batch_normalization axes list output_stat",
         lambda lib, x, b, g: lib.F.batch_normalization(x, b, g, None, None, axes=[0, 2],
                                                        output_stat=True),
         (u(2, 3, 2), u(2, 1, 2), u(2, 1, 2))),
    Case("batch_normalization inference",
         lambda lib, x, b, g, m, v: lib.F.batch_normalization(x, b, g, m, v, batch_stat=False),
         (u(4, 3), u(1, 3), u(1, 3), u(1, 3), u(1, 3, low=0.5, high=1.5)),
         need_grad=(True, True, True, False, False)),
    Case("batch_normalization no beta gamma axes -1",
         lambda lib, x, m, v: lib.F.batch_normalization(x, None, None, m, v, axes=[-1]),
         (u(3, 2, 4), u(1, 1, 4), u(1, 1, 4, low=0.5, high=1.5)),
         need_grad=(True, False, False)),
    Case("PF.batch_normalization axes 2 no_scale output_stat name",
         lambda lib, x: lib.PF.batch_normalization(x, axes=[2], no_scale=True, output_stat=True,
                                                   name="b1"), (u(3, 2, 2),)),
    Case("PF.batch_normalization inference no_bias",
         lambda lib, x: lib.PF.batch_normalization(x, batch_stat=False, no_bias=True),
         (u(4, 3, 2),)),
    # Layer normalization.
    Case("layer_normalization", lambda lib, x, b, g: lib.F.layer_normalization(x, b, g),
         (u(2, 3, 4), u(1, 3, 4), u(1, 3, 4))),
    Case("layer_normalization no beta gamma",
         lambda lib, x: lib.F.layer_normalization(x, None, None), (u(3, 5),)),
    Case("layer_normalization gamma only",
         lambda lib, x, g: lib.F.layer_normalization(x, None, g), (u(3, 5), u(1, 5))),
    Case("layer_normalization beta only",
         lambda lib, x, b: lib.F.layer_normalization(x, b, None), (u(3, 5), u(1, 5))),
    Case("layer_normalization batch_axis list eps output_stat",
         lambda lib, x, b, g: lib.F.layer_normalization(x, b, g, batch_axis=[0, 2], eps=0.1,
                                                        output_stat=True),
         (u(2, 3, 2), u(1, 3, 1), u(1, 3, 1))),
    Case("layer_normalization batch_axis -1",
         lambda lib, x, b, g: lib.F.layer_normalization(x, b, g, batch_axis=-1),
         (u(5, 3), u(5, 1), u(5, 1))),
    Case("layer_normalization batch_axis empty",
         lambda lib, x: lib.F.layer_normalization(x, None, None, batch_axis=[]), (u(2, 3),)),
    Case("PF.layer_normalization", lambda lib, x: lib.PF.layer_normalization(x), (u(2, 3, 4),)),
    Case("PF.layer_normalization batch_axis 1 output_stat",
         lambda lib, x: lib.PF.layer_normalization(x, batch_axis=1, output_stat=True),
         (u(2, 3, 2),)),
    Case("PF.layer_normalization no_scale no_bias",
         lambda lib, x: lib.PF.layer_normalization(x, no_scale=True, no_bias=True),
         (u(3, 4),)),
    Case("PF.layer_normalization no_bias fix_parameters name",
         lambda lib, x: lib.PF.layer_normalization(x, no_bias=True, fix_parameters=True,
                                                   name="ln1"),
         (u(3, 4),), fd=False),  # fixed gamma gets no gradient; fd would vary it too
    # Instance normalization.
    Case("instance_normalization", lambda lib, x, b, g: lib.F.instance_normalization(x, b, g),
         (u(2, 3, 4), u(1, 3, 1), u(1, 3, 1))),
    Case("instance_normalization per-sample beta gamma",
         lambda lib, x, b, g: lib.F.instance_normalization(x, b, g),
         (u(2, 3, 4), u(2, 3, 1), u(1, 3, 1))),
    Case("instance_normalization none output_stat",
         lambda lib, x: lib.F.instance_normalization(x, None, None, output_stat=True),
         (u(2, 2, 5),)),
    Case("instance_normalization channel_axis 2 batch_axis 1 eps",
         lambda lib, x, g: lib.F.instance_normalization(x, None, g, channel_axis=2,
                                                        batch_axis=1, eps=0.05),
         (u(4, 2, 3), u(1, 1, 3))),
    Case("instance_normalization channel_axis -1 batch_axis list",
         lambda lib, x, b: lib.F.instance_normalization(x, b, None, channel_axis=-1,
                                                        batch_axis=[0, 1], output_stat=True),
         (u(2, 2, 4, 2), u(1, 1, 1, 2))),
    Case("PF.instance_normalization", lambda lib, x: lib.PF.instance_normalization(x),
         (u(2, 3, 4),)),
    Case("PF.instance_normalization channel_axis 2 no_bias output_stat",
         lambda lib, x: lib.PF.instance_normalization(x, channel_axis=2, no_bias=True,
                                                      output_stat=True), (u(2, 4, 3),)),
    Case("PF.instance_normalization no_scale name",
         lambda lib, x: lib.PF.instance_normalization(x, no_scale=True, name="inorm"),
         (u(2, 3, 4),)),
    # Group normalization.
    Case("group_normalization", lambda lib, x, b, g: lib.F.group_normalization(x, b, g, 2),
         (u(2, 4, 3), u(1, 4, 1), u(1, 4, 1))),
    Case("group_normalization none output_stat",
         lambda lib, x: lib.F.group_normalization(x, None, None, 3, output_stat=True),
         (u(2, 6, 2),)),
    Case("group_normalization channel_axis 2 eps",
         lambda lib, x, g: lib.F.group_normalization(x, None, g, 2, channel_axis=2, eps=0.1),
         (u(2, 3, 4), u(1, 1, 4))),
    Case("group_normalization batch_axis list output_stat",
         lambda lib, x, b: lib.F.group_normalization(x, b, None, 2, channel_axis=2,
                                                     batch_axis=[0, 1], output_stat=True),
         (u(2, 3, 4, 2), u(1, 1, 4, 1))),
    Case("group_normalization no batch_axis",
         lambda lib, x: lib.F.group_normalization(x, None, None, 1, batch_axis=[]),
         (u(2, 2, 3),)),
    Case("group_normalization channel_axis -1",
         lambda lib, x: lib.F.group_normalization(x, None, None, 2, channel_axis=-1),
         (u(3, 2, 4),)),
    Case("PF.group_normalization", lambda lib, x: lib.PF.group_normalization(x, 2),
         (u(2, 4, 3),)),
    Case("PF.group_normalization channel_axis 2 output_stat no_scale",
         lambda lib, x: lib.PF.group_normalization(x, 3, channel_axis=2, output_stat=True,
                                                   no_scale=True), (u(2, 2, 6),)),
    # Tensor normalization and weight standardization.
    Case("tensor_normalization", lambda lib, x, b, g: lib.F.tensor_normalization(x, 1, b, g),
         (u(3, 2, 4), u(1, 2, 1), u(1, 2, 1))),
    Case("tensor_normalization axes list output_stat eps",
         lambda lib, x, g: lib.F.tensor_normalization(x, [0, 2], gamma=g, eps=0.1,
                                                      output_stat=True),
         (u(2, 4, 3), u(2, 1, 3))),
    Case("tensor_normalization no beta gamma",
         lambda lib, x: lib.F.tensor_normalization(x, [1]), (u(4, 3),)),
    Case("weight_standardization", lambda lib, w: lib.F.weight_standardization(w),
         (u(3, 2, 2, 2),)),
    Case("weight_standardization channel_axis 1 eps output_stat",
         lambda lib, w: lib.F.weight_standardization(w, channel_axis=1, eps=0.01,
                                                     output_stat=True), (u(5, 3),)),
    Case("weight_standardization channel_axis -1",
         lambda lib, w: lib.F.weight_standardization(w, channel_axis=-1), (u(4, 3, 2),)),
    # Norm normalization (at its default eps: nnabla 1.39's CPU code ignores eps).
    Case("norm_normalization", lambda lib, x: lib.F.norm_normalization(x), (u(2, 3),)),
    Case("norm_normalization p 1 axes 1",
         lambda lib, x: lib.F.norm_normalization(x, 1, 1), (u(3, 4, low=0.1, high=1),)),
    Case("norm_normalization p 3 axes list",
         lambda lib, x: lib.F.norm_normalization(x, p=3, axes=[0, 2]), (u(2, 3, 2),)),
    Case("norm_normalization p 1.5 axes -1",
         lambda lib, x: lib.F.norm_normalization(x, 1.5, -1), (u(3, 4, low=0.1, high=1),)),
    Case("norm_normalization axes empty",
         lambda lib, x: lib.F.norm_normalization(x, 2, []), (u(2, 3, low=0.2, high=1),)),
    # Weight normalization.
    Case("weight_normalization", lambda lib, w, g: lib.F.weight_normalization(w, g),
         (u(3, 2, 2), u(3))),
    Case("weight_normalization dim 1 eps",
         lambda lib, w, g: lib.F.weight_normalization(w, g, dim=1, eps=0.1), (u(3, 4), u(4))),
    Case("weight_normalization dim -1",
         lambda lib, w, g: lib.F.weight_normalization(w, g, -1), (u(2, 3, 2), u(2))),
    Case("PF.weight_normalization", lambda lib, w: lib.PF.weight_normalization(w),
         (u(3, 2, 2),)),
    Case("PF.weight_normalization dim 1 eps name",
         lambda lib, w: lib.PF.weight_normalization(w, dim=1, eps=0.01, name="layer"),
         (u(4, 3),)),
    Case("PF.weight_normalization fix_parameters",
         lambda lib, w: lib.PF.weight_normalization(w, fix_parameters=True), (u(2, 3),),
         fd=False),  # fixed g gets no gradient; fd would vary it too
    # Mean subtraction; the updating forms' backward is nnabla's approximation, so no fd.
    Case("mean_subtraction", lambda lib, x, m, t: lib.F.mean_subtraction(x, m, t),
         (u(4, 3), u(3), np.array([2.0], np.float32)), need_grad=RUNNING, fd=False),
    Case("mean_subtraction base_axis 2",
         lambda lib, x, m, t: lib.F.mean_subtraction(x, m, t, base_axis=2),
         (u(2, 3, 2), u(2), np.array([0.0], np.float32)), need_grad=RUNNING, fd=False),
    Case("mean_subtraction base_axis -1",
         lambda lib, x, m, t: lib.F.mean_subtraction(x, m, t, base_axis=-1),
         (u(2, 3, 2), u(2), np.array([5.0], np.float32)), need_grad=RUNNING, fd=False),
    Case("mean_subtraction no update",
         lambda lib, x, m, t: lib.F.mean_subtraction(x, m, t, update_running_mean=False),
         (u(4, 3), u(3), np.array([2.0], np.float32)), need_grad=RUNNING),
    Case("PF.mean_subtraction", lambda lib, x: lib.PF.mean_subtraction(x), (u(3, 2, 2),),
         params=counted, fd=False),
    Case("PF.mean_subtraction base_axis 2 no update name",
         lambda lib, x: lib.PF.mean_subtraction(x, base_axis=2, update_running_mean=False,
                                                name="ms"), (u(2, 3, 2),), params=counted),
    # Fused batch normalization: relu(bn(x) + z), running statistics updated.
    Case("fused_batch_normalization",
         lambda lib, x, b, g, m, v, z: lib.F.fused_batch_normalization(x, b, g, m, v, z),
         (u(4, 3, 2), u(1, 3, 1), u(1, 3, 1), u(1, 3, 1), u(1, 3, 1, low=0.5, high=1.5),
          u(4, 3, 2)), need_grad=(True, True, True, False, False, True)),
    Case("fused_batch_normalization no z axes decay eps output_stat",
         lambda lib, x, b, g, m, v: lib.F.fused_batch_normalization(
             x, b, g, m, v, axes=[2], decay_rate=0.5, eps=0.01, output_stat=True),
         (u(3, 2, 2), u(1, 1, 2), u(1, 1, 2), u(1, 1, 2), u(1, 1, 2, low=0.5, high=1.5)),
         need_grad=(True, True, True, False, False)),
    Case("fused_batch_normalization inference",
         lambda lib, x, b, g, m, v, z: lib.F.fused_batch_normalization(
             x, b, g, m, v, z, batch_stat=False),
         (u(4, 3), u(1, 3), u(1, 3), u(1, 3), u(1, 3, low=0.5, high=1.5), u(4, 3)),
         need_grad=(True, True, True, False, False, True)),
    Case("PF.fused_batch_normalization", lambda lib, x: lib.PF.fused_batch_normalization(x),
         (u(4, 3, 2),)),
    Case("PF.fused_batch_normalization z axes no_scale name",
         lambda lib, x, z: lib.PF.fused_batch_normalization(x, z, axes=[0], no_scale=True,
                                                            name="res"),
         (u(2, 3), u(2, 3))),
    Case("PF.fused_batch_normalization inference no_bias",
         lambda lib, x: lib.PF.fused_batch_normalization(x, batch_stat=False, no_bias=True),
         (u(4, 3, 2),)),
    # Spectral norm.  Backward holds the power iteration's vectors constant, which is the
    # true derivative only once the iteration has converged: fd only with many steps.
    Case("spectral_norm", lambda lib, w, v: lib.F.spectral_norm(w, v), (u(3, 4), u(3)),
         need_grad=VECTOR, fd=False),
    Case("spectral_norm u need_grad", lambda lib, w, v: lib.F.spectral_norm(w, v),
         (u(3, 4), u(3)), fd=False),
    Case("spectral_norm dim 1 itr 2 output_u",
         lambda lib, w, v: lib.F.spectral_norm(w, v, dim=1, itr=2, output_u=True),
         (u(3, 2, 2), u(2)), need_grad=VECTOR, fd=False),
    Case("spectral_norm last dim eps",
         lambda lib, w, v: lib.F.spectral_norm(w, v, 2, eps=0.1), (u(2, 3, 4), u(4)),
         need_grad=VECTOR, fd=False),
    Case("spectral_norm converged",
         lambda lib, w, v: lib.F.spectral_norm(w, v, itr=60), (u(3, 4), u(3)),
         need_grad=VECTOR, fd_atol=1e-5),
    Case("spectral_norm converged dim 2",
         lambda lib, w, v: lib.F.spectral_norm(w, v, dim=2, itr=60), (u(2, 2, 3), u(3)),
         need_grad=VECTOR, fd_atol=1e-5),
    # nnabla 1.39's backward with test=True gives NaN: forward only.
    Case("spectral_norm test output_u",
         lambda lib, w, v: lib.F.spectral_norm(w, v, itr=2, test=True, output_u=True),
         (u(4, 3), u(4)), need_grad=VECTOR, grad=False),
    Case("PF.spectral_norm", lambda lib, w: lib.PF.spectral_norm(w), (u(3, 4),), fd=False),
    Case("PF.spectral_norm dim 1 itr 3 name",
         lambda lib, w: lib.PF.spectral_norm(w, dim=1, itr=3, name="sn"), (u(3, 2),),
         fd=False),
    Case("PF.spectral_norm test", lambda lib, w: lib.PF.spectral_norm(w, test=True),
         (u(3, 4),), grad=False),
    Case("BatchNormalizationInOutAdapter around batch_normalization axes 1 3",
         adapted_batch_normalization, (u(2, 3, 4, 5), u(1, 1, 15), u(1, 1, 15))),
]
