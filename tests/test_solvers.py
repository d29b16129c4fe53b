"""Solvers against per-parameter NumPy references written from nnabla's update
rules, on flat-storage parameters, loose variables and mixes of the two."""
import numpy as np
import pytest

import dpnb as nn
import dpnb.solvers as S
from dpnb.solvers import runs
from dpnb.context import to_module
from dpnb.errors import DpnbError
from dpnb.ext_utils import get_extension_context

SHAPES = {"a/W": (3, 4), "a/b": (4,), "b/W": (2, 3, 2), "b/b": (5,)}


@pytest.fixture
def double():
    with nn.context_scope(get_extension_context("cpu", type_config="double")):
        yield


def make_params(init: dict) -> dict:
    """Create parameters ``scope/name`` in flat storage with the given initial values."""
    for name, value in init.items():
        scope, short = name.split("/")
        with nn.parameter_scope(scope):
            nn.get_parameter_or_create(short, value.shape, value)
    return nn.get_parameters()


def random_init(rng) -> dict:
    return {name: rng.randn(*shape) for name, shape in SHAPES.items()}


def flat_layout(rng):
    """All network parameters: one run."""
    return make_params(random_init(rng)), 1


def mixed_layout(rng):
    """A loose variable between flat parameters: three runs."""
    params = make_params(random_init(rng))
    loose = nn.Variable.from_numpy_array(rng.randn(3, 3), need_grad=True)
    names = list(params)
    mixed = {n: params[n] for n in names[:2]}
    mixed["loose"] = loose
    mixed.update((n, params[n]) for n in names[2:])
    return mixed, 3


def subset_layout(rng):
    """a/W and b/*, leaving out a/b: two runs of one storage."""
    params = make_params(random_init(rng))
    return {n: params[n] for n in ("a/W", "b/W", "b/b")}, 2


def large_layout(rng):
    """One run of several CPU update slices, parameter ends falling inside slices."""
    sizes = {"a/W": (300, 500), "a/b": (500,), "b/W": (runs.CPU_SLICE + 7,)}
    assert sum(np.prod(shape) for shape in sizes.values()) > 3 * runs.CPU_SLICE
    return make_params({name: rng.randn(*shape) for name, shape in sizes.items()}), 1


LAYOUTS = {"flat": flat_layout, "mixed": mixed_layout, "subset": subset_layout,
           "large": large_layout}


# -- references: one parameter at a time, as nnabla's documentation writes them --
def ref_sgd(h, w, g, s, t):
    return w - h["lr"] * g


def ref_momentum(h, w, g, s, t):
    s["m"] = h["momentum"] * s["m"] + h["lr"] * g
    return w - s["m"]


def ref_nesterov(h, w, g, s, t):
    previous = s["m"]
    s["m"] = h["momentum"] * previous - h["lr"] * g
    return w - h["momentum"] * previous + (1 + h["momentum"]) * s["m"]


def ref_adam(h, w, g, s, t):
    s["mean"] = h["beta1"] * s["mean"] + (1 - h["beta1"]) * g
    s["var"] = h["beta2"] * s["var"] + (1 - h["beta2"]) * g * g
    alpha_t = h["alpha"] * np.sqrt(1 - h["beta2"] ** t) / (1 - h["beta1"] ** t)
    return w - alpha_t * s["mean"] / (np.sqrt(s["var"]) + h["eps"])


def ref_adamw(h, w, g, s, t):
    eta = h["alpha"] / h["alpha0"]
    return ref_adam(h, w, g, s, t) - eta * h["wd"] * w


def ref_adagrad(h, w, g, s, t):
    s["v"] = s["v"] + g * g
    return w - h["lr"] * g / (np.sqrt(s["v"]) + h["eps"])


def ref_rmsprop(h, w, g, s, t):
    s["v"] = h["decay"] * s["v"] + (1 - h["decay"]) * g * g
    return w - h["lr"] * g / (np.sqrt(s["v"]) + h["eps"])


def ref_adadelta(h, w, g, s, t):
    s["e_sqr_grad"] = h["decay"] * s["e_sqr_grad"] + (1 - h["decay"]) * g * g
    delta = np.sqrt((s["e_sqr_delta"] + h["eps"]) / (s["e_sqr_grad"] + h["eps"])) * g
    s["e_sqr_delta"] = h["decay"] * s["e_sqr_delta"] + (1 - h["decay"]) * delta * delta
    return w - h["lr"] * delta


def adam_moments(h, g, s, mean="m", var="v"):
    s[mean] = h["beta1"] * s[mean] + (1 - h["beta1"]) * g
    s[var] = h["beta2"] * s[var] + (1 - h["beta2"]) * g * g


def ref_adamax(h, w, g, s, t):
    s["m"] = h["beta1"] * s["m"] + (1 - h["beta1"]) * g
    s["u"] = np.maximum(h["beta2"] * s["u"], np.abs(g))
    return w - h["alpha"] / (1 - h["beta1"] ** t) * s["m"] / (s["u"] + h["eps"])


def corrected_alpha(h, t):
    return h["alpha"] * np.sqrt(1 - h["beta2"] ** t) / (1 - h["beta1"] ** t)


def ref_amsgrad(h, w, g, s, t):
    adam_moments(h, g, s)
    s["v_hat"] = np.maximum(s["v_hat"], s["v"])
    alpha = corrected_alpha(h, t) if h["bias_correction"] else h["alpha"]
    return w - alpha * s["m"] / (np.sqrt(s["v_hat"]) + h["eps"])


def bounds(h, t):
    final_lr = h["final_lr"] * h["alpha"] / h["initial"]["alpha"]
    return final_lr * (1 - 1 / (h["gamma"] * t + 1)), final_lr * (1 + 1 / (h["gamma"] * t))


def ref_adabound(h, w, g, s, t):
    adam_moments(h, g, s, "mean", "var")
    low, high = bounds(h, t)
    rate = np.clip(corrected_alpha(h, t) / (np.sqrt(s["var"]) + h["eps"]), low, high)
    return w - rate * s["mean"]


def ref_amsbound(h, w, g, s, t):
    adam_moments(h, g, s)
    s["v_hat"] = np.maximum(s["v_hat"], s["v"])
    low, _ = bounds(h, t)
    high = h["final_lr"] * h["alpha"] / h["initial"]["alpha"] * (1 + t / h["gamma"])  # nnabla's
    alpha = corrected_alpha(h, t) if h["bias_correction"] else h["alpha"]
    return w - np.clip(alpha / (np.sqrt(s["v_hat"]) + h["eps"]), low, high) * s["m"]


def ref_adabelief(h, w, g, s, t):
    if h["weight_decouple"]:
        w = w * (1 - (h["wd"] if h["fixed_decay"] else h["alpha"] * h["wd"]))
    s["mean"] = h["beta1"] * s["mean"] + (1 - h["beta1"]) * g
    s["var"] = h["beta2"] * s["var"] + (1 - h["beta2"]) * (g - s["mean"]) ** 2
    if h["amsgrad"]:
        s["s_max"] = np.maximum(s["s_max"], s["var"]) + h["eps"]
        belief = s["s_max"]
    else:
        s["var"] = s["var"] + h["eps"]
        belief = s["var"]
    step = h["alpha"] / (1 - h["beta1"] ** t) * s["mean"] / (
        np.sqrt(belief / (1 - h["beta2"] ** t)) + h["eps"])
    if not h["rectify"]:
        return w - step
    beta2 = float(np.float32(h["beta2"]))
    rho_inf = 2 / (1 - beta2) - 1
    rho = rho_inf - 2 * t * beta2 ** t / (1 - beta2 ** t)
    if rho <= 4:
        return w - h["alpha"] * s["mean"]
    rectified = (rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho)
    return w - step * np.sqrt(rectified)


def ref_lamb(h, w, g, s, t):
    adam_moments(h, g, s, "mean", "var")
    m, v = s["mean"], s["var"]
    if h["bias_correction"]:
        m, v = m / (1 - h["beta1"] ** t), v / (1 - h["beta2"] ** t)
    r = m / (np.sqrt(v) + h["eps"])
    trust = np.clip(np.linalg.norm(w), h["gamma_l"], h["gamma_u"]) / np.linalg.norm(r)
    return w - h["eta"] * trust * r


def ref_lars(h, w, g, s, t):
    w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
    denominator = g_norm + h["eps"] if g_norm < h["eps"] else g_norm
    rate = 1.0 if w_norm < h["eps"] else h["coefficient"] * w_norm / denominator
    s["v"] = h["momentum"] * s["v"] + h["lr"] * rate * g
    return w - s["v"]


def ref_lion(h, w, g, s, t):
    u = np.sign(h["beta1"] * s["m"] + (1 - h["beta1"]) * g)
    s["m"] = h["beta2"] * s["m"] + (1 - h["beta2"]) * g
    return w - h["lr"] * u


def ref_rmsprop_graves(h, w, g, s, t):
    s["n"] = h["decay"] * s["n"] + (1 - h["decay"]) * g * g
    s["g"] = h["decay"] * s["g"] + (1 - h["decay"]) * g
    s["d"] = h["momentum"] * s["d"] - h["lr"] * g / np.sqrt(s["n"] - s["g"] ** 2 + h["eps"])
    return w + s["d"]


def ref_sgdw(h, w, g, s, t):
    s["m"] = h["momentum"] * s["m"] + h["lr"] * g
    return w - s["m"] - h["lr"] / h["initial"]["lr"] * h["wd"] * w


ADAM_HYPER = dict(alpha=0.05, beta1=0.8, beta2=0.9, eps=1e-3)
BELIEF_FLAGS = dict(amsgrad=False, weight_decouple=False, fixed_decay=False, rectify=False)

# (solver, hyperparameters, reference, state names, learning-rate key)
CASES = {
    "Sgd": (S.Sgd, dict(lr=0.1), ref_sgd, (), "lr"),
    "Momentum": (S.Momentum, dict(lr=0.1, momentum=0.8), ref_momentum, ("m",), "lr"),
    "Nesterov": (S.Nesterov, dict(lr=0.1, momentum=0.8), ref_nesterov, ("m",), "lr"),
    "Adam": (S.Adam, dict(alpha=0.05, beta1=0.8, beta2=0.9, eps=1e-3), ref_adam,
             ("mean", "var"), "alpha"),
    "AdamW": (S.AdamW, dict(alpha=0.05, beta1=0.8, beta2=0.9, eps=1e-3, wd=0.05), ref_adamw,
              ("mean", "var"), "alpha"),
    "Adagrad": (S.Adagrad, dict(lr=0.1, eps=1e-3), ref_adagrad, ("v",), "lr"),
    "RMSprop": (S.RMSprop, dict(lr=0.1, decay=0.8, eps=1e-3), ref_rmsprop, ("v",), "lr"),
    "Adadelta": (S.Adadelta, dict(lr=0.5, decay=0.8, eps=1e-3), ref_adadelta,
                 ("e_sqr_grad", "e_sqr_delta"), "lr"),
    "Adamax": (S.Adamax, ADAM_HYPER, ref_adamax, ("m", "u"), "alpha"),
    "AMSGRAD": (S.AMSGRAD, dict(ADAM_HYPER, bias_correction=False), ref_amsgrad,
                ("m", "v", "v_hat"), "alpha"),
    "AMSGRAD-corrected": (S.AMSGRAD, dict(ADAM_HYPER, bias_correction=True), ref_amsgrad,
                          ("m", "v", "v_hat"), "alpha"),
    "AdaBound": (S.AdaBound, dict(ADAM_HYPER, final_lr=0.1, gamma=0.1), ref_adabound,
                 ("mean", "var"), "alpha"),
    "AMSBound": (S.AMSBound, dict(ADAM_HYPER, final_lr=0.1, gamma=0.1, bias_correction=True),
                 ref_amsbound, ("m", "v", "v_hat"), "alpha"),
    "AdaBelief": (S.AdaBelief, dict(ADAM_HYPER, wd=0.1, **BELIEF_FLAGS), ref_adabelief,
                  ("mean", "var"), "alpha"),
    "AdaBelief-all": (S.AdaBelief, dict(ADAM_HYPER, wd=0.1, amsgrad=True, weight_decouple=True,
                                        fixed_decay=False, rectify=True),
                      ref_adabelief, ("mean", "var", "s_max"), "alpha"),
    "AdaBelief-fixed": (S.AdaBelief, dict(ADAM_HYPER, wd=0.1, **dict(
        BELIEF_FLAGS, weight_decouple=True, fixed_decay=True)), ref_adabelief, ("mean", "var"),
        "alpha"),
    "Lamb": (S.Lamb, dict(eta=0.05, beta1=0.8, beta2=0.9, gamma_l=0.5, gamma_u=2.0, eps=1e-3,
                          bias_correction=True), ref_lamb, ("mean", "var"), "eta"),
    "Lars": (S.Lars, dict(lr=0.5, momentum=0.8, coefficient=0.02, eps=1.0), ref_lars, ("v",),
             "lr"),
    "Lion": (S.Lion, dict(lr=0.05, beta1=0.8, beta2=0.9), ref_lion, ("m",), "lr"),
    "RMSpropGraves": (S.RMSpropGraves, dict(lr=0.05, decay=0.8, momentum=0.7, eps=1e-2),
                      ref_rmsprop_graves, ("n", "g", "d"), "lr"),
    "SgdW": (S.SgdW, dict(lr=0.1, momentum=0.8, wd=0.05), ref_sgdw, ("m",), "lr"),
}


class Reference:
    """A per-parameter NumPy solver with its own copies of the parameters."""

    def __init__(self, step, hyper, state_names, params):
        self.step = step
        self.h = dict(hyper, alpha0=hyper.get("alpha"), initial=dict(hyper))
        self.w = {n: np.array(v.d, dtype=np.float64) for n, v in params.items()}
        self.s = {n: {k: np.zeros(v.shape) for k in state_names} for n, v in params.items()}
        self.t = dict.fromkeys(params, 0)

    def update(self, grads, names=None):
        for n in names or grads:
            self.t[n] += 1
            self.w[n] = self.step(self.h, self.w[n], grads[n], self.s[n], self.t[n])


def random_grads(rng, params):
    return {n: rng.randn(*v.shape) for n, v in params.items()}


def set_grads(params, grads):
    for n, v in params.items():
        v.g = grads[n]


def assert_params(params, expected, rtol=1e-12, atol=1e-14):
    for n, v in params.items():
        np.testing.assert_allclose(v.d, expected[n], rtol=rtol, atol=atol, err_msg=n)


def assert_grads(params, expected):
    for n, v in params.items():
        np.testing.assert_array_equal(v.g, expected[n], err_msg=n)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_update_matches_reference(double, rng, case, layout):
    make, hyper, step, state_names, lr_key = CASES[case]
    params, n_runs = LAYOUTS[layout](rng)
    outside = {n: v.d.copy() for n, v in nn.get_parameters().items() if n not in params}
    solver = make(**hyper)
    solver.set_parameters(params)
    assert len(solver.runs) == n_runs
    ref = Reference(step, hyper, state_names, params)
    for it in range(4):
        if it == 2:  # a schedule step: AdamW's decay follows alpha / alpha0
            solver.set_learning_rate(solver.learning_rate() * 0.5)
            ref.h[lr_key] *= 0.5
        grads = random_grads(rng, params)
        set_grads(params, grads)
        solver.update()
        ref.update(grads)
    assert_params(params, ref.w)
    states = solver.get_states()
    for n in params:
        assert states[n].t == 4
        assert sorted(states[n].pstate) == sorted(state_names)
        for k in state_names:
            np.testing.assert_allclose(states[n].pstate[k].d, ref.s[n][k], rtol=1e-12, atol=1e-14)
    for n, before in outside.items():
        np.testing.assert_array_equal(nn.get_parameters()[n].d, before)


def test_network_parameters_form_one_run(rng):
    shapes = [(8, 4, 3, 3), (8,), (8,), (16, 8, 3, 3), (16,), (16,), (10, 16), (10,)] * 6
    for i, shape in enumerate(shapes):
        nn.get_parameter_or_create(f"p{i}", shape, rng.randn(*shape))
    params = nn.get_parameters()
    solver = S.Adam()
    solver.set_parameters(params)
    (run,) = solver.runs
    assert run.size == sum(v.size for v in params.values())
    assert all(np.shares_memory(run.data(), v.d) and np.shares_memory(run.grad(), v.g)
               for v in params.values())
    before = {n: v.d.copy() for n, v in params.items()}
    set_grads(params, random_grads(rng, params))
    solver.update()
    assert all(not np.array_equal(v.d, before[n]) for n, v in params.items())
    assert all(v.d.dtype == np.float32 for v in params.values())


def test_float32_parameters_follow_the_float64_reference(rng):
    params = make_params({n: rng.randn(*s).astype(np.float32) for n, s in SHAPES.items()})
    solver = S.Adam(alpha=0.05, eps=1e-3)
    solver.set_parameters(params)
    ref = Reference(ref_adam, solver.info, ("mean", "var"), params)
    for _ in range(3):
        grads = {n: g.astype(np.float32) for n, g in random_grads(rng, params).items()}
        set_grads(params, grads)
        solver.update()
        ref.update(grads)
    assert all(v.d.dtype == np.float32 for v in params.values())
    assert all(s.pstate["mean"].d.dtype == np.float32 for s in solver.get_states().values())
    assert_params(params, ref.w, rtol=1e-5, atol=1e-6)


def test_weight_decay_adds_decay_times_weight_to_gradients(double, rng):
    params, _ = mixed_layout(rng)
    grads = random_grads(rng, params)
    set_grads(params, grads)
    solver = S.Momentum()
    solver.set_parameters(params)
    solver.weight_decay(0.0)
    assert_grads(params, grads)
    solver.weight_decay(0.25)
    for n, v in params.items():
        np.testing.assert_allclose(v.g, grads[n] + 0.25 * v.d, rtol=1e-12)


def test_adamw_weight_decay_sets_the_decoupled_rate_of_the_next_update(double, rng):
    params, _ = flat_layout(rng)
    hyper = dict(alpha=0.05, eps=1e-3, wd=0.01)
    solver = S.AdamW(**hyper)
    solver.set_parameters(params)
    ref = Reference(ref_adamw, solver.info, ("mean", "var"), params)
    for decay in (0.3, None):
        grads = random_grads(rng, params)
        set_grads(params, grads)
        if decay is not None:
            solver.weight_decay(decay)
            assert_grads(params, grads)
        ref.h["wd"] = hyper["wd"] if decay is None else decay
        solver.update()
        ref.update(grads)
        assert_params(params, ref.w)


@pytest.mark.parametrize("layout", ["mixed", "subset"])
def test_clip_grad_by_norm_scales_each_parameter(double, rng, layout):
    params, _ = LAYOUTS[layout](rng)
    names = list(params)
    grads = random_grads(rng, params)
    grads[names[0]] *= 10.0  # far above the clip norm
    grads[names[1]] *= 0.01  # below it: unchanged
    grads[names[-1]][...] = 0.0  # zero stays zero, without NaN
    set_grads(params, grads)
    solver = S.Sgd()
    solver.set_parameters(params)
    solver.clip_grad_by_norm(1.5)
    for n, v in params.items():
        norm = np.sqrt(np.sum(grads[n] ** 2))
        np.testing.assert_allclose(v.g, 1.5 * grads[n] / max(1.5, norm), rtol=1e-12, err_msg=n)
    assert np.linalg.norm(params[names[0]].g) == pytest.approx(1.5)
    np.testing.assert_array_equal(params[names[1]].g, grads[names[1]])


@pytest.mark.parametrize("clip_norm", [0.0, -1.0])
def test_clip_grad_by_norm_rejects_non_positive_norms(rng, clip_norm):
    solver = S.Sgd()
    solver.set_parameters(flat_layout(rng)[0])
    with pytest.raises(DpnbError, match="clip_norm > 0"):
        solver.clip_grad_by_norm(clip_norm)


def test_learning_rate_setters(double, rng):
    sgd = S.Sgd(lr=0.1)
    assert sgd.learning_rate() == pytest.approx(0.1)
    sgd.set_learning_rate(0.01)
    assert sgd.learning_rate() == pytest.approx(0.01) and sgd.info == {"lr": 0.01}
    adam = S.Adam(alpha=0.002)
    adam.set_learning_rate(0.004)
    assert adam.learning_rate() == pytest.approx(0.004) and adam.info["alpha"] == 0.004
    assert adam.name == "Adam" and S.AdamW().name == "AdamW"

    params, _ = flat_layout(rng)
    before = {n: v.d.copy() for n, v in params.items()}
    grads = random_grads(rng, params)
    set_grads(params, grads)
    sgd.set_parameters(params)
    sgd.update()
    assert_params(params, {n: before[n] - 0.01 * grads[n] for n in params})


def test_default_hyperparameters_are_nnabla_s():
    assert S.Sgd().info == {"lr": 1e-3}
    assert S.Momentum().info == {"lr": 1e-3, "momentum": 0.9}
    assert S.Nesterov().info == {"lr": 1e-3, "momentum": 0.9}
    assert S.Adam().info == {"alpha": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    assert S.AdamW().info == {"alpha": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                              "wd": 1e-4}
    assert S.Adagrad().info == {"lr": 1e-2, "eps": 1e-8}
    assert S.RMSprop().info == {"lr": 1e-3, "decay": 0.9, "eps": 1e-8}


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_check_inf_or_nan_grad(rng, bad):
    params, _ = mixed_layout(rng)
    set_grads(params, random_grads(rng, params))
    solver = S.Adam()
    solver.set_parameters(params)
    assert solver.check_inf_or_nan_grad() is False
    params["b/b"].g[3] = bad
    assert solver.check_inf_or_nan_grad() is True
    solver.zero_grad()
    assert solver.check_inf_or_nan_grad() is False
    params["loose"].g[1, 2] = bad
    assert solver.check_inf_or_nan_grad() is True


def test_zero_grad_clears_only_the_solver_s_gradients(rng):
    params, _ = subset_layout(rng)
    loose = nn.Variable.from_numpy_array(rng.randn(2), need_grad=True)
    params["loose"] = loose
    every = dict(nn.get_parameters(), loose=loose)
    set_grads(every, random_grads(rng, every))
    left_out = nn.get_parameters()["a/b"].g.copy()
    solver = S.Sgd()
    solver.set_parameters(params)
    solver.zero_grad()
    assert all(not v.g.any() for v in params.values())
    np.testing.assert_array_equal(nn.get_parameters()["a/b"].g, left_out)


def test_parameters_created_after_set_parameters_re_point_views(double, rng):
    params = make_params({"a/W": rng.randn(3, 4), "a/b": rng.randn(4)})
    solver = S.Momentum(lr=0.1, momentum=0.5)
    solver.set_parameters(params)
    ref = Reference(ref_momentum, solver.info, ("m",), params)
    stale = params["a/W"].d
    for it in range(3):
        big = nn.get_parameter_or_create(f"big{it}", (10000,), np.ones(10000))  # storage grows
        assert not np.shares_memory(stale, params["a/W"].d)
        stale = params["a/W"].d
        grads = random_grads(rng, params)
        set_grads(params, grads)
        solver.update()
        ref.update(grads)
        assert_params(params, ref.w)
        np.testing.assert_array_equal(big.d, 1.0)


def test_set_parameters_without_reset_keeps_earlier_states(double, rng):
    params = make_params(random_init(rng))
    first = {n: params[n] for n in ("a/W",)}
    solver = S.Adam(alpha=0.05, eps=1e-3)
    solver.set_parameters(first)
    ref = Reference(ref_adam, solver.info, ("mean", "var"), params)
    for _ in range(2):
        grads = random_grads(rng, params)
        set_grads(params, grads)
        solver.update()
        ref.update(grads, names=first)
    solver.set_parameters({n: v for n, v in params.items() if n != "a/W"}, reset=False)
    assert len(solver.runs) == 2  # a/W is at t=2, the others start at t=0
    for _ in range(2):
        grads = random_grads(rng, params)
        set_grads(params, grads)
        solver.update()
        ref.update(grads)
    assert_params(params, ref.w)
    assert {n: s.t for n, s in solver.get_states().items()} == {"a/W": 4, "a/b": 2, "b/W": 2,
                                                                 "b/b": 2}


@pytest.mark.parametrize("retain_state, expected_t", [(False, 0), (True, 1)])
def test_set_parameters_again_resets_or_retains_a_state(rng, retain_state, expected_t):
    params, _ = flat_layout(rng)
    solver = S.Momentum()
    solver.set_parameters(params)
    solver.update()
    solver.set_parameters({"a/b": params["a/b"]}, reset=False, retain_state=retain_state)
    states = solver.get_states()
    assert states["a/b"].t == expected_t and states["a/W"].t == 1
    assert list(solver.get_parameters()) == list(params)


def test_remove_parameters(double, rng):
    params, _ = flat_layout(rng)
    solver = S.Sgd(lr=0.1)
    solver.set_parameters(params)
    solver.remove_parameters(["a/b"])
    assert "a/b" not in solver.get_parameters() and len(solver.runs) == 2
    before = {n: v.d.copy() for n, v in params.items()}
    grads = random_grads(rng, params)
    set_grads(params, grads)
    solver.update()
    np.testing.assert_array_equal(params["a/b"].d, before["a/b"])
    assert_params({n: params[n] for n in ("a/W", "b/W")},
                  {n: before[n] - 0.1 * grads[n] for n in ("a/W", "b/W")})
    with pytest.raises(DpnbError, match="no parameters.*'zzz'"):
        solver.remove_parameters(["zzz"])


def steps(solver, params, grads):
    for g in grads:
        set_grads(params, g)
        solver.update()


def test_save_and_load_states_continue_like_an_uninterrupted_run(double, rng, tmp_path):
    params, _ = mixed_layout(rng)
    params.pop("a/b")  # a non-contiguous subset as well
    grads = [random_grads(rng, params) for _ in range(6)]
    path = tmp_path / "states.npz"
    solver = S.Adam(alpha=0.05, eps=1e-3)
    solver.set_parameters(params)
    steps(solver, params, grads[:3])
    solver.save_states(path)
    middle = {n: v.d.copy() for n, v in params.items()}
    steps(solver, params, grads[3:])
    final = {n: v.d.copy() for n, v in params.items()}

    for n, v in params.items():
        v.d = middle[n]
    resumed = S.Adam(alpha=0.05, eps=1e-3)
    resumed.set_parameters(params)
    resumed.load_states(path)
    steps(resumed, params, grads[3:])
    for n, v in params.items():
        np.testing.assert_array_equal(v.d, final[n], err_msg=n)

    with np.load(path) as saved:
        assert sorted(saved.files) == sorted(f"{n}/{k}" for n in params
                                             for k in ("mean", "var", "t"))
        assert int(saved["a/W/t"]) == 3 and saved["b/W/mean"].shape == (2, 3, 2)


def test_get_states_and_set_states_round_trip(double, rng):
    params, _ = mixed_layout(rng)
    grads = [random_grads(rng, params) for _ in range(3)]
    solver = S.Nesterov(lr=0.1)
    solver.set_parameters(params)
    steps(solver, params, grads[:2])
    snapshot = {n: v.d.copy() for n, v in params.items()}
    states = solver.get_states()
    steps(solver, params, grads[2:])
    expected = {n: v.d.copy() for n, v in params.items()}

    for n, v in params.items():
        v.d = snapshot[n]
    other = S.Nesterov(lr=0.1)
    other.set_parameters(params)
    other.set_states(states)
    steps(other, params, grads[2:])
    assert_params(params, expected, rtol=0)


def test_solver_without_parameters_does_nothing_but_refuses_state_files(tmp_path):
    """As in nnabla, a solver given no parameters (``set_parameters({})``) updates
    nothing; saving or loading its (absent) states is refused."""
    solver = S.Adam()
    solver.set_parameters({})
    solver.update()
    solver.zero_grad()
    solver.weight_decay(1e-4)
    solver.clip_grad_by_norm(1.0)
    solver.scale_grad(2.0)
    assert not solver.check_inf_or_nan_grad()
    assert solver.get_states() == {} and solver.get_parameters() == {}
    for call in (lambda: solver.save_states(tmp_path / "s.npz"),
                 lambda: solver.load_states(tmp_path / "s.npz")):
        with pytest.raises(DpnbError, match="no parameters.*set_parameters"):
            call()
    S.AdamW().weight_decay(1e-4)


def test_set_parameters_rejects_what_is_not_a_variable(rng):
    with pytest.raises(DpnbError, match="'x' is a ndarray.*from_numpy_array"):
        S.Sgd().set_parameters({"x": np.zeros(3)})
    with pytest.raises(DpnbError, match="dict of name -> nn.Variable, got list"):
        S.Sgd().set_parameters([nn.Variable((2,))])
    v = nn.Variable((2,), need_grad=True)
    with pytest.raises(DpnbError, match="'x' and 'y' are the same array"):
        S.Sgd().set_parameters({"x": v, "y": v.unlinked()})


def saved_states(rng, tmp_path, solver, params, name="states.npz"):
    solver.set_parameters(params)
    set_grads(params, random_grads(rng, params))
    solver.update()
    path = tmp_path / name
    solver.save_states(path)
    return path


def test_load_states_of_missing_or_broken_files(rng, tmp_path):
    solver = S.Adam()
    solver.set_parameters(flat_layout(rng)[0])
    with pytest.raises(DpnbError, match="does not exist"):
        solver.load_states(tmp_path / "nothing.npz")
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"not an npz archive")
    with pytest.raises(DpnbError, match=r"truncated or not a \.npz solver state file"):
        solver.load_states(broken)


def test_states_in_an_unknown_format_are_refused_not_written(rng, tmp_path):
    solver = S.Adam()
    solver.set_parameters(flat_layout(rng)[0])
    with pytest.raises(DpnbError, match=r"cannot save solver states in the '\.pkl' format.*"
                                        r"\.h5, \.protobuf, \.npz"):
        solver.save_states(tmp_path / "states.pkl")
    assert not list(tmp_path.iterdir())
    with pytest.raises(DpnbError, match=r"cannot load solver states in the 'extensionless' format"):
        solver.load_states(tmp_path / "states")


def test_load_states_for_other_parameters_names_them(rng, tmp_path):
    params, _ = flat_layout(rng)
    path = saved_states(rng, tmp_path, S.Adam(), params)
    solver = S.Adam()
    extra = nn.Variable.from_numpy_array(np.zeros(3), need_grad=True)
    solver.set_parameters({"a/W": params["a/W"], "c/W": extra})
    with pytest.raises(DpnbError, match=r"does not have: .*'a/b'.*missing entries: .*'c/W/mean'"):
        solver.load_states(path)


def test_load_states_with_other_shapes_names_them(rng, tmp_path):
    x = nn.Variable.from_numpy_array(rng.randn(3, 4), need_grad=True)
    path = saved_states(rng, tmp_path, S.Momentum(), {"x": x})
    solver = S.Momentum()
    solver.set_parameters({"x": nn.Variable.from_numpy_array(rng.randn(2, 2), need_grad=True)})
    with pytest.raises(DpnbError, match=r"x/m has shape \(3, 4\).*'x' has shape \(2, 2\)"):
        solver.load_states(path)


def test_load_states_of_another_solver_type(rng, tmp_path):
    params, _ = flat_layout(rng)
    path = saved_states(rng, tmp_path, S.Momentum(), params)
    solver = S.Adam()
    solver.set_parameters(params)
    with pytest.raises(DpnbError, match="does not use: .*'a/W/m'.*missing entries: .*'a/W/mean'"):
        solver.load_states(path)


def test_loaded_states_with_different_steps_keep_them(double, rng, tmp_path):
    """As in nnabla, each parameter keeps its own step count ``t``, also within a run."""
    make, hyper, step, state_names, _ = CASES["Adam"]
    params, _ = flat_layout(rng)
    reference = Reference(step, hyper, state_names, params)
    solver = make(**hyper)
    solver.set_parameters(params)
    grads = random_grads(rng, params)
    set_grads(params, grads)
    solver.update()
    reference.update(grads)
    path = tmp_path / "states.npz"
    solver.save_states(path)
    with np.load(path) as saved:
        arrays = dict(saved)
    arrays["a/b/t"] = np.array(5)
    np.savez(tmp_path / "edited.npz", **arrays)
    solver.load_states(tmp_path / "edited.npz")
    reference.t["a/b"] = 5
    assert {n: s.t for n, s in solver.get_states().items()} == {
        "a/W": 1, "a/b": 5, "b/W": 1, "b/b": 1}
    grads = random_grads(rng, params)
    set_grads(params, grads)
    solver.update()
    reference.update(grads)
    assert_params(params, reference.w)
    assert solver.get_states()["a/b"].t == 6


def test_set_states_of_another_solver_type(rng):
    params, _ = flat_layout(rng)
    momentum = S.Momentum()
    momentum.set_parameters(params)
    adam = S.Adam()
    adam.set_parameters(params)
    with pytest.raises(DpnbError, match=r"entries \['m'\].*Adam keeps \['mean', 'var'\]"):
        adam.set_states(momentum.get_states())


def test_gpu_matches_cpu(rng, gpu):
    init = {n: rng.randn(*s).astype(np.float32) for n, s in SHAPES.items()}
    grads = [{n: 3 * rng.randn(*s).astype(np.float32) for n, s in SHAPES.items()}
             for _ in range(3)]
    results = {}
    for ext in ("cpu", "cudnn"):
        nn.clear_parameters()
        with nn.context_scope(get_extension_context(ext)):
            params = make_params(init)
            subset = {n: params[n] for n in ("a/W", "b/W", "b/b")}
            solver = S.AdamW(alpha=0.05, eps=1e-3)
            solver.set_parameters(subset)
            for g in grads:
                set_grads(subset, g)
                solver.clip_grad_by_norm(2.0)
                solver.update()
            assert solver.check_inf_or_nan_grad() is False
            subset["b/b"].g[0] = np.nan
            assert solver.check_inf_or_nan_grad() is True
            results[ext] = {n: to_module(v.d, np) for n, v in params.items()}
    for n in init:
        np.testing.assert_allclose(results["cudnn"][n], results["cpu"][n], rtol=1e-5, atol=1e-6)


def test_scale_grad_multiplies_every_gradient(double, rng):
    params, _ = mixed_layout(rng)
    grads = random_grads(rng, params)
    set_grads(params, grads)
    solver = S.Lamb()
    solver.set_parameters(params)
    solver.scale_grad(0.25)
    assert_grads(params, {n: 0.25 * g for n, g in grads.items()})
    with pytest.raises(DpnbError, match="scale_grad expects scale to be a number, got 'x'"):
        solver.scale_grad("x")


@pytest.mark.parametrize("bad, inf, nan", [(np.inf, True, False), (-np.inf, True, False),
                                           (np.nan, False, True)])
def test_check_inf_grad_and_check_nan_grad(rng, bad, inf, nan):
    params, _ = mixed_layout(rng)
    set_grads(params, random_grads(rng, params))
    solver = S.Sgd()
    solver.set_parameters(params)
    assert (solver.check_inf_grad(), solver.check_nan_grad()) == (False, False)
    params["loose"].g[0, 1] = bad
    assert (solver.check_inf_grad(), solver.check_nan_grad()) == (inf, nan)
    params["b/W"].g[1, 0, 1] = np.nan
    assert solver.check_nan_grad() is True


def test_setup_is_refused_as_in_nnabla(rng):
    with pytest.raises(DpnbError, match=r"setup\(params\) is deprecated.*set_parameters"):
        S.Sgd().setup(flat_layout(rng)[0])


FUSED = {"AdamW": True, "SgdW": True, "Lamb": True, "Lars": True, "Lion": True, "Adam": False,
         "Sgd": False, "AMSGRAD": False, "Adadelta": False, "RMSpropGraves": False}


@pytest.mark.parametrize("name", sorted(FUSED))
def test_weight_decay_of_fused_solvers_waits_for_the_next_update(double, rng, name):
    params, _ = flat_layout(rng)
    grads = random_grads(rng, params)
    set_grads(params, grads)
    solver = getattr(S, name)()
    solver.set_parameters(params)
    assert solver.weight_decay_is_fused() is FUSED[name]
    solver.weight_decay(0.5)
    if FUSED[name]:
        assert_grads(params, grads)
    else:
        for n, v in params.items():
            np.testing.assert_allclose(v.g, grads[n] + 0.5 * v.d, rtol=1e-12)


def test_adabelief_fuses_weight_decay_only_when_decoupled():
    assert S.AdaBelief().weight_decay_is_fused() is False
    assert S.AdaBelief(weight_decouple=True).weight_decay_is_fused() is True


def test_lion_decay_lasts_one_update(double):
    w = nn.Variable.from_numpy_array(np.array([1.0, -2.0]), need_grad=True)
    solver = S.Lion(lr=0.1)
    solver.set_parameters({"w": w})
    solver.weight_decay(0.5)
    solver.update()  # zero gradient: sign 0, only the decay moves w
    np.testing.assert_allclose(w.d, [0.95, -1.9], rtol=1e-12)
    solver.update()
    np.testing.assert_allclose(w.d, [0.95, -1.9], rtol=1e-12)


def test_adabelief_keeps_s_max_only_with_amsgrad(rng):
    params, _ = flat_layout(rng)
    plain, ams = S.AdaBelief(), S.AdaBelief(amsgrad=True)
    for solver in (plain, ams):
        solver.set_parameters(params)
    assert sorted(plain.get_states()["a/W"].pstate) == ["mean", "var"]
    assert sorted(ams.get_states()["a/W"].pstate) == ["mean", "s_max", "var"]
    with pytest.raises(DpnbError, match=r"entries \['mean', 'var'\].*AdaBelief keeps "
                                        r"\['mean', 's_max', 'var'\]"):
        ams.set_states(plain.get_states())


def test_flags_are_kept_as_bools():
    assert S.AMSBound(bias_correction=True).info["bias_correction"] is True
    info = S.AdaBelief(rectify=True).info
    assert info["rectify"] is True and info["amsgrad"] is False
    assert S.Lamb().info == {"eta": 1e-3, "beta1": 0.9, "beta2": 0.999, "gamma_l": 0.0,
                             "gamma_u": 10.0, "eps": 1e-6, "bias_correction": False}


@pytest.mark.parametrize("make, match", [
    (lambda: S.AMSGRAD(bias_correction="yes"),
     "AMSGRAD expects bias_correction to be True or False, got 'yes'"),
    (lambda: S.AdaBelief(amsgrad=1), "AdaBelief expects amsgrad to be True or False, got 1"),
    (lambda: S.Lars(lr="0.1"), r"Lars expects lr to be a number, got '0.1' \(str\)"),
    (lambda: S.Lion(beta1=None), "Lion expects beta1 to be a number, got None"),
    (lambda: S.SgdW(wd=True), "SgdW expects wd to be a number, got True"),
])
def test_bad_hyperparameters_are_refused(make, match):
    with pytest.raises(DpnbError, match=match):
        make()


def test_bad_learning_rates_and_decay_rates_are_refused(rng):
    solver = S.Lamb()
    solver.set_parameters(flat_layout(rng)[0])
    with pytest.raises(DpnbError, match="set_learning_rate expects learning_rate to be a number"):
        solver.set_learning_rate("fast")
    with pytest.raises(DpnbError, match="weight_decay expects decay_rate to be a number"):
        solver.weight_decay([0.1])
    for rate in (-1e-3, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="set_learning_rate expects a learning rate that is "
                                             "finite and not negative"):
            solver.set_learning_rate(rate)
        with pytest.raises(ValueError, match=r"Adam expects .* not negative.* alpha=0\.001"):
            S.Adam(rate)
    solver.set_learning_rate(0)
    assert solver.learning_rate() == 0.0


@pytest.mark.parametrize("name", ["Adadelta", "Lamb", "Lars", "RMSpropGraves", "AMSBound"])
def test_set_states_with_wrong_shapes_names_them(rng, name):
    params, _ = flat_layout(rng)
    solver = getattr(S, name)()
    solver.set_parameters(params)
    states = solver.get_states()
    key = min(states["a/b"].pstate)
    states["a/b"].pstate[key] = nn.Variable.from_numpy_array(np.zeros((2, 2)))
    with pytest.raises(DpnbError, match=rf"state a/b/{key} has shape \(2, 2\), but parameter "
                                        r"'a/b' has shape \(4,\)"):
        solver.set_states(states)


def test_solver_states_are_made_empty_and_filled_as_in_nnabla(double, rng):
    params, _ = flat_layout(rng)
    solver = S.RMSpropGraves()
    solver.set_parameters(params)
    states = {}
    for name, value in params.items():
        state = S.SolverState()
        assert state.pstate == {} and state.t == 0
        state.pstate = {k: nn.Variable.from_numpy_array(np.full(value.shape, 0.5))
                        for k in ("n", "g", "d")}
        state.t = 3
        states[name] = state
    solver.set_states(states)
    got = solver.get_states()
    assert all(s.t == 3 and float(s.pstate["d"].d.min()) == 0.5 for s in got.values())
