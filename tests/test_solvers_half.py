"""Solvers on float16 parameters (a ``type_config="half"`` context): updated in
float32 with float32 states, as nnabla's mixed precision does.  Each update is
compared with the NumPy references of test_solvers.py computed in float32 from
the same float16 parameters and gradients and rounded back to float16, with
tiny gradients (whose squares underflow float16), normal and large ones (whose
squares overflow it), nnabla's default hyperparameters (``eps`` 1e-8 is 0 in
float16) and the references', and weight decay at every step."""
import h5py
import numpy as np
import pytest
from test_solvers import CASES, adam_moments

import dpnb as nn
import dpnb.solvers as S
from dpnb.solvers import runs
from dpnb.context import to_module
from dpnb.ext_utils import get_extension_context

HALF = {"cpu": get_extension_context("cpu", type_config="half")}
SHAPES = {"a/W": (3, 4), "a/b": (4,), "b/W": (2, 3, 2), "b/b": (5,)}
STEPS = 3
DECAY = 1e-4  # decay * w stays small beside tiny gradients: their squares still underflow


def make_half_params(rng, shapes=SHAPES, loose=True) -> dict:
    """float16 parameters in flat storage and, with ``loose``, a float16 variable
    outside it between them (three runs)."""
    for name, shape in shapes.items():
        scope, short = name.split("/")
        with nn.parameter_scope(scope):
            nn.get_parameter_or_create(short, shape, rng.randn(*shape))
    params = nn.get_parameters()
    if not loose:
        return params
    names = list(params)
    mixed = {n: params[n] for n in names[:2]}
    mixed["loose"] = nn.Variable.from_numpy_array(rng.randn(3, 3).astype(np.float16),
                                                  need_grad=True)
    mixed.update((n, params[n]) for n in names[2:])
    return mixed


def half_grads(rng, params, kind: str) -> dict:
    """float16 gradients: ``tiny`` (1e-7 to 1e-4, some zero), ``normal`` or ``large`` (to 3000)."""
    grads = {}
    for n, v in params.items():
        g = rng.randn(*v.shape)
        if kind == "tiny":
            g *= 10.0 ** rng.uniform(-7, -4, v.shape)
            g.flat[::5] = 0
        elif kind == "large":
            g *= 10.0 ** rng.uniform(2, 3.5, v.shape)
        grads[n] = g.astype(np.float16)
    return grads


# -- fused weight decay, which test_solvers' references leave out ---------------
def ref_lamb_decayed(h, w, g, s, t):
    adam_moments(h, g, s, "mean", "var")
    m, v = s["mean"], s["var"]
    if h["bias_correction"]:
        m, v = m / (1 - h["beta1"] ** t), v / (1 - h["beta2"] ** t)
    r = m / (np.sqrt(v) + h["eps"]) + h["wd"] * w
    trust = np.clip(np.linalg.norm(w), h["gamma_l"], h["gamma_u"]) / np.linalg.norm(r)
    return w - h["eta"] * trust * r


def ref_lars_decayed(h, w, g, s, t):
    w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
    denominator = g_norm + h["wd"] * w_norm
    denominator = denominator + h["eps"] if denominator < h["eps"] else denominator
    rate = np.float32(1) if w_norm < h["eps"] else h["coefficient"] * w_norm / denominator
    s["v"] = h["momentum"] * s["v"] + h["lr"] * rate * (g + h["wd"] * w)
    return w - s["v"]


def ref_lion_decayed(h, w, g, s, t):
    u = np.sign(h["beta1"] * s["m"] + (1 - h["beta1"]) * g)
    s["m"] = h["beta2"] * s["m"] + (1 - h["beta2"]) * g
    return w * (1 - h["lr"] * h["wd"]) - h["lr"] * u


DECAYED = {"Lamb": ref_lamb_decayed, "Lars": ref_lars_decayed, "Lion": ref_lion_decayed}


class Float32Reference:
    """A per-parameter NumPy solver in float32: each step starts from the float16
    parameters and gradients given, and its result is rounded to float16."""

    def __init__(self, step, hyper: dict, state_names, params):
        self.step = step
        h = {k: v if isinstance(v, bool) else np.float32(v) for k, v in hyper.items()}
        self.h = dict(h, alpha0=h.get("alpha"), initial=dict(h))
        self.s = {n: {k: np.zeros(v.shape, np.float32) for k in state_names}
                  for n, v in params.items()}
        self.t = 0

    def update(self, w16: dict, g16: dict) -> dict:
        self.t += 1
        result = {}
        for n, w in w16.items():
            w = self.step(self.h, w.astype(np.float32), g16[n].astype(np.float32),
                          self.s[n], self.t)
            self.s[n] = {k: np.asarray(a, np.float32) for k, a in self.s[n].items()}
            result[n] = np.asarray(w, np.float32).astype(np.float16)
        return result


def decayed_grads(w16: dict, g16: dict) -> dict:
    """nnabla's weight_decay on float16 gradients: ``g + decay * w`` in float32, rounded."""
    return {n: (g16[n].astype(np.float32) + np.float32(DECAY) * w16[n].astype(np.float32))
            .astype(np.float16) for n in g16}


def assert_within_rounding(got, expected, what: str) -> None:
    """``got`` (float16, finite) within one float16 rounding step of ``expected``."""
    got = to_module(got, np)
    assert got.dtype == np.float16, what
    assert np.isfinite(got).all(), f"{what}: {got}"
    ulp = np.spacing(np.abs(expected)).astype(np.float64)
    error = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    assert (error <= ulp).all(), f"{what}: off by {np.max(error / ulp):.1f} float16 steps"


def hyperparameters(case: str, kind: str) -> dict:
    """The reference's hyperparameters, or nnabla's defaults (with the case's flags)."""
    hyper = CASES[case][1]
    return hyper if kind == "case" else {k: v for k, v in hyper.items() if isinstance(v, bool)}


def check_case(case: str, grads: str, hyper_kind: str, params: dict, rng) -> S.Solver:
    """STEPS updates with weight decay against the float32 reference; returns the solver."""
    make, _, step, state_names, _ = CASES[case]
    solver = make(**hyperparameters(case, hyper_kind))
    solver.set_parameters(params)
    fused = solver.weight_decay_is_fused()
    if fused:
        step = DECAYED.get(make.__name__, step)
    ref = Float32Reference(step, dict(solver.info, wd=DECAY) if fused else solver.info,
                           state_names, params)
    for i in range(STEPS):
        w16 = {n: to_module(v.d, np).copy() for n, v in params.items()}
        g16 = half_grads(rng, params, grads)
        for n, v in params.items():
            v.g = g16[n]
        solver.weight_decay(DECAY)
        if not fused:
            g16 = decayed_grads(w16, g16)
            for n, v in params.items():
                np.testing.assert_array_equal(to_module(v.g, np), g16[n], err_msg=n)
        solver.update()
        expected = ref.update(w16, g16)
        for n, v in params.items():
            assert_within_rounding(v.d, expected[n], f"{case}: {n} after update {i + 1}")
    states = solver.get_states()
    for n in params:
        assert states[n].t == STEPS
        for k in state_names:
            got = to_module(states[n].pstate[k].d, np)
            assert got.dtype == np.float32, f"{n}/{k}"
            want = ref.s[n][k]  # sums of terms of either sign: errors relative to the largest
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max(),
                                       err_msg=f"{case}: state {n}/{k}")
    return solver


@pytest.mark.parametrize("hyper_kind", ["defaults", "case"])
@pytest.mark.parametrize("grads", ["tiny", "normal", "large"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_half_updates_follow_the_float32_reference(rng, case, grads, hyper_kind):
    with nn.context_scope(HALF["cpu"]):
        params = make_half_params(rng)
        assert all(v.d.dtype == np.float16 for v in params.values())
        solver = check_case(case, grads, hyper_kind, params, rng)
        assert len(solver.runs) == 3


@pytest.mark.parametrize("case", sorted(CASES))
def test_half_runs_of_several_slices(rng, case):
    """A run of several CPU update slices, parameter ends inside slices."""
    shapes = {"a/W": (300, 500), "a/b": (500,), "b/W": (runs.CPU_SLICE + 7,)}
    with nn.context_scope(HALF["cpu"]):
        params = make_half_params(rng, shapes, loose=False)
        solver = check_case(case, "tiny", "defaults", params, rng)
        (run,) = solver.runs
        assert run.size > 2 * runs.CPU_SLICE


@pytest.mark.parametrize("name", ["Adam", "AdamW", "Adagrad", "RMSprop"])
def test_issue_first_update_of_half_parameters_is_finite(name):
    """The report: ``w.g = [0, 1e-4]`` and one default update gave ``[nan, -inf]``."""
    with nn.context_scope(HALF["cpu"]):
        w = nn.get_parameter_or_create("w", (2,), np.array([1.0, 2.0]))
        assert w.d.dtype == np.float16
        w.g = [0, 1e-4]
        solver = getattr(S, name)()
        solver.set_parameters({"w": w})
        solver.update()
    _, _, step, state_names, _ = CASES[name]
    expected = Float32Reference(step, solver.info, state_names, {"w": w}).update(
        {"w": np.array([1.0, 2.0], np.float16)}, {"w": np.array([0, 1e-4], np.float16)})
    assert_within_rounding(w.d, expected["w"], name)
    assert w.d[0] == 1.0 and w.d[1] < 2.0


def test_half_states_are_float32_and_set_states_casts_to_them(rng):
    with nn.context_scope(HALF["cpu"]):
        params = make_half_params(rng)
        solver = S.Adam()
        solver.set_parameters(params)
        states = solver.get_states()
        assert all(s.pstate[k].d.dtype == np.float32 for s in states.values() for k in s.pstate)
        for n, s in states.items():
            s.pstate["var"] = nn.Variable.from_numpy_array(np.full(params[n].shape, 1e-9,
                                                                   np.float32))
            s.pstate["mean"] = nn.Variable.from_numpy_array(np.full(params[n].shape, 0.25,
                                                                    np.float16))
        solver.set_states(states)
        got = solver.get_states()
    for s in got.values():
        var, mean = s.pstate["var"].d, s.pstate["mean"].d
        assert var.dtype == np.float32 and np.all(var == np.float32(1e-9))  # not 0, as in float16
        assert mean.dtype == np.float32 and np.all(mean == 0.25)


@pytest.mark.parametrize("fmt", [".h5", ".protobuf", ".npz"])
def test_half_states_save_as_float32_and_resume_exactly(rng, tmp_path, fmt):
    """State files hold float32 arrays, as nnabla writes for half parameters, and a
    resumed run continues bit for bit."""
    path = tmp_path / f"states{fmt}"
    with nn.context_scope(HALF["cpu"]):
        params = make_half_params(rng)
        grads = [half_grads(rng, params, "tiny") for _ in range(4)]
        solver = S.AdamW()
        solver.set_parameters(params)

        def steps(solver, grads):
            for g in grads:
                for n, v in params.items():
                    v.g = g[n]
                solver.update()

        steps(solver, grads[:2])
        solver.save_states(path)
        middle = {n: v.d.copy() for n, v in params.items()}
        steps(solver, grads[2:])
        final = {n: v.d.copy() for n, v in params.items()}
        for n, v in params.items():
            v.d = middle[n]
        resumed = S.AdamW()
        resumed.set_parameters(params)
        resumed.load_states(path)
        assert all(s.pstate[k].d.dtype == np.float32
                   for s in resumed.get_states().values() for k in s.pstate)
        steps(resumed, grads[2:])
    for n, v in params.items():
        assert np.isfinite(v.d).all()
        np.testing.assert_array_equal(v.d, final[n], err_msg=n)
    if fmt == ".h5":
        with h5py.File(path) as f:
            assert f["a/W/mean"].dtype == np.float32 and f["loose/var"].dtype == np.float32
    elif fmt == ".npz":
        with np.load(path) as saved:
            assert saved["a/W/mean"].dtype == np.float32 and saved["loose/var"].dtype == np.float32


def test_half_clip_grad_by_norm_takes_norms_in_float32(rng):
    """Squares of 300 overflow float16 and squares of 3e-5 underflow it."""
    with nn.context_scope(HALF["cpu"]):
        params = make_half_params(rng)
        grads = {n: rng.randn(*v.shape).astype(np.float16) for n, v in params.items()}
        grads["a/W"] = (300 * rng.randn(3, 4)).astype(np.float16)
        grads["b/b"] = (3e-5 * rng.randn(5)).astype(np.float16)
        for n, v in params.items():
            v.g = grads[n]
        solver = S.Sgd()
        solver.set_parameters(params)
        solver.clip_grad_by_norm(1e-5)
    for n, v in params.items():
        g = grads[n].astype(np.float32)
        norm = np.sqrt(np.sum(g * g))
        expected = (g * (np.float32(1e-5) / max(np.float32(1e-5), norm))).astype(np.float16)
        assert_within_rounding(v.g, expected, n)
        assert np.any(v.g != 0), n


def test_half_scale_grad_multiplies_in_float32(rng):
    """A scale of 1e-6 is subnormal in float16: rounded there, it would be 1.3% off."""
    with nn.context_scope(HALF["cpu"]):
        params = make_half_params(rng)
        grads = {n: (500 * rng.randn(*v.shape)).astype(np.float16) for n, v in params.items()}
        for n, v in params.items():
            v.g = grads[n]
        solver = S.Adam()
        solver.set_parameters(params)
        solver.scale_grad(1e-6)
    for n, v in params.items():
        expected = (grads[n].astype(np.float32) * np.float32(1e-6)).astype(np.float16)
        np.testing.assert_array_equal(v.g, expected, err_msg=n)


@pytest.mark.parametrize("bad", [np.inf, np.nan, 70000.0])
def test_half_check_inf_or_nan_grad(rng, bad):
    """70000 is beyond float16's range: assigned to a float16 gradient it is inf."""
    with nn.context_scope(HALF["cpu"]):
        params = make_half_params(rng)
        for v in params.values():
            v.g = np.full(v.shape, 60000.0)
        solver = S.Adam()
        solver.set_parameters(params)
        assert solver.check_inf_or_nan_grad() is False
        with np.errstate(over="ignore"):
            params["loose"].g[1, 1] = bad
        assert solver.check_inf_or_nan_grad() is True


@pytest.mark.parametrize("grads", ["tiny", "large"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_half_updates_on_gpu_follow_the_float32_reference(rng, case, grads, gpu):
    with nn.context_scope(get_extension_context("cudnn", type_config="half")):
        params = make_half_params(rng)
        assert all(to_module(v.d, np).dtype == np.float16 for v in params.values())
        check_case(case, grads, "defaults", params, rng)
