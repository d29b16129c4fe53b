"""The tutorial notebooks pass nbval against their stored outputs, and nbval catches a broken one.

Each nbval run is a subprocess with a private IPYTHONDIR, bounded by a timeout;
afterwards no process that inherited that IPYTHONDIR may be left."""
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest


from nbval.plugin import get_sanitize_patterns  # noqa: E402

from dpnb.tutorial_command import reap  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "dpnb" / "tutorials"
ENGLISH = NOTEBOOKS / "01_data_parallel_training.ipynb"
JAPANESE = NOTEBOOKS / "01_data_parallel_training.ja.ipynb"
CIFAR10 = NOTEBOOKS / "02_cifar10_data_parallel.ipynb"
SANITIZE = REPO / "notebooks" / "nbval_sanitize.cfg"
TIMEOUT = 400


def nbval(notebooks: list[Path], ipython_dir: Path,
          cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``pytest --nbval`` on ``notebooks`` in a subprocess; kill its process group on timeout."""
    command = [sys.executable, "-m", "pytest", "--nbval", *map(str, notebooks),
               "--nbval-current-env", "--nbval-sanitize-with", str(SANITIZE),
               "-p", "no:cacheprovider", "-q", "--rootdir", str(cwd)]
    env = {**os.environ, "IPYTHONDIR": str(ipython_dir)}
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        reap("IPYTHONDIR", str(ipython_dir), grace=0)  # the kernel and cluster: own sessions
        out, _ = process.communicate(timeout=30)
        pytest.fail(f"nbval did not finish within {TIMEOUT} s:\n{out[-4000:]}")
    finally:
        left = reap("IPYTHONDIR", str(ipython_dir))
    assert left == [], f"processes left after nbval: {left}"
    return subprocess.CompletedProcess(command, process.returncode, out)


def sanitize(text: str) -> str:
    """``text`` as nbval compares it, after the sanitize file's replacements."""
    for regex, replace in get_sanitize_patterns(SANITIZE.read_text()):
        text = re.sub(regex, replace, text)
    return text


def test_sanitize_hides_hosts_pids_timings_and_float_noise():
    topology = ("2 MPI engines\nrank  engine id  host        pid    local rank  device\n"
                "----  ---------  ----------  -----  ----------  ------\n"
                "0     0          gpu-node-7  81234  0           cpu\n"
                "1     1          gpu-node-7  81235  1           cpu")
    other = ("2 MPI engines\nrank  engine id  host  pid  local rank  device\n"
             "----  ---------  ----  ---  ----------  ------\n"
             "0     0          vm    999  0           cpu\n"
             "1     1          vm    1000  1           cpu")
    assert sanitize(topology) == sanitize(other)
    assert "HOST PID" in sanitize(topology) and "81234" not in sanitize(topology)
    html = "<tr><td>0</td><td>0</td><td>vm</td><td>999</td><td>0</td><td>cpu</td></tr>"
    assert sanitize(html) == ("<tr><td>0</td><td>0</td><td>HOST</td><td>PID</td><td>0</td>"
                              "<td>cpu</td></tr>")
    assert sanitize("30/30 [00:01<00:00, 617.29step/s] 12.5 ms") == sanitize(
        "30/30 [00:03<00:00, 17.2step/s] 3 ms")
    assert sanitize("norm=21.43341 [3.5974698066711426] 0.000695423") == \
        sanitize("norm=21.43339 [3.597469806671143] 0.000695419")
    assert sanitize("0.00711441") == sanitize("0.00711465")     # Haswell's and SandyBridge's
    assert sanitize("norm=21.43") != sanitize("norm=21.53")        # real differences remain
    assert sanitize("0.00711") != sanitize("0.00712") and sanitize("730.5") != sanitize("731.5")
    assert sanitize("float32(1024, 2) conv2d") == "float32(1024, 2) conv2d"


def test_notebooks_have_no_errors_stored():
    for path in (ENGLISH, JAPANESE, CIFAR10):
        cells = json.loads(path.read_text())["cells"]
        code = [c for c in cells if c["cell_type"] == "code"]
        assert code and all(c["execution_count"] for c in code), f"{path.name} is not executed"
        assert not [o for c in code for o in c["outputs"] if o["output_type"] == "error"]


def test_notebooks_pass_nbval(tmp_path):
    result = nbval([ENGLISH, JAPANESE, CIFAR10], tmp_path / "ipython")
    assert result.returncode == 0, result.stdout[-6000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


BREAKS = {
    # the output changes: summed instead of averaged gradients
    "output": (ENGLISH, "division=True)", "division=False)", "comm.all_reduce(["),
    # the cell raises
    "error": (ENGLISH, 'print(f"mpi_rank={mpi_rank}")', 'print(f"mpi_rank={mpi_rank}")\n1 / 0',
              "n_devices="),
    # the run does not learn (learning rate 0): the notebook's own check fails
    "training": (CIFAR10, '"-l", "0.02"', '"-l", "0"', "options = "),
}
RAISED = {"error": "ZeroDivisionError", "training": "the validation error did not fall"}


@pytest.mark.parametrize("kind", sorted(BREAKS))
def test_broken_cell_fails_nbval(tmp_path, kind):
    original, old, new, marker = BREAKS[kind]
    notebook = json.loads(original.read_text())
    edited = [c for c in notebook["cells"]
              if c["cell_type"] == "code" and marker in "".join(c["source"])][:1]
    assert edited, f"no code cell contains {marker!r}"
    source = "".join(edited[0]["source"])
    assert old in source
    edited[0]["source"] = source.replace(old, new, 1)
    copy = tmp_path / "notebooks" / original.name
    copy.parent.mkdir()
    copy.write_text(json.dumps(notebook))
    result = nbval([copy], tmp_path / "ipython", cwd=tmp_path)
    assert result.returncode != 0, result.stdout[-4000:]
    assert "failed" in result.stdout
    if kind in RAISED:
        assert RAISED[kind] in result.stdout, result.stdout[-4000:]
    else:
        assert "reference_output == test_output" in result.stdout
