import numpy as np
import pytest

import dpnb as nn
from dpnb import kernels


@pytest.fixture(autouse=True)
def fresh_state():
    """Each test starts with no parameters, the default context and a fixed seed."""
    nn.clear_parameters()
    nn.seed(313)
    with nn.context_scope(nn.Context()):
        yield
    nn.clear_parameters()


def gpu_available() -> bool:
    return nn.default_extension() == "cudnn"


requires_nccl = pytest.mark.skipif(
    not gpu_available(), reason="needs a real GPU: NCCL, which the CuPy stand-in cannot run")


@pytest.fixture(scope="module")
def ipython_dir(tmp_path_factory):
    """A private IPYTHONDIR for a test module (profiles, cluster files, logs), so that
    tests never touch ~/.ipython."""
    path = tmp_path_factory.mktemp("ipython")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IPYTHONDIR", str(path))
        yield path


@pytest.fixture
def rng():
    return np.random.RandomState(0)


@pytest.fixture(params=["numba", "numpy"])
def kernel_backend(request):
    """A test twice: through dpnb.kernels' compiled loops and through NumPy alone (as
    without Numba)."""
    before = kernels.use(request.param == "numba")
    yield request.param
    kernels.use(before)


def _standin():
    """The stand-in package (tests/standin) for a GPU variant on a machine without a GPU;
    skips where the real CuPy is installed but finds no GPU."""
    import standin

    if standin.real_cupy_present():
        pytest.skip("CuPy is installed but finds no GPU")
    return standin


@pytest.fixture
def gpu():
    """The CuPy a GPU variant runs on: the real one where dpnb finds a GPU, else the
    NumPy-backed stand-in (tests/standin), installed for this test alone."""
    if gpu_available():
        import cupy

        yield cupy
        return
    with _standin().installed() as cupy:
        yield cupy


@pytest.fixture
def gpu_environment():
    """Environment variables for the processes a GPU variant starts (MPI ranks, a fresh
    interpreter): none where dpnb finds a GPU, else those that give them the stand-in."""
    return {} if gpu_available() else _standin().environment()


@pytest.fixture
def cupy_standin():
    """The NumPy-backed CuPy stand-in (tests/standin) installed for this test, one GPU;
    skipped where the real CuPy is importable."""
    from standin import installed, real_cupy_present

    if real_cupy_present():
        pytest.skip("the real CuPy is installed: test against it")
    with installed() as cupy:
        yield cupy
