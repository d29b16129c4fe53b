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


def import_error(statement: str) -> tuple[str, str]:
    """The name and message of the ModuleNotFoundError that ``statement`` raises under
    dpnb's stand-in for nnabla (with dpnb.models already imported)."""
    result = python(f"""
        import sys
        import dpnb.models
        import dpnb
        dpnb.use_as_nnabla()
        try:
            {statement}
        except ModuleNotFoundError as e:
            print(e.name, "|", e, "|", "nnabla.models" in sys.modules)
    """)
    assert result.returncode == 0, result.stderr
    name, message, models_aliased = (part.strip() for part in result.stdout.split("|"))
    assert models_aliased == "False"  # dpnb.models is not registered as nnabla.models
    return name, message


def test_a_module_dpnb_lacks_is_a_module_not_found_error_naming_it():
    name, message = import_error("import nnabla.experimental.graph_converters")
    assert name == "nnabla.experimental"
    assert "dpnb" in message and "'dpnb.experimental'" in message


def test_nnabla_models_is_not_dpnbs_models():
    """nnabla.models holds nnabla's pretrained networks; dpnb.models is unrelated."""
    name, message = import_error("from nnabla.models.imagenet import ResNet18")
    assert name == "nnabla.models"
    assert "pretrained models" in message and "dpnb.models is dpnb's own" in message


def test_without_the_hook_nnabla_is_not_importable():
    result = python("import dpnb\ntry:\n import nnabla\nexcept ImportError:\n print('absent')")
    assert result.stdout.strip() == "absent", result.stderr


def test_the_names_nnablas_programs_and_tests_import():
    """Values from nnabla 1.39.0: ``nnabla.logger`` is the Logger, its dtype codes, its
    ``assert_allclose`` tolerances, the recompute flag new variables get from
    ``set_global_recompute``; its errors of shapes are RuntimeErrors."""
    result = python("""
        import logging
        import numpy as np
        import dpnb
        dpnb.use_as_nnabla()
        import nnabla as nn
        import nnabla.functions as F
        import nnabla.logger as logger
        from nnabla.logger import logger as same
        assert logger is same is logging.getLogger("nnabla") is nn.logger
        logger.info("logged")
        from nnabla.utils import nnabla_pb2
        import nnabla.utils.nnabla_pb2 as pb2
        import dpnb.formats.nnabla_pb2
        assert pb2 is nnabla_pb2 is dpnb.formats.nnabla_pb2
        assert nnabla_pb2.NNablaProtoBuf().network.add().name == ""
        from nnabla.testing import assert_allclose
        assert_allclose(np.float32(1.000009), 1.0)      # rtol 1e-5
        assert_allclose(np.float32(1e-6), 0.0)          # atol 1e-6
        try:
            assert_allclose(1.0001, 1.0)
        except AssertionError:
            print("assert_allclose refuses 1e-4")
        import nnabla.dtypes as dtypes
        assert dtypes.np_dtpye_to_int[np.float32] == 11 and dtypes.np_dtpye_to_int[bool] == 0
        assert dtypes.int_to_np_dtype[12] is np.double and dtypes.int_to_np_dtype[9] is np.int64
        nn.prefer_cached_array(True)
        nn.prefer_cached_array(False)
        nn.set_global_recompute(True)
        assert nn.Variable((2,)).recompute and F.sin(nn.Variable((2,))).recompute
        nn.set_global_recompute(False)
        assert not nn.Variable((2,)).recompute
        try:
            nn.prefer_cached_array("yes")
        except RuntimeError as e:
            print(type(e).__name__, "|", e)
        try:
            F.add2(nn.Variable((2, 3)), nn.Variable((3, 2)))
        except RuntimeError as e:
            print(type(e).__name__, "|", e)
    """)
    assert result.returncode == 0, result.stderr
    assert "[nnabla][INFO]: logged" in result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "assert_allclose refuses 1e-4"
    assert lines[1] == "DpnbError | prefer_cached_array takes True or False, got 'yes'"
    assert lines[2] == "DpnbError | Add2: shapes (2, 3) and (3, 2) do not broadcast together"


def test_a_folder_named_nnabla_in_the_working_directory_is_not_nnabla(tmp_path):
    """nnabla's tutorials ``git clone`` nnabla into the working directory: a folder, no
    package, which must not pass for an installed nnabla (nor stay importable)."""
    (tmp_path / "nnabla" / "python" / "src").mkdir(parents=True)
    result = python("""
        import nnabla as folder                # a namespace package: the folder itself
        import dpnb
        dpnb.use_as_nnabla()
        import nnabla
        assert folder is not dpnb and nnabla is dpnb, nnabla
        print("dpnb")
    """, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "dpnb"
    script = tmp_path / "prog.py"
    script.write_text("import nnabla, dpnb\nprint(nnabla is dpnb)\n")
    result = subprocess.run([DPNB, "run", str(script)], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


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
    assert result.returncode == 1                     # an error, not a usage mistake
    assert result.stderr.startswith("dpnb run: ") and result.stderr.count("\n") == 1
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
    assert result.returncode == 2                     # a usage mistake, as `python` has it
    assert "dpnb run: error: expected a Python program, found no file" in result.stderr


def test_version_is_dpnbs_release_and_names_the_nnabla_it_follows():
    result = python("""
        import importlib.metadata
        import dpnb
        dpnb.use_as_nnabla()
        import nnabla as nn
        assert nn.__version__ == importlib.metadata.version("dpnb") == dpnb.__version__
        assert nn.nnabla_version == "1.39.0"
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
