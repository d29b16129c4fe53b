"""dpnb works at the oldest end of the dependency ranges it declares (Python 3.10,
NumPy 1.24, protobuf 3.20, h5py 3.8, mpi4py 4.1), the end where nnabla 1.39 lives; the
main venv that runs the rest of the suite has the newest versions, the other end.

A venv with those pins and this checkout is built in ONE pip call, so that pip's resolver
judges the ranges in pyproject.toml, cached at ``.venv-oldest/`` (tests/cached_venv.py),
and a subset of the suite runs in it: the protobuf schema and nnabla's file formats, the
graph, functions and solvers against NumPy references, and 2-rank MPI collectives."""
import subprocess

import pytest

from cached_venv import ROOT, cached_venv, clean_env, python_of

OLDEST = ["numpy==1.24.4", "protobuf==3.20.3", "h5py==3.8.0", "mpi4py==4.1.0", "mpich",
          "pytest>=8", "pytest-timeout"]
SUBSET = ["tests/test_proto_schema.py", "tests/test_nnabla_files.py", "tests/test_solver_states.py",
          "tests/test_hostile_files.py", "tests/test_graph.py", "tests/test_functions_nn.py",
          "tests/test_functions_math.py", "tests/test_solvers.py",
          "tests/test_communicator.py::test_collectives_against_numpy"]


@pytest.fixture(scope="module")
def oldest():
    return cached_venv(".venv-oldest", "3.10", OLDEST)


@pytest.mark.timeout(1800)
def test_the_oldest_versions_are_the_ones_installed(oldest):
    got = subprocess.run(
        [python_of(oldest), "-c",
         "import sys, numpy, h5py, mpi4py, google.protobuf as p, dpnb; "
         "from google.protobuf.internal import api_implementation as a; "
         "print(sys.version_info[0], sys.version_info[1], numpy.__version__, p.__version__, "
         "h5py.__version__, mpi4py.__version__, dpnb.__file__)"],
        capture_output=True, text=True, env=clean_env(), cwd="/")
    assert got.returncode == 0, got.stderr
    major, minor, numpy, protobuf, h5py, mpi4py, where = got.stdout.split()
    assert (major, minor, numpy, protobuf, h5py, mpi4py) == ("3", "10", "1.24.4", "3.20.3", "3.8.0", "4.1.0")
    assert where == str(ROOT / "dpnb" / "__init__.py")  # this checkout, not a copy
    check = subprocess.run([python_of(oldest), "-m", "pip", "check"], capture_output=True,
                           text=True, env=clean_env())
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("implementation", ["cpp", "python"])
def test_the_subset_passes_at_the_oldest_versions(oldest, implementation):
    """protobuf 3.20's two implementations (its C++ extension is the default on this
    wheel; the pure-Python one is what other platforms get)."""
    env = clean_env()
    env["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = implementation
    tests = SUBSET if implementation == "cpp" else SUBSET[:4]
    done = subprocess.run([python_of(oldest), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--timeout", "300", *tests],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
