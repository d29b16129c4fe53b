"""``dpnb tutorial``: the notebook headless on a fresh cluster, its table, nothing left behind."""
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import nbformat
import pytest


from dpnb import cli  # noqa: E402
from dpnb.errors import DpnbError  # noqa: E402
from dpnb import tutorial_command as tutorial  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ENGLISH = REPO / "dpnb" / "tutorials" / tutorial.NOTEBOOK
TIMEOUT = 300
COMPARISON = """\
stage   parameter  norm rank 0  norm rank 1  max |diff|  ranks agree
------  ---------  -----------  -----------  ----------  -----------
before  conv/W     21.4334      15.5639      11.6        NO
before  conv/b     3.59747      3.59747      0           yes
after   conv/W     16.8911      16.8911      0           yes
after   conv/b     1.79518      1.79518      0           yes"""


def dpnb_tutorial(*args: str) -> subprocess.CompletedProcess:
    """``python -m dpnb.cli tutorial ARGS`` with a marker in its environment; afterwards no
    process carrying the marker (kernel, controller, mpiexec, engine) may be left."""
    marker = uuid.uuid4().hex
    env = {**os.environ, "DPNB_TEST_TUTORIAL": marker}
    process = subprocess.Popen([sys.executable, "-m", "dpnb.cli", "tutorial", *args], cwd=REPO,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        tutorial.reap("DPNB_TEST_TUTORIAL", marker, grace=0)  # the kernel and cluster: own sessions
        out, err = process.communicate(timeout=30)
        pytest.fail(f"dpnb tutorial did not finish within {TIMEOUT} s:\n{out}\n{err}")
    finally:
        left = tutorial.reap("DPNB_TEST_TUTORIAL", marker)
    assert left == [], f"processes left after dpnb tutorial: {left}"
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_tutorial_prints_the_table_and_leaves_nothing():
    result = dpnb_tutorial()
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    rows = [line.split() for line in out.splitlines()]
    assert [r[:2] for r in rows if r[:1] in (["before"], ["after"])] == [
        [stage, name] for stage in ("before", "after")
        for name in ("conv/W", "conv/b", "affine/W", "affine/b")]
    assert all(r[-1] == "NO" for r in rows if r[:1] == ["before"])
    assert all(r[-1] == "yes" and r[-2] == "0" for r in rows if r[:1] == ["after"])
    assert "2 MPI engines" in out and "identical" in out
    assert "no controller, mpiexec or engine process is left" in out
    assert "FAILED" not in result.stderr


def test_failing_cell_exits_non_zero_and_stops_the_cluster(tmp_path):
    notebook = nbformat.read(ENGLISH, as_version=4)
    cell = next(c for c in notebook.cells if "n_devices=" in c.source)
    cell.source += "\nraise RuntimeError('broken on purpose')"
    copy = tmp_path / "broken.ipynb"
    nbformat.write(notebook, copy)
    result = dpnb_tutorial("--notebook", str(copy), "--timeout", "120")
    assert result.returncode == 1
    assert "FAILED: a cell of the notebook failed" in result.stderr
    assert "broken on purpose" in result.stderr
    assert "still running" not in result.stderr                 # the kernel's exit stopped it


def test_missing_notebook_is_an_error_on_one_line(tmp_path, capsys):
    assert cli.main(["tutorial", "--notebook", str(tmp_path / "none.ipynb")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dpnb tutorial: expected a notebook at ") and err.count("\n") == 1
    assert "pass --notebook" in err


def test_missing_mpi_is_named_before_a_kernel_starts(capsys, monkeypatch):
    import dpnb.communicators.mpiexec as mpiexec
    from dpnb.cluster import checks

    monkeypatch.setattr(mpiexec, "find_mpiexec",
                        lambda: (_ for _ in ()).throw(DpnbError("no mpiexec on PATH")))
    monkeypatch.setattr(tutorial, "execute", lambda *a: pytest.fail("a kernel was started"))
    checks.check_mpi_library.cache_clear()
    try:
        assert cli.main(["tutorial"]) == 1
    finally:
        checks.check_mpi_library.cache_clear()
    err = capsys.readouterr().err
    assert err.startswith("dpnb tutorial: MPI engines need mpiexec, which was not usable: "
                          "neither beside ") and "fix: " in err and err.count("\n") == 1, err


def test_rows_agree():
    assert tutorial.rows_agree(COMPARISON) == (True, True)
    broken = COMPARISON.replace("16.8911      16.8911      0           yes",
                                "16.8911      9.1          1.2         NO")
    assert tutorial.rows_agree(broken) == (True, False)
    assert tutorial.rows_agree(COMPARISON.replace("NO", "yes")) == (False, True)
    assert tutorial.rows_agree("") == (False, False)


def test_tagged_text_reads_the_stored_outputs():
    notebook = nbformat.reads(ENGLISH.read_text(), as_version=4)
    comparison = tutorial.tagged_text(notebook, "comparison")
    assert comparison.splitlines()[0].split()[:2] == ["stage", "parameter"]
    assert tutorial.rows_agree(comparison) == (True, True)
    assert "rank 0: loss" in tutorial.tagged_text(notebook, "training")
    assert tutorial.tagged_text(notebook, "no such tag") == ""
    assert json.loads(ENGLISH.read_text())["metadata"]["kernelspec"]["name"] == "python3"


def test_kernel_is_this_python_whatever_spec_is_installed(tmp_path, monkeypatch):
    spec = tmp_path / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps(
        {"argv": ["/nonexistent/python", "-f", "{connection_file}"], "display_name": "other",
         "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    from jupyter_client.kernelspec import KernelSpecManager

    assert KernelSpecManager().get_kernel_spec("python3").argv[0] == "/nonexistent/python"
    assert tutorial.ThisPythonKernel(kernel_name="python3").kernel_spec.argv[0] == sys.executable
