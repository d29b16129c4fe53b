"""``nnabla`` names resolving to dpnb: the import hook, its refusal to shadow a real
nnabla, the extension modules, and ``dpnb run`` / ``python -m dpnb run``.

Each case runs in a fresh interpreter: the hook is process-wide by design."""
import os
import subprocess
import sys
import textwrap

import pytest

DPNB = os.path.join(os.path.dirname(sys.executable), "dpnb")


def python(code: str, *, cwd=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, cwd=cwd, env=env)


def test_nnabla_names_are_dpnb_modules_themselves():
    result = python("""
        import dpnb
        dpnb.use_as_nnabla()
        import nnabla as nn
        import nnabla.functions as F
        import nnabla.parametric_functions as PF
        import nnabla.utils.communicator_util
        from nnabla.ext_utils import get_extension_context
        import nnabla_ext.cpu
        import dpnb.functions, dpnb.parametric_functions, dpnb.extensions.cpu
        assert nn is dpnb and F is dpnb.functions and PF is dpnb.parametric_functions
        assert nnabla_ext.cpu is dpnb.extensions.cpu
        assert nn.utils.communicator_util is dpnb.utils.communicator_util
        # one state: a parameter made through one name is seen through the other
        import dpnb.parametric_functions
        dpnb.parametric_functions.affine(nn.Variable((2, 3)), 4)
        assert len(nn.parameter.get_parameters()) == 2
        assert nn.solver.Solver is dpnb.solvers.Solver
        assert get_extension_context("cpu").backend == ["cpu:float"]
        assert dpnb.functions.__spec__.name == "dpnb.functions"  # dpnb's modules unchanged
        dpnb.use_as_nnabla()  # twice is harmless
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_a_module_dpnb_lacks_is_a_module_not_found_error_naming_it():
    result = python("""
        import dpnb
        dpnb.use_as_nnabla()
        try:
            import nnabla.experimental.graph_converters
        except ModuleNotFoundError as e:
            print(e.name, "|", e)
    """)
    assert result.returncode == 0, result.stderr
    name, message = result.stdout.split("|")
    assert name.strip() == "nnabla.experimental"
    assert "dpnb" in message and "'dpnb.experimental'" in message


def test_without_the_hook_nnabla_is_not_importable():
    result = python("import dpnb\ntry:\n import nnabla\nexcept ImportError:\n print('absent')")
    assert result.stdout.strip() == "absent", result.stderr


@pytest.fixture
def real_nnabla(tmp_path):
    """A directory holding a package named nnabla, standing for a real installation."""
    (tmp_path / "nnabla").mkdir()
    (tmp_path / "nnabla" / "__init__.py").write_text("REAL = True\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    return tmp_path, env


def test_the_real_nnabla_is_never_shadowed(real_nnabla):
    path, env = real_nnabla
    result = python("""
        import dpnb
        from dpnb.nnabla_alias import use_as_nnabla_unless_installed
        assert use_as_nnabla_unless_installed() is False
        import nnabla
        assert nnabla.REAL
        try:
            dpnb.use_as_nnabla()
        except dpnb.DpnbError as e:
            print(e)
    """, env=env)
    assert result.returncode == 0, result.stderr
    assert "the real nnabla is installed here" in result.stdout
    assert str(path / "nnabla") in result.stdout


def test_dpnb_run_refuses_where_the_real_nnabla_is_installed(real_nnabla, tmp_path):
    _, env = real_nnabla
    script = tmp_path / "prog.py"
    script.write_text("import nnabla\n")
    result = subprocess.run([DPNB, "run", str(script)], capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 2
    assert "dpnb does not shadow it" in result.stderr


def test_gpu_extensions_are_import_errors_without_a_gpu():
    result = python("""
        import sys
        sys.modules["cupy"] = None  # as on a machine without CuPy
        import dpnb
        from dpnb.ext_utils import import_extension_module, list_extensions
        dpnb.use_as_nnabla()
        assert list_extensions() == ["cpu"]
        for name in ("nnabla_ext.cuda", "nnabla_ext.cudnn"):
            try:
                __import__(name)
            except ImportError as e:
                assert isinstance(e, dpnb.DpnbError) and "dpnb[gpu]" in str(e), e
            else:
                raise AssertionError(name + " imported without a GPU")
        try:
            import_extension_module("gpu")
        except ImportError as e:
            print(e)
        ext = import_extension_module("cpu")
        assert ext.get_devices() == ["0"] and ext.context().device_id == ""
    """)
    assert result.returncode == 0, result.stderr
    assert "unknown extension 'gpu'" in result.stdout


def write_program(tmp_path):
    script = tmp_path / "prog.py"
    (tmp_path / "helper_module.py").write_text("VALUE = 7\n")
    script.write_text(textwrap.dedent("""
        import sys
        import helper_module          # found beside the script, as `python prog.py` finds it
        import nnabla as nn
        import nnabla.functions as F
        with nn.auto_forward():
            y = F.add_scalar(nn.Variable.from_numpy_array([1.0, 2.0]), helper_module.VALUE)
        print(__name__, sys.argv[1:], y.d.tolist())
        sys.exit(int(sys.argv[1]) if sys.argv[1:] and sys.argv[1].isdigit() else 0)
    """))
    return script


@pytest.mark.parametrize("command", [[DPNB, "run"], [sys.executable, "-m", "dpnb", "run"]])
def test_dpnb_run_runs_a_program_with_its_arguments(command, tmp_path):
    script = write_program(tmp_path)
    result = subprocess.run(command + [str(script), "-c", "cpu", "--flag"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "__main__ ['-c', 'cpu', '--flag'] [8.0, 9.0]"
    exited = subprocess.run(command + [str(script), "3"], capture_output=True, text=True,
                            timeout=60)
    assert exited.returncode == 3  # the program's exit status is the command's


def test_dpnb_run_names_a_missing_script(tmp_path):
    result = subprocess.run([DPNB, "run", str(tmp_path / "missing.py")], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and "no such file" in result.stderr
