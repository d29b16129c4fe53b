"""The CuPy stand-in (tests/standin, issue 29): its behaviour against CuPy's documented
behaviour, the bug classes it exists to catch (each planted and seen to fail), and one
dpnb training step run on it end to end."""
import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
import dpnb.parametric_functions as PF
import dpnb.solvers as S


# -- the stand-in against CuPy's documented behaviour ------------------------------------

def test_arrays_are_their_own_type(cupy_standin):
    cp = cupy_standin
    a = cp.arange(6, dtype=cp.float32)
    assert type(a) is cp.ndarray and not isinstance(a, np.ndarray)
    assert type(a).__module__.split(".")[0] == "cupy"  # what dpnb's array_module_of reads
    assert cp.STANDIN


def test_get_and_asnumpy_round_trip(cupy_standin):
    cp = cupy_standin
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    a = cp.asarray(host)
    back = a.get()
    assert type(back) is np.ndarray and back.dtype == np.float32
    np.testing.assert_array_equal(back, host)
    back[0, 0] = 99  # get() is a copy
    assert a[0, 0].item() == 0
    np.testing.assert_array_equal(cp.asnumpy(a), host)
    assert cp.asnumpy(host) is host or np.shares_memory(cp.asnumpy(host), host)
    out = np.empty((2, 3), np.float32)
    assert a.get(out=out) is out
    with pytest.raises(TypeError):
        a.get(out=np.empty((2, 3), np.float64))
    assert cp.asarray(a) is a


def test_set_checks_type_shape_and_dtype(cupy_standin):
    cp = cupy_standin
    a = cp.zeros(3, cp.float32)
    a.set(np.ones(3, np.float32))
    assert a.sum().item() == 3
    with pytest.raises(TypeError):
        a.set([1, 2, 3])
    with pytest.raises(ValueError):
        a.set(np.ones(4, np.float32))
    with pytest.raises(TypeError):
        a.set(np.ones(3, np.float64))


def test_get_array_module(cupy_standin):
    cp = cupy_standin
    assert cp.get_array_module(cp.zeros(1)) is cp
    assert cp.get_array_module(np.zeros(1), cp.zeros(1)) is cp
    assert cp.get_array_module(np.zeros(1), 3) is np


def test_ufuncs_and_functions_dispatch_to_the_stand_in(cupy_standin):
    cp = cupy_standin
    a = cp.arange(6, dtype=cp.float32).reshape(2, 3)
    for result in (np.exp(a), np.add(a, 1), np.maximum(a, a), np.sum(a, axis=0),
                   np.concatenate([a, a]), np.where(a > 2, a, 0), np.linalg.inv(cp.eye(2)),
                   np.fft.fft(a), np.add.reduceat(a.ravel(), cp.asarray([0, 3]))):
        assert type(result) is cp.ndarray
    out = cp.empty((2, 3), cp.float32)
    assert np.multiply(a, 2, out=out) is out
    assert a.sum().ndim == 0 and type(a.sum()) is cp.ndarray  # 0-d arrays, not scalars
    assert type(a[0, 0]) is cp.ndarray
    with pytest.raises(TypeError):  # CuPy's __array_ufunc__ takes no host list either
        np.add.reduceat(a.ravel(), [0, 3])


def test_devices(cupy_standin):
    cp = cupy_standin
    assert cp.cuda.runtime.getDeviceCount() == 1
    device = cp.cuda.Device(0)
    assert device.use() is device and device.id == 0 and cp.cuda.Device().id == 0
    device.synchronize()
    with device:
        assert cp.zeros(1).device == device
    far = cp.cuda.Device(1)  # building one checks nothing, as in CuPy
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError, match="invalid device ordinal"):
        far.use()
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError):
        with far:
            pass
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError):
        far.synchronize()
    assert cp.cuda.Device().id == 0


def test_several_devices():
    from standin import installed, real_cupy_present
    if real_cupy_present():
        pytest.skip("the real CuPy is installed")
    with installed(device_count=2) as cp:
        with cp.cuda.Device(1):
            a = cp.zeros(2)
            assert cp.cuda.Device().id == 1
        assert a.device.id == 1 and a.data.device_id == 1 and cp.cuda.Device().id == 0
        with pytest.raises(cp.cuda.runtime.CUDARuntimeError):
            cp.cuda.Device(2).use()


def test_streams_and_events(cupy_standin):
    cp = cupy_standin
    stream = cp.cuda.Stream(non_blocking=True)
    assert cp.cuda.get_current_stream() is cp.cuda.Stream.null
    with stream:
        assert cp.cuda.get_current_stream() is stream
    event = cp.cuda.get_current_stream().record()
    stream.wait_event(event)
    stream.synchronize()
    assert event.done and stream.done
    with pytest.raises(TypeError):
        stream.wait_event(stream)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    end.record()
    assert cp.cuda.get_elapsed_time(start, end) >= 0
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError):
        cp.cuda.get_elapsed_time(cp.cuda.Event(), end)  # never recorded
    cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()


def test_untestable_here_is_declared(cupy_standin):
    cp = cupy_standin
    with pytest.raises(ImportError):
        from cupy.cuda import nccl  # noqa: F401
    for kernel in (cp.ElementwiseKernel, cp.RawKernel):
        with pytest.raises(NotImplementedError, match="GPU"):
            kernel("float32 x", "float32 y", "y = x", "copy")


def test_removed_after_the_test():
    import sys
    from standin import HERE, installed, real_cupy_present
    if real_cupy_present():
        pytest.skip("the real CuPy is installed")
    with installed():
        assert "cupy" in sys.modules and HERE in sys.path
    assert "cupy" not in sys.modules and HERE not in sys.path
    assert nn.default_extension() == "cpu"
    with pytest.raises(ImportError):
        import cupy  # noqa: F401


# -- the bug classes, planted --------------------------------------------------------------

def test_planted_numpy_call_on_a_device_array(cupy_standin):
    """A NumPy-only call (or NumPy's signature) on a CuPy array fails as on a GPU."""
    cp = cupy_standin
    a = cp.arange(6, dtype=cp.float32).reshape(2, 3)
    with pytest.raises(TypeError, match="no implementation found"):
        np.apply_over_axes(np.sum, a, [0])  # CuPy has no apply_over_axes
    with pytest.raises(TypeError, match="mode"):
        np.take(a, cp.asarray([0]), axis=0, mode="clip")  # CuPy's take has no mode
    with pytest.raises(TypeError, match="out"):
        np.einsum("ij->ji", a, out=cp.empty((3, 2), cp.float32))  # nor einsum an out
    with pytest.raises(TypeError, match="where"):
        a.sum(where=a > 0)  # nor its reductions a where


def test_planted_implicit_host_copy(cupy_standin):
    """Anything that would copy device data to the host behind the caller's back."""
    cp = cupy_standin
    a = cp.arange(6, dtype=cp.float32)
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array"):
        np.asarray(a)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.array([a, a])
    with pytest.raises(TypeError):
        np.copyto(np.empty(6, np.float32), a)  # a host buffer filled from the device
    with pytest.raises(TypeError):
        np.concatenate([a, a], out=np.empty(12, np.float32))
    with pytest.raises(TypeError):
        float(a)  # a non-scalar
    with pytest.raises(ValueError, match="ambiguous"):
        bool(a > 2)
    # one element converts explicitly, as CuPy allows (with a synchronisation)
    assert float(a[1]) == 1.0 and bool(a[1]) and int(a.sum()) == 15


def test_planted_host_array_in_a_device_computation(cupy_standin):
    """A NumPy array where CuPy needs a device one: the implicit host-to-device copy that
    CuPy refuses in kernels and in assignments."""
    cp = cupy_standin
    a = cp.zeros(3, cp.float32)
    host = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="Unsupported type"):
        a + host
    with pytest.raises(TypeError, match="Unsupported type"):
        host * a
    with pytest.raises(TypeError, match="Unsupported type"):
        cp.maximum(a, host)
    with pytest.raises(ValueError, match="non-scalar numpy.ndarray"):
        a[...] = host
    a[np.array([0, 2])] = 1  # a NumPy *index* is copied, as CuPy does
    assert a.sum().item() == 2


# -- dpnb on the stand-in ------------------------------------------------------------------

def _train(ctx, steps=2):
    nn.clear_parameters()
    nn.seed(313)
    rng = np.random.RandomState(0)
    with nn.context_scope(ctx):
        x = nn.Variable.from_numpy_array(rng.randn(4, 3, 8, 8).astype(np.float32))
        t = nn.Variable.from_numpy_array(np.array([[0], [1], [2], [1]]))
        h = F.relu(PF.convolution(x, 4, (3, 3), pad=(1, 1), name="c1"))
        h = PF.batch_normalization(F.max_pooling(h, (2, 2)), name="bn")
        loss = F.mean(F.softmax_cross_entropy(PF.affine(h, 3, name="fc"), t))
        solver = S.Adam(1e-3)
        solver.set_parameters(nn.get_parameters())
        losses = []
        for _ in range(steps):
            loss.forward()
            solver.zero_grad()
            loss.backward()
            solver.update()
            losses.append(float(loss.d))
        return losses, loss


def test_a_training_step_on_the_cudnn_context(cupy_standin):
    from dpnb.ext_utils import get_extension_context
    cp = cupy_standin
    assert nn.default_extension() == "cudnn"
    on_cpu, _ = _train(nn.Context())
    on_gpu, loss = _train(get_extension_context("cudnn"))
    assert type(loss.data.data) is cp.ndarray
    np.testing.assert_allclose(on_gpu, on_cpu, rtol=1e-5)
