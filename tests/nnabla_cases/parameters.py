"""Parameter naming, scopes, get_parameter_or_create, initializer formulas, F.max/F.min and
parametric functions with explicit initializers: cases run with nnabla or dpnb, given as modules."""
import inspect
from collections import OrderedDict

import numpy as np

SLASH_SCOPES = ("a/b", "/a/", "a//b", "", "/")
MAX_MIN_AXES = [None, 0, 1, 2, -1, [1, 2], [0, 2], [0, 1, 2]]
MAX_MIN_FLAGS = ({}, {"with_index": True}, {"only_index": True},
                 {"with_index": True, "only_index": True})
INITIALIZER_ARGS = [(16, 8, (3, 3)), (10, 5, (1, 1)), (3, 64, (5, 5)), (7, 2, (2, 3, 4)), (6, 6, ())]
BATCH_NORMALIZATION_AXES = {"axes_1": [1], "axes_minus_1": [-1], "axes_0_2": [0, 2]}


def names(nn, grad_only=False):
    """The registered parameters' names, in order."""
    return list(nn.get_parameters(grad_only=grad_only))


def small_network(PF, x):
    """Every parametric function dpnb has, with and without ``name=``."""
    h = PF.convolution(x, 4, (3, 3), pad=(1, 1), name="c1")
    h = PF.batch_normalization(h, name="b1")
    h = PF.convolution(h, 4, (3, 3), pad=(1, 1))
    h = PF.batch_normalization(h)
    h = PF.convolution(h, 4, (1, 1), name="blk/c2", with_bias=False)
    h = PF.affine(h, 5, name="fc")
    return PF.affine(h, 3)


def network_names(nn, PF):
    """The names the small network's parameters get, at the root and inside a scope."""
    nn.clear_parameters()
    x = nn.Variable((2, 3, 6, 6))
    small_network(PF, x)
    out = {"network": names(nn), "network_grad_only": names(nn, True)}
    nn.clear_parameters()
    with nn.parameter_scope("net"):
        small_network(PF, x)
    out["network_in_scope"] = names(nn)
    return out


def slash_scope(nn, PF, P, scope):
    """The names created inside a scope whose name has leading, trailing or doubled slashes."""
    nn.clear_parameters()
    with nn.parameter_scope(scope):
        PF.affine(nn.Variable((2, 4)), 2)
        P.get_parameter_or_create("p/q", (3,))
        inside = names(nn)
    return {"inside": inside, "outside": names(nn)}


def build_scopes(nn, PF):
    """Fresh parameters a/affine and a/b/f/affine; what the current scope is inside a/b."""
    nn.clear_parameters()
    x = nn.Variable((2, 4))
    with nn.parameter_scope("a") as a:
        PF.affine(x, 2)
        with nn.parameter_scope("b") as b:
            PF.affine(x, 2, name="f")
            current = nn.get_current_parameter_scope()
            return {"type": type(current).__name__, "keys": list(current),
                    "is_yielded": current is b, "is_child_of_a": a["b"] is b}


def current_scopes(nn, PF):
    """get_current_parameter_scope inside a nested scope and back at the root."""
    inside = build_scopes(nn, PF)
    root = nn.get_current_parameter_scope()
    return {"current_inside_b": inside,
            "current_at_root": {"type": type(root).__name__, "keys": list(root),
                                "affine_keys": list(root["a"]["affine"])}}


def get_parameters_options(nn, PF):
    """get_parameters with path= (at the root and in a scope) and with params=."""
    build_scopes(nn, PF)
    out = {"default": names(nn), "path_zz": list(nn.get_parameters(path="zz"))}
    with nn.parameter_scope("a"):
        out["path_zz_in_a"] = list(nn.get_parameters(path="zz"))
    out["params_given"] = list(nn.get_parameters(params=OrderedDict(pre=None)))
    given = OrderedDict()
    out["params_is_returned"] = nn.get_parameters(params=given) is given
    return out


def clear_and_local_scopes(nn, PF):
    """clear_parameters inside a scope, and a parameter_scope given its own scope dict."""
    build_scopes(nn, PF)
    with nn.parameter_scope("a"):
        nn.clear_parameters()
    out = {"clear_in_scope_a": {"names": names(nn),
                                "root_keys": list(nn.get_current_parameter_scope())}}
    nn.clear_parameters()
    local = OrderedDict()
    with nn.parameter_scope("loc", scope=local):
        PF.affine(nn.Variable((2, 4)), 2)
    out["local_scope"] = {"global_names": names(nn), "local_keys": list(local),
                          "local_inner": list(local["loc"]["affine"])}
    return out


def scopes(nn, PF, P):
    """Every scope case, under the keys of the fixture's "scopes"."""
    out = {scope: slash_scope(nn, PF, P, scope) for scope in SLASH_SCOPES}
    out.update(current_scopes(nn, PF))
    out["get_parameters"] = get_parameters_options(nn, PF)
    out.update(clear_and_local_scopes(nn, PF))
    return out


def refused_calls(P):
    """Calls of get_parameter_or_create that nnabla refuses (with an "arr" of shape (2, 3))."""
    return {"wrong_array_shape": lambda: P.get_parameter_or_create("w", (3,), np.zeros(2)),
            "existing_other_shape": lambda: P.get_parameter_or_create("arr", (3, 3)),
            "no_shape_no_initializer": lambda: P.get_parameter_or_create("none"),
            "list_initializer": lambda: P.get_parameter_or_create("l", (2,), [1, 2])}


def raises(call):
    """Whether ``call()`` raised (nnabla's and dpnb's error classes differ)."""
    try:
        call()
    except Exception:
        return True
    return False


def get_parameter_or_create(nn, P, I):
    """Arrays as initializers, need_grad and as_need_grad on re-grabbing, no_grad, refusals."""
    nn.clear_parameters()
    out = {}
    p = P.get_parameter_or_create("arr", initializer=np.arange(6.0).reshape(2, 3))
    out["array_without_shape"] = {"shape": list(p.shape), "need_grad": p.need_grad,
                                  "value": p.d.tolist()}

    def registered():
        return nn.get_parameters(grad_only=False)["arr"]

    q = P.get_parameter_or_create("arr", (2, 3), need_grad=False)
    out["regrab_need_grad_false"] = {"returned": q.need_grad, "registered": registered().need_grad,
                                     "in_grad_only": "arr" in nn.get_parameters()}
    r = P.get_parameter_or_create("arr", (2, 3), need_grad=True, as_need_grad=False)
    out["as_need_grad_false"] = {"returned": r.need_grad, "registered": registered().need_grad,
                                 "same_object": r is registered(),
                                 "same_data": bool(np.shares_memory(r.d, registered().d))}
    u = P.get_parameter_or_create("s/t/u", (3,), I.ConstantInitializer(2))
    out["slash_name"] = names(nn)
    out["returned_names"] = [p.name, u.name]
    with nn.no_grad():
        g = P.get_parameter_or_create("arr", (2, 3), need_grad=True)
    out["in_no_grad"] = {"returned": g.need_grad, "registered": registered().need_grad}
    out["raises"] = {label: raises(call) for label, call in refused_calls(P).items()}
    return out


def initializer_formulas(I, inmaps, outmaps, kernel):
    """Glorot and He limits and deviations, with the types they come as."""
    lim = I.calc_uniform_lim_glorot(inmaps, outmaps, kernel)
    return {
        "args": [inmaps, outmaps, list(kernel)],
        "uniform_lim_glorot": [float(v) for v in lim],
        "uniform_lim_glorot_types": [type(lim).__name__] + [type(v).__name__ for v in lim],
        "normal_std_glorot": float(I.calc_normal_std_glorot(inmaps, outmaps, kernel)),
        "normal_std_he_forward": float(I.calc_normal_std_he_forward(inmaps, outmaps, kernel)),
        "normal_std_he_backward": float(I.calc_normal_std_he_backward(inmaps, outmaps, kernel)),
        "std_types": [type(I.calc_normal_std_glorot(inmaps, outmaps, kernel)).__name__,
                      type(I.calc_normal_std_he_forward(inmaps, outmaps, kernel)).__name__],
    }


def initializers(I):
    """Every initializer case, and the Glorot limit with the default kernel."""
    return {"cases": [initializer_formulas(I, *args) for args in INITIALIZER_ARGS],
            "default_kernel": [float(v) for v in I.calc_uniform_lim_glorot(4, 2)]}


def max_min_input():
    """A (2, 3, 4) input with ties for the maximum and the minimum."""
    x = np.random.RandomState(0).randn(2, 3, 4).astype(np.float32)
    x[0, :, 1] = x[0, 0, 1]        # a tie along axis 1
    x[1, 2, :] = 5.0               # ties along axis 2 and in the whole array
    x[1, 0, 3] = -5.0
    x[1, 1, 3] = -5.0              # a tie for the minimum
    return x


def max_min_case(nn, F, name, axis, keepdims, flags):
    """F.max or F.min of max_min_input: outputs (values or indices) and the input's gradient."""
    v = nn.Variable.from_numpy_array(max_min_input(), need_grad=True)
    result = getattr(F, name)(v, axis=tuple(axis) if isinstance(axis, list) else axis,
                              keepdims=keepdims, **flags)
    outs = list(result) if isinstance(result, tuple) else [result]
    for o in outs:
        o.forward()
    case = {"fn": name, "axis": axis, "keepdims": keepdims, "flags": flags,
            "outputs": [{"shape": list(o.shape), "dtype": str(o.d.dtype),
                         "value": np.asarray(o.d).tolist(), "need_grad": o.need_grad}
                        for o in outs]}
    if not flags.get("only_index"):
        v.grad.zero()
        outs[0].backward(np.ones(outs[0].shape))
        case["grad"] = v.g.tolist()
    return case


def max_min_cases(nn, F):
    """Every combination of function, axis, keepdims and index flags."""
    return [max_min_case(nn, F, name, axis, keepdims, flags)
            for name in ("max", "min") for axis in MAX_MIN_AXES
            for keepdims in (False, True) for flags in MAX_MIN_FLAGS]


def grad_through_index(nn, F):
    """The gradient that reaches the input through F.max's only_index output."""
    v = nn.Variable.from_numpy_array(max_min_input(), need_grad=True)
    index = F.max(v, axis=1, only_index=True)
    index.forward()
    v.grad.zero()
    index.backward(np.ones(index.shape))
    return v.g.tolist()


def affine_input(nn):
    """The (2, 6) input of the affine cases."""
    return nn.Variable.from_numpy_array(np.arange(12, dtype=np.float32).reshape(2, 6) / 4)


def bad_affine(PF, x):
    """An affine whose array w_init has the wrong shape."""
    return PF.affine(x, 3, w_init=np.zeros((5, 3)), name="bad")


def affine_cases(nn, PF):
    """PF.affine with array initializers, apply_w/apply_b, several outmaps and a bad array."""
    nn.clear_parameters()
    x = affine_input(nn)
    w = np.arange(18, dtype=np.float64).reshape(6, 3) / 10 - 0.7
    b = np.array([1.0, -2.0, 3.0])
    y = PF.affine(x, 3, w_init=w, b_init=b)
    y.forward()
    out = {"affine_arrays": {"x": x.d.tolist(), "w": w.tolist(), "b": b.tolist(),
                             "y": y.d.tolist(), "names": names(nn)}}
    y = PF.affine(x, 3, w_init=w, b_init=b, apply_w=lambda v: v * 2, apply_b=lambda v: v - 1,
                  name="applied")
    y.forward()
    out["affine_apply"] = {"y": y.d.tolist(),
                           "W": nn.get_parameters()["applied/affine/W"].d.tolist()}
    y = PF.affine(x, (2, 2), w_init=np.ones((6, 2, 2)) * 0.5, b_init=np.array([[0.0, 1], [2, 3]]),
                  name="multi")
    y.forward()
    out["affine_multi_outmaps"] = {"y": y.d.tolist(), "shape": list(y.shape)}
    out["affine_wrong_array_shape_raises"] = raises(lambda: bad_affine(PF, x))
    return out


def convolution_cases(nn, PF):
    """PF.convolution with array initializers, with and without apply_w/apply_b."""
    nn.clear_parameters()
    xc_value = np.random.RandomState(1).randn(2, 2, 5, 5).astype(np.float32)
    xc = nn.Variable.from_numpy_array(xc_value)
    wc = np.random.RandomState(2).randn(3, 2, 3, 3)
    bc = np.array([0.5, -1.0, 2.0])
    y = PF.convolution(xc, 3, (3, 3), pad=(1, 1), w_init=wc, b_init=bc)
    y.forward()
    out = {"conv_arrays": {"x": xc_value.tolist(), "w": wc.tolist(), "b": bc.tolist(),
                           "y": y.d.tolist()}}
    y = PF.convolution(xc, 3, (3, 3), w_init=wc, b_init=bc, apply_w=lambda v: v * 0.5,
                       apply_b=lambda v: v + 1, name="applied")
    y.forward()
    out["conv_apply"] = {"y": y.d.tolist()}
    return out


def default_init(nn, PF):
    """The default initial weights of a convolution and an affine for RandomState(0)."""
    nn.clear_parameters()
    x = nn.Variable((2, 2, 5, 5))
    PF.convolution(x, 4, (3, 3), rng=np.random.RandomState(0), name="c")
    PF.affine(x, 5, rng=np.random.RandomState(0), name="f")
    return {k: {"shape": list(v.shape), "dtype": str(v.d.dtype), "value": v.d.tolist()}
            for k, v in nn.get_parameters().items()}


def batch_normalization_input():
    """The (4, 3, 2) input of the batch-normalization cases."""
    return np.random.RandomState(3).randn(4, 3, 2).astype(np.float32)


def batch_normalization_case(nn, PF, axes):
    """PF.batch_normalization's output and parameter shapes for ``axes``."""
    nn.clear_parameters()
    y = PF.batch_normalization(nn.Variable.from_numpy_array(batch_normalization_input()), axes=axes)
    y.forward()
    return {"y": y.d.tolist(), "shapes": {k: list(v.shape) for k, v in
                                          nn.get_parameters(grad_only=False).items()}}


def batch_normalization_cases(nn, PF):
    """Every batch-normalization case, under the fixture's labels, with its input."""
    out = {"x": batch_normalization_input().tolist()}
    out.update({label: batch_normalization_case(nn, PF, axes)
                for label, axes in BATCH_NORMALIZATION_AXES.items()})
    return out


def parametric(nn, PF):
    """Every parametric-function case, under the keys of the fixture's "parametric"."""
    out = affine_cases(nn, PF)
    out.update(convolution_cases(nn, PF))
    out["default_init"] = default_init(nn, PF)
    out["batch_normalization"] = batch_normalization_cases(nn, PF)
    return out


def signature_targets(nn, F, I, P, PF):
    """The functions whose signatures (names and defaults) dpnb copies, by label."""
    return {"PF.affine": PF.affine, "PF.convolution": PF.convolution,
            "PF.batch_normalization": PF.batch_normalization,
            "PF.sync_batch_normalization": PF.sync_batch_normalization,
            "F.max": F.max, "F.min": F.min, "parameter_scope": nn.parameter_scope,
            "get_parameters": nn.get_parameters,
            "get_parameter_or_create": P.get_parameter_or_create,
            "set_parameter": P.set_parameter, "get_parameter": P.get_parameter,
            "pop_parameter": P.pop_parameter, "clear_parameters": nn.clear_parameters,
            "get_current_parameter_scope": nn.get_current_parameter_scope,
            "save_parameters": nn.save_parameters, "load_parameters": nn.load_parameters,
            "I.calc_uniform_lim_glorot": I.calc_uniform_lim_glorot,
            "I.calc_normal_std_glorot": I.calc_normal_std_glorot,
            "I.calc_normal_std_he_forward": I.calc_normal_std_he_forward,
            "I.calc_normal_std_he_backward": I.calc_normal_std_he_backward}


def signature(fn):
    """[name, repr(default) or None] for each parameter of ``fn``."""
    return [[p.name, repr(p.default) if p.default is not p.empty else None]
            for p in inspect.signature(fn).parameters.values()]
