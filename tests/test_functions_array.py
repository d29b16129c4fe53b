"""F.reshape, transpose, concatenate, slice and identity."""
import numpy as np
import pytest
from gradcheck import check_grad

import dpnb as nn
import dpnb.functions as F
from dpnb import DpnbError
from dpnb.ext_utils import get_extension_context


@pytest.mark.parametrize("shape, expected", [((6, 4), (6, 4)), ((-1,), (24,)), ((2, -1, 3), (2, 4, 3)),
                                             ((4, 3, 2, 1), (4, 3, 2, 1))])
@pytest.mark.parametrize("inplace", [True, False])
def test_reshape(shape, expected, inplace, rng):
    x = rng.randn(2, 3, 4)
    y = check_grad(lambda v: F.reshape(v, shape, inplace=inplace), [x])
    np.testing.assert_array_equal(y.d, x.reshape(expected))


def test_reshape_inplace_shares_memory_and_a_copy_does_not(rng):
    x = nn.Variable.from_numpy_array(rng.randn(2, 3))
    shared, copied = F.reshape(x, (3, 2)), F.reshape(x, (3, 2), inplace=False)
    shared.forward()
    copied.forward()
    assert np.shares_memory(shared.d, x.d)
    assert not np.shares_memory(copied.d, x.d)


@pytest.mark.parametrize("shape, message", [
    ((5, 5), r"Reshape: cannot reshape \(2, 3, 4\) \(24 elements\) to \(5, 5\); the new shape must"),
    ((5, -1), r"cannot reshape \(2, 3, 4\) \(24 elements\) to \(5, -1\)"),
    ((-1, -1), r"at most one -1, got \(-1, -1\)"),
    ((0, -1), r"to \(0, -1\)"),
    ((-2, 12), r"at most one -1, got \(-2, 12\)"),
])
def test_reshape_errors(shape, message):
    with pytest.raises(DpnbError, match=message):
        F.reshape(nn.Variable((2, 3, 4)), shape)


@pytest.mark.parametrize("axes", [(0, 1, 2), (2, 0, 1), (1, 0, 2), (2, 1, 0)])
def test_transpose(axes, rng):
    x = rng.randn(2, 3, 4)
    y = check_grad(lambda v: F.transpose(v, axes), [x])
    np.testing.assert_array_equal(y.d, np.transpose(x, axes))
    assert y.d.flags.c_contiguous


@pytest.mark.parametrize("axes", [(0, 1), (0, 1, 1), (0, 1, 3), (-1, 0, 1)])
def test_transpose_rejects_a_non_permutation(axes):
    with pytest.raises(DpnbError, match=r"Transpose: axes must be a permutation of 0..2 for an input of "
                                        r"shape \(2, 3, 4\), got "):
        F.transpose(nn.Variable((2, 3, 4)), axes)


@pytest.mark.parametrize("axis", [None, 0, 1, 2, -2])
def test_concatenate(axis, rng):
    ax = 2 if axis is None else axis % 3
    shapes = []
    for size in (1, 3, 2):
        shape = [2, 3, 4]
        shape[ax] = size
        shapes.append(tuple(shape))
    arrays = [rng.randn(*s) for s in shapes]
    build = (lambda *v: F.concatenate(*v)) if axis is None else (lambda *v: F.concatenate(*v, axis=axis))
    y = check_grad(build, arrays)
    np.testing.assert_array_equal(y.d, np.concatenate(arrays, axis=ax))


def test_concatenate_one_input_and_float32(rng):
    a = rng.randn(2, 3).astype(np.float32)
    y = F.concatenate(nn.Variable.from_numpy_array(a), axis=0)
    y.forward()
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.d, a)


def test_concatenate_errors():
    with pytest.raises(DpnbError, match=r"Concatenate: input 1 has shape \(2, 4\) but input 0 has "
                                        r"\(2, 3\); the shapes must be equal except on axis 0"):
        F.concatenate(nn.Variable((2, 3)), nn.Variable((2, 4)), axis=0)
    with pytest.raises(DpnbError, match=r"input 1 has shape \(2, 3, 1\)"):
        F.concatenate(nn.Variable((2, 3)), nn.Variable((2, 3, 1)))
    with pytest.raises(DpnbError, match=r"axis must be an int in \[-2, 2\)"):
        F.concatenate(nn.Variable((2, 3)), nn.Variable((2, 3)), axis=2)
    with pytest.raises(DpnbError, match="Concatenate: needs at least one input variable"):
        F.concatenate()


def _numpy_slice(x, start, stop, step):
    """The reference: Python slices on the last len(start) axes, written out by hand."""
    n = len(start)
    index = [slice(None)] * (x.ndim - n)
    index += [slice(a, b, c) for a, b, c in zip(start, stop, step)]
    return x[tuple(index)]


@pytest.mark.parametrize("start, stop, step", [
    ((0, 1, 0), (2, 3, 4), (1, 1, 2)),
    ((1, 0, 3), (2, 3, 0), (1, 2, -1)),
    ((-1, -2, None), (None, None, None), (None, -1, 3)),
    ((1,), (3,), (1,)),
    ((None, None), (None, None), (-1, -2)),
    ((0, 0, 0), (2, 3, 4), (1, 1, 1)),
])
def test_slice(start, stop, step, rng):
    x = rng.randn(2, 3, 4)
    y = check_grad(lambda v: F.slice(v, start, stop, step), [x])
    expected = _numpy_slice(x, start, stop, step)
    assert y.shape == expected.shape
    np.testing.assert_array_equal(y.d, expected)


def test_slice_defaults(rng):
    x = rng.randn(3, 4)
    v = nn.Variable.from_numpy_array(x)
    whole, start_only, stop_only = F.slice(v), F.slice(v, start=(1, 2)), F.slice(v, stop=(2, -1))
    stepped = F.slice(v, step=(2, -1))
    for y in (whole, start_only, stop_only, stepped):
        y.forward()
    np.testing.assert_array_equal(whole.d, x)
    np.testing.assert_array_equal(start_only.d, x[1:, 2:])
    np.testing.assert_array_equal(stop_only.d, x[:2, :-1])
    np.testing.assert_array_equal(stepped.d, x[::2, ::-1])


def test_slice_output_is_a_copy(rng):
    x = nn.Variable.from_numpy_array(rng.randn(3, 4))
    y = F.slice(x, (0, 1), (2, 3))
    y.forward()
    assert not np.shares_memory(y.d, x.d)


@pytest.mark.parametrize("kwargs, message", [
    ({"start": (0, 0), "stop": (1,)}, r"Slice: start, stop and step must have the same length"),
    ({"start": (0, 0, 0)}, r"at most the number of dimensions 2 of \(3, 4\)"),
    ({"step": (1, 0)}, r"step must not be 0, got \[1, 0\]"),
    ({"start": (0.5, 0)}, r"must hold ints or None"),
])
def test_slice_errors(kwargs, message):
    with pytest.raises(DpnbError, match=message):
        F.slice(nn.Variable((3, 4)), **kwargs)


def test_identity_copies(rng):
    x = rng.randn(2, 3)
    y = check_grad(F.identity, [x])
    np.testing.assert_array_equal(y.d, x)
    v = nn.Variable.from_numpy_array(x)
    w = F.identity(v)
    w.forward()
    assert not np.shares_memory(w.d, v.d)


def _run(build, arrays, w):
    """Forward and backward of ``build`` in the current context, as NumPy arrays."""
    xs = [nn.Variable.from_numpy_array(a, need_grad=True) for a in arrays]
    y = build(*xs)
    y.forward()
    y.backward(w)
    return [np.asarray(v.get() if hasattr(v, "get") else v) for v in [y.d] + [x.g for x in xs]]


GPU_CASES = {
    "reshape": (lambda a, b: F.reshape(a, (4, -1)) + F.reshape(b, (4, 6), inplace=False), (4, 6)),
    "transpose": (lambda a, b: F.transpose(a, (2, 0, 1)) * F.transpose(b, (2, 0, 1)), (4, 2, 3)),
    "concatenate": (lambda a, b: F.concatenate(a, b, axis=1), (2, 6, 4)),
    "slice": (lambda a, b: F.slice(a, (1, None, -1), (None, None, 0), (1, 2, -2)) - F.identity(
        F.slice(b, (1, 0, 0), (2, 2, 2))), (1, 2, 2)),
}


@pytest.mark.parametrize("name", GPU_CASES)
def test_gpu_matches_cpu(name, rng, gpu):
    build, out_shape = GPU_CASES[name]
    a, b, w = rng.randn(2, 3, 4), rng.randn(2, 3, 4), rng.randn(*out_shape)
    cpu = _run(build, [a, b], w)
    with nn.context_scope(get_extension_context("cudnn")):
        gpu = _run(build, [a, b], w)
    for g, c in zip(gpu, cpu):
        np.testing.assert_array_equal(g, c)


def test_sink_backward_is_the_gradient_of_the_summed_inputs(rng):
    x = nn.Variable.from_numpy_array(rng.randn(2, 3), need_grad=True)
    a, b = F.mul2(x, x), F.sum(F.reshape(x, (3, 2)), axis=0)
    s = F.sink(a, b)
    s.forward()
    assert s.shape == () and float(s.d) == 0.0
    s.backward()
    eps, numeric = 1e-6, np.zeros(x.shape)
    for j in range(x.size):
        values = []
        for step in (eps, -eps):
            x.d.reshape(-1)[j] += step
            nn.forward_all([a, b])
            values.append(float(a.d.sum() + b.d.sum()))
            x.d.reshape(-1)[j] -= step
        numeric.reshape(-1)[j] = (values[0] - values[1]) / (2 * eps)
    np.testing.assert_allclose(x.g, numeric, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(a.g, np.ones((2, 3)))


def test_sink_without_one_input_grad_passes_the_held_gradients(rng):
    x = nn.Variable.from_numpy_array(rng.randn(3), need_grad=True)
    a = F.mul_scalar(x, 3.0)
    a.g = np.array([1.0, -2.0, 0.5])
    s = F.sink(a, one_input_grad=False)
    s.forward()
    s.backward()
    np.testing.assert_allclose(x.g, 3.0 * np.array([1.0, -2.0, 0.5]))


def test_broadcast_to_gradient_goes_to_y(rng):
    # nnabla has no backward for broadcast_to; dpnb sums the gradient back onto y
    x = rng.randn(2, 3, 4)
    y = check_grad(lambda a, b: F.broadcast_to(a, b, axis=1), [x, rng.randn(3)], need_grad=[False, True])
    assert y.shape == (2, 3, 4)


def test_dot_of_ndarrays_and_arrays(rng):
    a, b = rng.randn(2, 3), rng.randn(3, 4)
    got = F.dot(nn.NdArray.from_numpy_array(a), nn.NdArray.from_numpy_array(b))
    np.testing.assert_allclose(got.data, a @ b)
    out = nn.NdArray.from_numpy_array(np.zeros((2, 4)))
    assert F.dot(nn.NdArray.from_numpy_array(a), nn.NdArray.from_numpy_array(b), out) is None
    np.testing.assert_allclose(out.data, a @ b)
    np.testing.assert_allclose(F.dot(a, b), a @ b)
    mixed = F.dot(nn.NdArray.from_numpy_array(a), nn.Variable.from_numpy_array(b))
    assert isinstance(mixed, nn.NdArray)                 # an NdArray takes part: computed now
    np.testing.assert_allclose(mixed.data, a @ b)
    np.testing.assert_allclose(F.dot(2.0, nn.NdArray.from_numpy_array(a)).data, 2 * a)
    with pytest.raises(ValueError, match=r"F.dot: out must be a NumPy array of the result's "
                                         r"shape \(\) and dtype float64, got float64"):
        F.dot(np.float64(2.0), np.float64(3.0), np.float64(0.0))
    with pytest.raises(ValueError, match=r"out must be an nn.NdArray .* dtype float64, got NdArray"):
        F.dot(nn.NdArray.from_numpy_array(a), nn.NdArray.from_numpy_array(b),
              nn.NdArray.from_numpy_array(np.zeros((2, 4), np.float32)))


def test_dot_into_a_variable_puts_it_in_the_results_place(rng):
    """nnabla's F.dot(a, b, out) with variables: out is rewired onto the result."""
    a, b = rng.randn(2, 3), rng.randn(3, 4)
    va, vb = nn.Variable.from_numpy_array(a, need_grad=True), nn.Variable.from_numpy_array(b)
    out = nn.Variable((2, 4), dtype=np.float64)
    assert F.dot(va, vb, out) is None
    loss = F.sum(F.mul_scalar(out, 2.0))
    loss.forward()
    np.testing.assert_allclose(out.d, a @ b)
    loss.backward()
    np.testing.assert_allclose(va.g, 2 * np.ones((2, 4)) @ b.T)
    with pytest.raises(ValueError, match="out must be an nn.Variable of the result's shape"):
        F.dot(va, vb, nn.Variable((4, 2), dtype=np.float64))


def test_nonzero_takes_its_size_from_each_forward():
    x = nn.Variable.from_numpy_array(np.array([[0.0, 1.0], [2.0, 0.0]]))
    y = F.nonzero(x)
    y.forward()
    np.testing.assert_array_equal(y.d, [[0, 1], [1, 0]])
    x.d = np.ones((2, 2))
    y.forward()
    assert y.shape == (2, 4)
    assert y.d.dtype == np.uint64


def test_einsum_gradients_with_diagonals_and_lone_letters(rng):
    check_grad(lambda a: F.einsum(a, equation="iij->j"), [rng.randn(3, 3, 2)])
    check_grad(lambda a, b: F.einsum(a, b, equation="i...k,k->...i"), [rng.randn(2, 3, 4), rng.randn(4)])


def test_assign_writes_dst():
    dst = nn.Variable.from_numpy_array(np.zeros(3))
    y = F.assign(dst, nn.Variable.from_numpy_array(np.array([1.0, 2.0, 3.0])))
    y.forward()
    np.testing.assert_array_equal(dst.d, [1.0, 2.0, 3.0])


@pytest.mark.parametrize("build, message", [
    (lambda x: F.stack(x, nn.Variable((3, 2))), r"Stack: input 1 has shape \(3, 2\) but input 0 has \(2, 3\)"),
    (lambda x: F.stack(x, x, axis=3), r"Stack: axis must be an int in \[-3, 3\)"),
    (lambda x: F.stack(x, axes=0), r"F.stack: unexpected keyword argument\(s\) \['axes'\]"),
    (lambda x: F.split(x, axis=2), r"Split: axis must be an int in \[-2, 2\)"),
    (lambda x: F.pad(x, (1,)), r"Pad: pad_width must be an even number \(at most 4\) of ints >= 0"),
    (lambda x: F.pad(x, (1, 1, 1, 1, 1, 1)), r"pad_width must be an even number \(at most 4\)"),
    (lambda x: F.pad(x, (-1, 1)), r"pad_width must be an even number"),
    (lambda x: F.pad(x, (1, 1), mode="wrap"), r"Pad: mode must be one of constant, reflect, repeat, got 'wrap'"),
    (lambda x: F.tile(x, (2, -1)), r"Tile: reps must be an int or a sequence of ints >= 0"),
    (lambda x: F.broadcast(x, (2, 4)), r"Broadcast: cannot broadcast \(2, 3\) to \(2, 4\)"),
    (lambda x: F.broadcast(x, (3,)), r"Broadcast: cannot broadcast \(2, 3\) to \(3,\)"),
    (lambda x: F.broadcast_to(x, nn.Variable((2,))), r"BroadcastTo: y of shape \(2,\) must equal the axes"),
    (lambda x: F.broadcast_to(x, nn.Variable((1, 2, 3))), r"y of shape \(1, 2, 3\) has more axes than x"),
    (lambda x: F.flip(x, axes=[2]), r"Flip: axes must be an int in \[-2, 2\)"),
    (lambda x: F.shift(x, (1, 2, 3)), r"Shift: shifts must be at most 2 ints"),
    (lambda x: F.shift(x, border_mode="wrap"), r"border_mode must be one of nearest, reflect"),
    (lambda x: F.arange(0, 1, 0), r"F.arange: step must not be 0"),
    (lambda x: F.linspace(0, 1, 2.5), r"F.linspace: num must be an int >= 0, got 2.5"),
    (lambda x: F.constant(1.0, (2, -1)), r"F.constant: shape must be a sequence of ints >= 0"),
    (lambda x: F.eye_like(F.reshape(x, (6,))), r"EyeLike: needs a 2-D input, got shape \(6,\)"),
    (lambda x: F.matrix_diag_part(x), r"MatrixDiagPart: needs square matrices on the last two axes, got shape \(2, 3\)"),
    (lambda x: F.meshgrid(x), r"Meshgrid: input 0 must be 1-D, got shape \(2, 3\)"),
    (lambda x: F.batch_matmul(x, x), r"BatchMatmul: needs two inputs of one number \(>= 3\) of dimensions"),
    (lambda x: F.batch_matmul(nn.Variable((2, 2, 3)), nn.Variable((2, 2, 3))),
     r"BatchMatmul: the matrices of \(2, 2, 3\) \(transpose_a=False\) and \(2, 2, 3\) \(transpose_b=False\) do not chain"),
    (lambda x: F.batch_matmul(nn.Variable((2, 2, 3)), nn.Variable((3, 3, 1))), r"BatchMatmul: shapes \(2,\) and \(3,\) do not broadcast"),
    (lambda x: F.einsum(x, x, equation="ij,jk->ik"), r"Einsum: the letter 'j' of 'ij,jk->ik' stands for sizes 3 and 2"),
    (lambda x: F.einsum(x, equation="ij,j->i"), r"Einsum: equation 'ij,j->i' has 2 operand\(s\) but 1 input"),
    (lambda x: F.einsum(x, equation="ijk->i"), r"Einsum: operand 0 'ijk' of 'ijk->i' does not fit input 0 of shape \(2, 3\)"),
    (lambda x: F.einsum(x, equation="ij->k"), r"the output 'k' of 'ij->k' must name each letter once"),
    (lambda x: F.einsum(x), r"Einsum: equation must be a non-empty string"),
    (lambda x: F.trilu(F.reshape(x, (6,))), r"Trilu: needs matrices on the last two axes"),
    (lambda x: F.assign(x, nn.Variable((3, 2))), r"Assign: dst of shape \(2, 3\) and src of shape \(3, 2\)"),
    (lambda x: F.shape(x, start=0.5), r"Shape: start must be an int or None"),
    (lambda x: F.pad(x, (1, 1), outputs=[x]), r"F.pad: n_outputs and outputs hand in output variables"),
])
def test_bad_input(build, message):
    with pytest.raises(DpnbError, match=message):
        build(nn.Variable((2, 3)))


def test_linspace_num_errors_are_nnablas_classes():
    from dpnb.errors import DpnbTypeError, DpnbValueError
    with pytest.raises(TypeError) as info:
        F.linspace(0, 10, 2.5)
    assert isinstance(info.value, DpnbTypeError)
    with pytest.raises(ValueError, match=r"F.linspace: num must be an int >= 0, got -1") as info:
        F.linspace(0, 10, -1)
    assert isinstance(info.value, DpnbValueError)


def test_constant_takes_infinities_and_is_named_as_nnabla_names_it():
    with nn.auto_forward():
        y = F.constant(-np.inf, (2, 3))
    assert np.isneginf(y.d).all() and y.parent.name == "Constant"
    with pytest.raises(DpnbError, match="val must be a number, got 'x'"):
        F.constant("x", (2,))


def test_broadcast_takes_its_shape_as_a_numpy_array():
    x = nn.Variable.from_numpy_array(np.arange(3.0).reshape(1, 3))
    with nn.auto_forward():
        y = F.broadcast(x, np.array([2, 3]))
    np.testing.assert_array_equal(y.d, [[0, 1, 2], [0, 1, 2]])


def test_backward_of_a_function_without_gradient_is_zero():
    """nnabla's function objects give zero (F.shape): accumulated, or written with accum=False."""
    x = nn.Variable.from_numpy_array(np.ones((2, 3)), need_grad=True)
    y = F.shape(x)
    x.g = 5.0
    y.parent.backward([x], [y])
    np.testing.assert_array_equal(x.g, 5.0)
    y.parent.backward([x], [y], [False])
    np.testing.assert_array_equal(x.g, 0.0)


# What nnabla 1.39 does with these (recorded by hand with its F.split): an empty axis at or
# after the split axis is refused; an empty axis before it is not.
@pytest.mark.parametrize("shape, axis, outputs", [((1, 6, 0), 1, None), ((1, 6, 0), 2, None),
                                                  ((2, 0), 0, None), ((0, 6), 1, 6)])
def test_split_of_empty_axes_as_nnabla(shape, axis, outputs):
    if outputs is None:
        with pytest.raises(RuntimeError, match=r"cannot split x of shape .* is empty"):
            F.split(nn.Variable(shape), axis=axis)
    else:
        assert [y.shape for y in F.split(nn.Variable(shape), axis=axis)] == [(0,)] * outputs
