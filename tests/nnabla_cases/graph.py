"""Variables, NdArrays and graph passes: cases run with nnabla (record_graph.py) and with
dpnb (test_nnabla_graph.py). Each takes the library's ``nn`` and ``F`` modules."""
import numpy as np


def leaf(nn, values, need_grad=True):
    """A float32 leaf variable holding ``values``."""
    return nn.Variable.from_numpy_array(np.asarray(values, np.float32), need_grad=need_grad)


def lists(a):
    """An array as nested lists (a 0-d one as a number), for JSON."""
    return np.asarray(a).tolist()


def raises(call) -> bool:
    """Whether ``call()`` raises (the libraries' error classes differ, so only that)."""
    try:
        call()
    except Exception:
        return True
    return False


def backward_seeds(nn, F) -> dict:
    """backward with the default grad, grad=None after setting y.g, scalars, arrays, NdArrays."""
    def doubled():
        x = leaf(nn, [1.0, 2.0, 3.0])
        y = F.mul_scalar(x, 2.0)
        y.forward()
        return x, y

    cases = {}
    x, y = doubled()
    y.backward()
    cases["default_on_non_scalar"] = {"x_g": lists(x.g), "y_g": lists(y.g)}

    x, y = doubled()
    y.g = np.array([1.0, 10.0, 100.0])
    y.backward(grad=None)
    cases["none_uses_y_g"] = {"y_g_set": [1.0, 10.0, 100.0], "x_g": lists(x.g), "y_g": lists(y.g)}

    x, y = doubled()
    y.g = 7
    y.backward(grad=3)
    cases["scalar_leaves_y_g"] = {"y_g_set": 7, "grad": 3, "x_g": lists(x.g), "y_g": lists(y.g)}

    x, y = doubled()
    y.backward(grad=np.array([1.0, 2.0, 3.0]))
    cases["array"] = {"grad": [1.0, 2.0, 3.0], "x_g": lists(x.g), "y_g": lists(y.g)}

    x, y = doubled()
    y.backward(grad=nn.NdArray.from_numpy_array(np.array([1.0, 0.0, -1.0])))
    cases["ndarray"] = {"grad": [1.0, 0.0, -1.0], "x_g": lists(x.g)}

    x = leaf(nn, [1.0, 2.0, 3.0])
    h = F.mul_scalar(x, 2.0)
    y = F.sum(h)
    y.forward()
    y.backward()
    y.backward()
    cases["twice"] = {"x_g": lists(x.g), "h_g": lists(h.g), "y_g": lists(y.g)}
    cases["leaf_raises"] = raises(leaf(nn, [1.0, 2.0]).backward)
    return cases


def hooks(nn, F) -> dict:
    """Which functions the pre/post hooks see in forward and backward."""
    x = leaf(nn, [1.0, 2.0, 3.0])
    h = F.mul_scalar(x, 2.0)
    c = leaf(nn, [1.0, 1.0, 1.0], need_grad=False)
    y = F.sum(F.add2(h, F.add2(c, c)))
    forward, backward, backward_no_grad = [], [], []
    y.forward(function_pre_hook=lambda f: forward.append(["pre", f.name]),
              function_post_hook=lambda f: forward.append(["post", f.name]))
    y.backward(function_pre_hook=lambda f: backward.append(["pre", f.name]),
               function_post_hook=lambda f: backward.append(["post", f.name]))
    frozen = F.sum(F.mul_scalar(leaf(nn, [1.0, 2.0], need_grad=False), 2.0))
    frozen.forward()
    frozen.backward(function_pre_hook=lambda f: backward_no_grad.append(f.name))
    return {"forward": forward, "backward": backward, "backward_no_grad": backward_no_grad,
            "x_g": lists(x.g)}


def outputs_are_arrays(nn, F) -> dict:
    """The type, shape and writeability of reductions' .d."""
    x = leaf(nn, [[1.0, 2.0], [3.0, 4.0]])
    cases = {}
    for name in ("mean", "sum", "max"):
        y = getattr(F, name)(x)
        y.forward()
        cases[name] = {"type": type(y.d).__name__, "shape": list(y.d.shape),
                       "writeable": bool(y.d.flags.writeable), "value": float(y.d)}
    return cases


def reshapes(nn, F, inplace_of) -> dict:
    """Linked and unlinked reshapes: what they share with the source and pass back.
    ``inplace_of(function)`` reads a Reshape function's inplace flag (the APIs differ there)."""
    x = leaf(nn, np.arange(6).reshape(2, 3))
    y = x.reshape((3, 2))
    x.d[0, 0] = 100
    z = F.sum(F.mul2(y, y))
    z.forward()
    z.backward()
    cases = {"reshape": {"parent": y.parent.name, "need_grad": y.need_grad,
                         "shares_data": bool(np.shares_memory(y.d, x.d)),
                         "shares_grad": bool(np.shares_memory(y.g, x.g)),
                         "y_d_row0": lists(y.d[0]), "x_g": lists(x.g),
                         "inplace": inplace_of(y.parent)}}
    u = x.reshape((6,), unlink=True)
    cases["reshape_unlink"] = {"parent_is_none": u.parent is None, "need_grad": u.need_grad,
                               "shares_data": bool(np.shares_memory(u.d, x.d)),
                               "shares_grad": bool(np.shares_memory(u.g, x.g))}
    frozen = leaf(nn, np.arange(6), need_grad=False)
    cases["reshape_need_grad_false"] = [frozen.reshape((2, 3)).need_grad,
                                        frozen.reshape((2, 3), unlink=True).need_grad]
    return cases


def reset_shape(nn, F) -> dict:
    """reset_shape to the same size, to another (refused unless forced), and downstream."""
    v = leaf(nn, np.arange(6))
    v.reset_shape((2, 3))
    same = {"shape": list(v.shape), "d": lists(v.d)}
    refused = raises(lambda: v.reset_shape((4,)))
    v.reset_shape((4,), force=True)
    forced = {"shape": list(v.shape), "d": lists(v.d), "g_shape": list(v.g.shape)}
    v = leaf(nn, np.arange(6))
    w = F.mul_scalar(v, 2.0)
    v.reset_shape((2, 3))
    before = list(w.shape)
    w.forward()
    return {"same_size": same, "other_size_raises": refused, "forced": forced,
            "downstream_before_forward": before,
            "downstream_after_forward": list(w.shape), "downstream_d": lists(w.d)}


def unlinked(nn, F) -> dict:
    """get_unlinked_variable (and its old name unlinked): what the copy keeps."""
    h = F.mul_scalar(leaf(nn, [1.0, 2.0]), 2.0)
    h.name, h.info, h.persistent = "h", {"tag": 1}, True
    u1, u2 = h.get_unlinked_variable(), h.get_unlinked_variable(need_grad=False)
    return {"parent_is_none": [u1.parent is None, u2.parent is None],
            "need_grad": [u1.need_grad, u2.need_grad, h.need_grad],
            "name": u1.name, "info_is_none": u1.info is None,
            "persistent": u1.persistent,
            "deprecated_alias_need_grad": h.unlinked(need_grad=False).need_grad}


def apply_and_defaults(nn, F) -> dict:
    """Variable.apply sets attributes and returns the variable; a fresh one's name and info."""
    a = leaf(nn, [1.0])
    r = a.apply(persistent=True, need_grad=False, name="a")
    fresh = nn.Variable((2, 3))
    return {"apply": {"returns_self": r is a, "persistent": a.persistent,
                      "need_grad": a.need_grad, "name": a.name},
            "defaults": {"name": fresh.name, "info_is_none": fresh.info is None}}


def rank_and_references(nn, F) -> dict:
    """rank, function_references and size_from_axis of variables in a small graph."""
    x = leaf(nn, [1.0, 2.0])
    h = F.mul_scalar(x, 2.0)
    h2 = F.add2(h, x)
    h3 = F.add2(F.mul_scalar(h2, 1.0), h)
    t = nn.Variable((2, 3, 4))
    return {"rank": [x.rank, h.rank, h2.rank, h3.rank],
            "function_references": {"x": [f.name for f in x.function_references],
                                    "h": [f.name for f in h.function_references],
                                    "h3": [f.name for f in h3.function_references]},
            "size_from_axis": {str(axis): t.size_from_axis(axis)
                               for axis in (-2, -1, 0, 1, 2, 3)},
            "size_from_axis_default": t.size_from_axis()}


def visit(nn, F) -> dict:
    """visit and visit_check: the order functions are seen in and what is returned."""
    x = leaf(nn, [1.0, 2.0])
    out = F.add2(F.mul_scalar(x, 2.0), F.identity(x))
    names = []
    visited = out.visit(lambda f: names.append(f.name))
    checked = []
    found = out.visit_check(lambda f: checked.append(f.name) or f.name == "Identity")
    results = {"false": False, "none": None, "zero": 0, "one": 1}
    return {"names": names, "returns_none": visited is None, "check_names": checked,
            "found": found,
            "unfound": {key: repr(out.visit_check(lambda f, r=r: r))
                        for key, r in results.items()},
            "last_result": repr(out.visit_check(
                lambda f: None if f.name == "Add2" else False))}


def sink(nn, F) -> dict:
    """F.sink: its output, the gradients it seeds (or leaves), and two losses at once."""
    x = leaf(nn, [1.0, 2.0, 3.0])
    a = F.mul_scalar(x, 2.0)
    b = F.sum(F.mul2(x, x))
    s = F.sink(a, b)
    s.forward()
    s.backward()
    ones = {"shape": list(s.shape), "need_grad": s.need_grad, "parent": s.parent.name,
            "a_d": lists(a.d), "b_d": float(b.d), "x_g": lists(x.g), "a_g": lists(a.g),
            "b_g": float(b.g)}
    x.g = 0
    a.g = np.array([1.0, 0.0, -1.0])
    b.g = 10
    s2 = F.sink(a, b, one_input_grad=False)
    s2.forward()
    s2.backward()
    held = {"a_g": [1.0, 0.0, -1.0], "b_g": 10.0, "x_g": lists(x.g)}
    x = leaf(nn, [1.0, 2.0, 3.0])
    both = F.sink(F.mean(x), F.sum(F.mul2(x, x)))
    both.forward()
    both.backward()
    frozen = F.sink(F.mul_scalar(leaf(nn, [1.0], need_grad=False), 2.0))
    return {"ones": ones, "held": held, "two_losses_x_g": lists(x.g),
            "no_grad_input_need_grad": frozen.need_grad}


def no_grad(nn, F) -> dict:
    """Variables made under no_grad, statically and with auto_forward."""
    x = leaf(nn, [1.0, 2.0, 3.0])
    with nn.no_grad():
        h = F.mul_scalar(x, 2.0)
        with nn.auto_forward():
            e = F.mul_scalar(x, 2.0)
    y = F.sum(F.mul_scalar(h, 3.0))
    y.forward()
    y.backward()
    return {"no_grad_static": {"need_grad": h.need_grad, "has_parent": h.parent is not None,
                               "x_g": lists(x.g)},
            "no_grad_auto_forward": {"need_grad": e.need_grad,
                                     "has_parent": e.parent is not None, "d": lists(e.d)}}


def forward_all(nn, F) -> dict:
    """nn.forward_all: shared functions run once, upstream outputs, a bare variable refused."""
    x = leaf(nn, [1.0, 2.0])
    h = F.mul_scalar(x, 2.0)
    a = F.add_scalar(h, 1.0)
    b = F.mul_scalar(h, 3.0)
    calls = []
    returned = nn.forward_all([a, b], function_pre_hook=lambda f: calls.append(f.name))
    shared = {"returns_none": returned is None, "calls": calls, "a_d": lists(a.d),
              "b_d": lists(b.d)}
    upstream = []
    nn.forward_all([h, a], function_pre_hook=lambda f: upstream.append(f.name))
    return {"forward_all": shared, "forward_all_upstream_calls": upstream,
            "forward_all_single_raises": raises(lambda: nn.forward_all(a))}


def ndarrays(nn, F) -> dict:
    """NdArray construction, fill/zero, cast, get_data and copy_from."""
    a = nn.NdArray((2, 3))
    cases = {"default": {"shape": list(a.shape), "dtype": str(a.data.dtype), "size": a.size,
                         "ndim": a.ndim, "size_from_axis_1": a.size_from_axis(1)},
             "int_shape": list(nn.NdArray(3).shape), "no_shape": list(nn.NdArray().shape)}
    src = np.arange(6).reshape(2, 3)
    b = nn.NdArray.from_numpy_array(src)
    src[0, 0] = 9
    cases["from_numpy_array"] = {"dtype": str(b.dtype), "shape": list(b.shape), "d": lists(b.data)}
    c = nn.NdArray((2,))
    c.fill(3)
    filled = lists(c.data)
    c.zero()
    cases["fill_zero"] = {"filled": filled, "zeroed": lists(c.data)}
    d = nn.NdArray.from_numpy_array(np.array([1.7, -2.2], np.float32))
    r = d.cast(np.int32)
    cases["cast"] = {"returned_type": type(r).__name__, "values": lists(r), "dtype": str(d.dtype),
                     "data_dtype": str(d.data.dtype)}
    e = nn.NdArray.from_numpy_array(np.array([1.0, 2.0], np.float32))
    cases["get_data"] = {"r_writeable": bool(e.get_data("r").flags.writeable),
                         "rw_writeable": bool(e.get_data("rw").flags.writeable),
                         "dtype_arg": str(e.get_data("r", dtype=np.float64).dtype),
                         "dtype_after": str(e.dtype)}
    f = nn.NdArray((2,))
    cases["copy_from"] = {"returns_self": f.copy_from(e) is f, "d": lists(f.data)}
    return cases


def function_objects(nn, F) -> dict:
    """A function object run on variables given explicitly: forward after new input data,
    backward accumulating or not, setup after a reshape, recompute with the same draws."""
    cases = {}
    x = leaf(nn, [[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
    w = leaf(nn, [[1.0, 2.0], [-1.0, 0.5], [0.25, -2.0]])
    y = F.affine(x, w)
    f = y.parent
    x.d = [[1.0, 2.0, 3.0], [-1.0, 0.0, 1.0]]
    f.forward([x, w], [y])
    cases["forward_after_new_data"] = lists(y.d)
    y.g = [[1.0, -1.0], [2.0, 0.5]]
    x.g = 1.0
    w.g = 0.0
    f.backward([x, w], [y])
    cases["backward_accumulates"] = {"x_g": lists(x.g), "w_g": lists(w.g)}
    f.backward([x, w], [y], [False, True])
    cases["backward_accum_false_true"] = {"x_g": lists(x.g), "w_g": lists(w.g)}
    w.need_grad = False
    w.g = 7.0
    f.backward([x, w], [y], [False, False])
    cases["backward_skips_no_need_grad"] = {"x_g": lists(x.g), "w_g": lists(w.g)}
    x.reset_shape((4, 3), force=True)
    f.setup([x, w], [y])
    cases["setup_after_reset_shape"] = list(y.shape)

    d = F.dropout(leaf(nn, np.linspace(1.0, 2.0, 40).reshape(4, 10)), p=0.5)
    g = d.parent
    s = F.sin(leaf(nn, [0.5, 1.0]))
    cases["need_setup_recompute"] = {"dropout": bool(g.need_setup_recompute(0)),
                                     "sin": bool(s.parent.need_setup_recompute(0))}
    g.setup_recompute(g.inputs, [d])
    g.forward(g.inputs, [d])
    drawn = d.d.copy()
    d.data.clear()
    cleared = bool(d.data.clear_called)
    g.recompute(g.inputs, [d])
    cases["recompute_draws_the_same"] = {"cleared": cleared, "same": bool(np.array_equal(
        d.d, drawn)), "after_read": bool(d.data.clear_called)}
    s.data.clear()
    s.parent.recompute(s.parent.inputs, [s])
    cases["recompute_deterministic"] = lists(s.d)
    return cases


def need_grad_on_outputs(nn, F) -> dict:
    """need_grad set on a function's output: False stops backward there (set after the
    graph is built, or before building on it; the GAN idiom), True gives it a gradient."""
    cases = {}
    x = leaf(nn, [1.0, 2.0])
    h = F.sin(x)
    y = F.sum(F.cos(h))
    h.need_grad = False
    y.forward()
    x.g = 0.0
    y.backward()
    cases["false_after_building"] = {"x_g": lists(x.g), "h_g": lists(h.g)}
    h2 = F.sin(x)
    h2.need_grad = False
    y2 = F.sum(F.cos(h2))
    y2.forward()
    x.g = 0.0
    y2.backward()
    cases["false_before_building"] = {"y_need_grad": bool(y2.need_grad), "x_g": lists(x.g)}
    w, dw = leaf(nn, [0.5]), leaf(nn, [2.0])
    fake = F.mul2(x, F.broadcast(w, (2,)))
    fake.need_grad = False
    loss = F.sum(F.mul2(fake, F.broadcast(dw, (2,))))
    loss.forward()
    w.g, dw.g = 0.0, 0.0
    loss.backward()
    cases["gan_idiom"] = {"w_g": lists(w.g), "dw_g": lists(dw.g)}
    a = leaf(nn, [1.0, 2.0], need_grad=False)
    g = F.sin(a)
    default = bool(g.need_grad)
    g.need_grad = True
    z = F.sum(F.cos(g))
    z.forward()
    z.backward()
    cases["true_without_leaves"] = {"default": default, "g_g": lists(g.g)}
    return cases


def ndarray_arithmetic(nn, F) -> dict:
    """NdArrays with operators: computed at once into NdArrays (with a variable on either
    side too), integers in float, in place with ``+=`` and its kin; F on NdArrays."""
    def arr(values, dtype=np.float32):
        return nn.NdArray.from_numpy_array(np.asarray(values, dtype))

    a, i = arr([1.0, 2.0]), arr([1, 2], np.int32)
    v = nn.Variable.from_numpy_array(np.array([3.0, 4.0], np.float32))
    results = {"a + v": a + v, "v + a": v + a, "a - a": a - a, "a * 2": a * 2,
               "2 - a": 2 - a, "-a": -a, "a ** 2": a ** 2, "2 ** a": 2 ** a, "a / v": a / v,
               "3 / a": 3 / a, "i + 1": i + 1, "i / 2": i / 2, "F.exp(a)": F.exp(a),
               "F.add2(a, v)": F.add2(a, v)}
    cases = {name: {"type": type(r).__name__, "dtype": str(r.dtype), "values": lists(r.data)}
             for name, r in results.items()}
    b = arr([1.0, 2.0])
    same = b
    b += 1
    b -= arr([0.5, 0.5])
    b *= 3
    b /= 2  # (nnabla makes a new array for **=, and for *= and /= by an NdArray)
    cases["in_place"] = {"same_object": b is same, "values": lists(same.data)}
    p = nn.Variable.from_numpy_array(np.array([1.0, 2.0], np.float32), need_grad=True)
    p.g = [2.0, 4.0]
    p.data -= p.grad * 0.25
    cases["sgd_step"] = lists(p.d)
    return cases


def assignments_broadcast(nn, F) -> dict:
    """``.d`` and ``.g`` take any value that broadcasts to the variable's shape; one that
    does not is a ValueError."""
    v = nn.Variable((2, 4))
    v.d = np.arange(4.0)
    v.g = [[1.0], [2.0]]
    try:
        v.d = np.arange(8.0)
        refused = "no"
    except ValueError:
        refused = "ValueError"
    return {"d": lists(v.d), "g": lists(v.g), "not_broadcasting": refused}


def clearing(nn, F) -> dict:
    """Which intermediates a forward that clears frees (``clear_called``): F.sink's inputs
    are kept; so are the data backward reads, unless clear_buffer."""
    def cleared(names, root, **flags):
        root.forward(**flags)
        return {name: bool(v.data.clear_called) for name, v in names.items()}

    def with_grad():
        x = leaf(nn, np.ones((2, 3)))
        h = F.identity(x)
        y = F.sin(h)
        z = F.add_scalar(y, 1.0)
        return {"h": h, "y": y, "z": z}, x

    cases = {}
    for flags in ({"clear_no_need_grad": True}, {"clear_buffer": True}):
        key = next(iter(flags))
        names, _ = with_grad()
        cases[f"{key}_sink"] = cleared(names, F.sink(names["z"]), **flags)
        names, _ = with_grad()
        cases[f"{key}_sum"] = cleared(names, F.sum(names["z"]), **flags)
        names, _ = with_grad()
        cases[f"{key}_sink_two"] = cleared(names, F.sink(names["z"], names["h"]), **flags)
    a = leaf(nn, np.ones((2, 3)), need_grad=False)
    w = leaf(nn, np.full((2, 3), 2.0))
    h = F.identity(a)
    y = F.mul2(h, w)
    cases["read_by_backward_without_grad"] = cleared({"h": h}, F.sum(y), clear_no_need_grad=True)
    return cases


def record(nn, F, inplace_of) -> dict:
    """Every case's result, under the keys the fixture keeps them."""
    return {"backward": backward_seeds(nn, F), "hooks": hooks(nn, F),
            "outputs": outputs_are_arrays(nn, F),
            "variable": {**reshapes(nn, F, inplace_of), "reset_shape": reset_shape(nn, F),
                         "unlinked": unlinked(nn, F), **apply_and_defaults(nn, F),
                         **rank_and_references(nn, F), "visit": visit(nn, F)},
            "sink": sink(nn, F), "no_grad_forward_all": {**no_grad(nn, F), **forward_all(nn, F)},
            "ndarray": ndarrays(nn, F), "function_objects": function_objects(nn, F),
            "need_grad_on_outputs": need_grad_on_outputs(nn, F), "clearing": clearing(nn, F),
            "ndarray_arithmetic": ndarray_arithmetic(nn, F),
            "assignments_broadcast": assignments_broadcast(nn, F)}
