"""dpnb as ``pip install dpnb`` gives it: the wheel built from this checkout, installed into a
virtual environment outside any clone, runs its tutorial, copies out its notebooks, runs the
CIFAR-10 example and its launcher, and installs its profile.

The environment takes its third-party packages from the test's own (a ``.pth`` file naming
that site-packages, whose editable dpnb is then not seen), so that nothing is downloaded;
``MPI4PY_LIBMPI`` names the MPI library, which mpi4py otherwise looks for in the prefix of
the environment it runs in, and an ``mpiexec`` beside its Python runs the test's own, as the
mpich wheel would put one there."""
from __future__ import annotations

import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHIPPED = ["dpnb/tutorials/01_data_parallel_training.ipynb",
           "dpnb/tutorials/01_data_parallel_training.ja.ipynb",
           "dpnb/tutorials/02_cifar10_data_parallel.ipynb",
           "dpnb/examples/cifar10/multi_device_multi_process_classification.sh",
           "dpnb/formats/nnabla.proto"]


def run(command: list, cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{command} ended with {done.returncode}:\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", str(REPO), "-w", str(out)],
                   check=True, capture_output=True, timeout=300)
    (found,) = out.glob("dpnb-*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """(environment, the environment variables of a shell outside any clone, a folder there)."""
    base = tmp_path_factory.mktemp("outside")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    purelib = Path(subprocess.run([venv / "bin" / "python", "-c",
                                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    (purelib / "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True, timeout=300)
    libmpi = Path(sys.prefix) / "lib" / "libmpi.so.12"
    assert libmpi.exists(), f"expected the mpich wheel's MPI library at {libmpi}"
    mpiexec = venv / "bin" / "mpiexec"
    mpiexec.write_text(f'#!/bin/sh\nexec {Path(sys.executable).parent / "mpiexec"} "$@"\n')
    mpiexec.chmod(0o755)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin",
           "HOME": str(base), "MPI4PY_LIBMPI": str(libmpi), "IPYTHONDIR": str(base / "ipython"),
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    work = base / "work"
    work.mkdir()
    return venv, env, work


def test_the_wheel_holds_what_the_commands_need_and_no_tests(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert all(name in names for name in SHIPPED), [n for n in SHIPPED if n not in names]
    assert not [n for n in names if n.startswith("tests/") or "/tests/" in n]
    mode = zipfile.ZipFile(wheel).getinfo(SHIPPED[3]).external_attr >> 16
    assert mode & 0o111, "the launcher must stay executable"


def test_the_sdist_holds_the_package_data_and_what_rebuilds_it(tmp_path):
    build = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    name = subprocess.run([sys.executable, "-c", build, str(tmp_path)], cwd=REPO, check=True,
                          capture_output=True, text=True, timeout=300).stdout.split()[-1]
    with tarfile.open(tmp_path / name) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    wanted = [*SHIPPED, "LICENSE", "notebooks/make_notebooks.py", "notebooks/tutorial_cells.py",
              "notebooks/cifar10_cells.py", "scripts/make_proto.py", "profiles/mpi/ipcluster_config.py",
              "dpnb/examples/cifar10/multi_device_multi_process_classification.py"]
    assert [n for n in wanted if n not in names] == []
    assert not [n for n in names if n.startswith("tests/")]


def test_dpnb_runs_from_the_wheel_outside_any_clone(installed):
    venv, env, work = installed
    python = str(venv / "bin" / "python")
    where = run([python, "-c", "import dpnb; print(dpnb.__file__)"], work, env).stdout
    assert where.strip().startswith(str(venv)), where
    assert run([venv / "bin" / "dpnb", "--version"], work, env).stdout.startswith("dpnb 0.1.0")
    assert "ready for MPI engines" in run([venv / "bin" / "dpnb", "doctor"], work, env).stdout
    assert "loss" in run([venv / "bin" / "dpnb", "demo", "--steps", "2"], work, env).stdout
    run([venv / "bin" / "dpnb", "profile", "install"], work, env)
    assert (Path(env["IPYTHONDIR"]) / "profile_mpi" / "ipcluster_config.py").is_file()
    python = venv / "bin" / "python"
    for tries_left in reversed(range(2)):   # as dpnb's launcher: MPICH's MPI_Init now and
        run([python, "-m", "ipyparallel.cluster", "start", "--profile=mpi", "-n", "2",
             "--daemonize"], work, env)                    # then fails (pmodels/mpich#7417)
        try:
            ranks = run([python, "-c", "import ipyparallel as ipp\n"
                         "rc = ipp.Client(profile='mpi', timeout=60)\n"
                         "rc.wait_for_engines(2, timeout=60)\n"
                         "print(rc[:].apply_sync(lambda: (rank, __import__('dpnb').__file__)))"],
                        work, env, timeout=180).stdout
            break
        except AssertionError:
            if not tries_left:
                raise
        finally:
            run([venv / "bin" / "dpnb", "cluster", "stop"], work, env)
    assert ranks.strip() == str([(r, f"{where.strip()}") for r in (0, 1)]), ranks
    run([venv / "bin" / "dpnb", "notebooks", "notebooks"], work, env)
    assert sorted(p.name for p in (work / "notebooks").iterdir()) == [
        Path(name).name for name in SHIPPED[:3]]
    tutorial = run([venv / "bin" / "dpnb", "tutorial"], work, env, timeout=600).stdout
    assert f"running {venv}" in tutorial and "tutorial finished" in tutorial, tutorial
    assert sorted(p.name for p in work.iterdir()) == ["notebooks"]   # nothing else written


def test_the_copied_out_cifar10_notebook_runs_from_the_wheel(installed):
    """The CIFAR-10 notebook, as `dpnb notebooks` copied it, runs in a kernel of the wheel's
    environment (its own checks: the validation error falls, the ranks agree)."""
    venv, env, work = installed
    copied = work / "notebooks" / "02_cifar10_data_parallel.ipynb"
    if not copied.exists():
        run([venv / "bin" / "dpnb", "notebooks", "notebooks"], work, env)
    execute = ("import sys, tempfile\n"
               "from pathlib import Path\n"
               "from dpnb.tutorial_command import execute, reap\n"
               "ipython_dir = tempfile.mkdtemp()\n"
               "try:\n"
               "    execute(Path(sys.argv[1]), ipython_dir, 300)\n"
               "finally:\n"
               "    print('left:', reap('IPYTHONDIR', ipython_dir))\n")
    out = run([venv / "bin" / "python", "-c", execute, copied], work, env, timeout=600).stdout
    assert out.strip().splitlines()[-1] == "left: []", out


def test_the_example_and_its_launcher_run_from_the_wheel(installed):
    """The launcher finds the environment's Python and mpiexec unactivated (PATH without it)."""
    venv, env, work = installed
    tiny = ["--dataset", "synthetic", "-b", "4", "--nmaps", "4", "-e", "0.1", "-m", "8",
            "--no-progress"]
    launcher = next(venv.glob("lib/python*/site-packages/dpnb/examples/cifar10/*.sh"))
    unactivated = {**env, "PATH": "/usr/bin:/bin", "MONITOR_PATH": str(work / "launched")}
    out = run([launcher, "2", *tiny, "--epochs", "1", "-v", "32", "-s", "32"], work,
              unactivated).stdout
    assert "final test accuracy" in out
    assert (work / "launched" / "checkpoint.json").is_file()
    out = run([venv / "bin" / "python", "-m", "dpnb.examples.cifar10", *tiny, "-i", "4", "-v", "4",
               "-s", "4", "-o", "module"], work, env).stdout
    assert "final test accuracy" in out and (work / "module" / "validation.jsonl").is_file()
    assert not (work / "tmp.monitor").exists()
