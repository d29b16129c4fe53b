"""The ``dpnb`` command: doctor, profile install, cluster start/status/stop."""
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from dpnb import cli
from dpnb.cluster import checks
from dpnb.cluster.profile import CONFIG_TEXT
from dpnb.errors import DpnbError

REPO = Path(__file__).resolve().parents[1]


def test_doctor_reports_each_prerequisite(capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    for name in ("mpi4py", "MPI library", "mpiexec", "ipyparallel", "CuPy", "GPUs", "NCCL"):
        assert any(line.startswith(name) for line in out.splitlines()), name
    assert "mpiexec      found" in out and os.path.dirname(sys.executable) in out
    assert out.rstrip().endswith("ready for MPI engines")


def test_doctor_names_the_fix_for_missing_mpi(capsys, monkeypatch):
    import importlib.util

    import dpnb.communicators.mpiexec as mpiexec

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mpi4py" else real(name, *a))
    monkeypatch.setattr(mpiexec, "find_mpiexec", lambda: (_ for _ in ()).throw(DpnbError("no")))
    checks.check_mpi_library.cache_clear()
    try:
        assert cli.main(["doctor"]) == 1
    finally:
        checks.check_mpi_library.cache_clear()
    out = capsys.readouterr().out
    assert "mpi4py       missing" in out and "mpiexec      missing" in out
    assert "fix: pip install 'dpnb[mpich]'" in out
    assert "not ready: mpi4py, MPI library, mpiexec missing" in out


def test_profile_install(tmp_path, capsys):
    assert cli.main(["profile", "install", "--ipython-dir", str(tmp_path)]) == 0
    config = tmp_path / "profile_mpi" / "ipcluster_config.py"
    assert config.read_text() == CONFIG_TEXT
    assert (config.parent / "security").stat().st_mode & 0o777 == 0o700
    assert "ipcluster start --profile=mpi" in capsys.readouterr().out
    assert cli.main(["profile", "install", "--ipython-dir", str(tmp_path)]) == 0   # same: fine
    config.write_text("c = get_config()\n")
    assert cli.main(["profile", "install", "--ipython-dir", str(tmp_path)]) == 1
    assert "replace it with `dpnb profile install --force`" in capsys.readouterr().err
    assert config.read_text() == "c = get_config()\n"
    assert cli.main(["profile", "install", "--ipython-dir", str(tmp_path), "--force"]) == 0
    assert config.read_text() == CONFIG_TEXT
    backups = list(config.parent.glob("ipcluster_config.py.*.bak"))
    assert len(backups) == 1 and backups[0].read_text() == "c = get_config()\n"
    assert f"the config it replaced is kept as {backups[0]}" in capsys.readouterr().out


def test_repository_profile_matches_installed_one():
    assert (REPO / "profiles" / "mpi" / "ipcluster_config.py").read_text() == CONFIG_TEXT


def test_profile_config_selects_mpi_engines_through_dpnb():
    from traitlets.config import Config

    from dpnb.cluster.profile import configure

    c = Config()
    configure(c)
    assert c.Cluster.engine_launcher_class == "dpnb.cluster.mpi_engines.MPIEngines"
    assert c.EngineLauncher.engine_cmd == [sys.executable, "-m", "dpnb.cluster.engine"]
    assert os.path.basename(c.MPIEngineSetLauncher.mpi_cmd[0]) == "mpiexec"


def _dpnb(args, env, timeout=120):
    return subprocess.run([sys.executable, "-m", "dpnb.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_cluster_start_status_stop(tmp_path):
    env = dict(os.environ, IPYTHONDIR=str(tmp_path))
    started = _dpnb(["cluster", "start", "-n", "2", "--timeout", "60"], env)
    try:
        assert started.returncode == 0, started.stderr
        assert "ipyparallel.Client(profile='mpi')" in started.stdout
        pids = [int(line.split()[3]) for line in started.stdout.splitlines()[3:5]]
        assert all(psutil.pid_exists(p) for p in pids)            # engines outlive the command
        client = textwrap.dedent("""
            import ipyparallel as ipp
            rc = ipp.Client(profile="mpi", timeout=30)
            print(rc[:].apply_sync(lambda: rank))
            rc.close()
        """)
        out = subprocess.run([sys.executable, "-c", client], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.stdout.strip().splitlines()[-1] == "[0, 1]", out.stderr
        status = _dpnb(["cluster", "status"], env)
        assert status.returncode == 0 and "2 MPI engines" in status.stdout
        busy = textwrap.dedent("""
            import time
            import ipyparallel as ipp
            rc = ipp.Client(profile="mpi", timeout=30)
            rc[:].execute("import time\\n"
                          "def busy_rank(seconds):\\n"
                          "    end = time.monotonic() + seconds\\n"
                          "    while time.monotonic() < end:\\n"
                          "        sum(range(1000))\\n"
                          "busy_rank(20)", block=False)
            time.sleep(1)  # the cells have started
            rc.close()
        """)
        out = subprocess.run([sys.executable, "-c", busy], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        where = _dpnb(["cluster", "where"], env)              # a terminal while cells run
        assert where.returncode == 0, where.stderr
        assert "2 of 2 ranks answered" in where.stdout
        assert where.stdout.count("busy_rank") >= 2, where.stdout
    finally:
        stopped = _dpnb(["cluster", "stop"], env)
    assert stopped.returncode == 0, stopped.stderr
    deadline = time.monotonic() + 15
    while any(psutil.pid_exists(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(psutil.pid_exists(p) for p in pids)
    status = _dpnb(["cluster", "status"], env)
    assert status.returncode == 3 and "no cluster is running" in status.stdout


def test_cluster_start_refuses_an_open_controller_without_curve(tmp_path, capsys):
    """`--ip` beyond 127.0.0.1 needs `--curve`, or `--insecure` to say it is meant."""
    options = ["cluster", "start", "-n", "2", "--profile-dir", str(tmp_path / "p"), "--ip", "*"]
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    assert cli.main(options) == 1
    err = capsys.readouterr().err
    assert err.startswith("dpnb cluster start: ip='*' opens the controller to other hosts "
                          "without encryption"), err
    assert "`--curve`" in err and "`--insecure`" in err
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
    assert not (tmp_path / "p").exists()                   # nothing was started or written


def test_cluster_commands_name_profile_directory_and_cluster_id(tmp_path, capsys):
    profile = tmp_path / "elsewhere"
    options = ["--profile-dir", str(profile), "--cluster-id", "x"]
    assert cli.main(["cluster", "status", *options]) == 3
    assert capsys.readouterr().out.strip() == (
        f"no cluster is running in profile directory {profile} (cluster id 'x'); start one "
        f"with `dpnb cluster start --profile-dir {profile} --cluster-id x`")
    assert cli.main(["cluster", "stop", *options]) == 1
    assert capsys.readouterr().err.strip() == (
        f"dpnb cluster stop: no cluster is running in profile directory {profile} "
        "(cluster id 'x'); nothing to stop")


def test_demo_still_works(capsys):
    assert cli.main(["demo", "--steps", "2", "--context", "cpu"]) == 0
    assert "training the tutorial network on cpu" in capsys.readouterr().out


def test_version_help_and_usage_mistakes(capsys):
    from dpnb import __version__

    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"dpnb {__version__} (nnabla 1.39.0's API)\n"
    with pytest.raises(SystemExit) as exit_:
        cli.main(["demo", "--steps", "-3"])
    assert exit_.value.code == 2
    assert "--steps: expected a whole number above 0, got '-3'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["cluster", "stop", "--help"])
    out = " ".join(capsys.readouterr().out.split())    # as argparse wraps it
    assert "seconds to wait for the controller and engines (default: 60)" in out
    assert "--mpi-args" not in out and "--curve" not in out    # start's own options
    assert "exit status: 1 an error (its message on stderr), 2 a usage mistake" in out
    with pytest.raises(SystemExit):
        cli.main(["cluster", "status", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert ("exit status: 0 the cluster runs, 3 none does, 4 only part of it is left "
            "(`dpnb cluster stop` ends that); 1 an error") in out
    with pytest.raises(SystemExit) as exit_:
        cli.main(["cluster", "start", "-n", "0"])
    assert exit_.value.code == 2
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "dpnb run: error: expected the program to run and its arguments" in err
    assert "required" not in err and "args" not in err.replace("arguments", ""), err


def test_usage_and_dpnb_errors_are_one_line_without_traceback(tmp_path):
    """Run as a user would, in a process of its own: no traceback, the status of its kind."""
    for args, status, message in [
            (["run", str(tmp_path / "nosuch.py")], 2,
             f"dpnb run: error: expected a Python program, found no file '{tmp_path}/nosuch.py'"),
            (["tutorial", "--notebook", str(tmp_path / "nosuch.ipynb")], 1,
             f"dpnb tutorial: expected a notebook at {tmp_path}/nosuch.ipynb, found none"),
            (["cluster", "stop", "--profile-dir", str(tmp_path)], 1,
             "dpnb cluster stop: no cluster is running in profile directory"),
            (["cluster", "nosuch"], 2, "dpnb cluster: error: argument ACTION: invalid choice")]:
        done = subprocess.run([sys.executable, "-m", "dpnb", *args], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == status, (args, done.stderr)
        assert done.stderr.splitlines()[-1].startswith(message), (args, done.stderr)
        assert done.stderr.count("\n") == (1 if status == 1 else 2), done.stderr  # [usage,] message
        assert "Traceback" not in done.stderr, done.stderr


def test_notebooks_are_copied_out_for_jupyterlab(tmp_path, capsys):
    target = tmp_path / "my notebooks"
    assert cli.main(["notebooks", str(target)]) == 0
    shipped = sorted((REPO / "dpnb" / "tutorials").glob("*.ipynb"))
    assert [p.name for p in shipped] == ["01_data_parallel_training.ipynb",
                                         "01_data_parallel_training.ja.ipynb",
                                         "02_cifar10_data_parallel.ipynb"]
    for notebook in shipped:
        assert (target / notebook.name).read_bytes() == notebook.read_bytes()
    assert f"open them with: jupyter lab '{target}'" in capsys.readouterr().out
    (target / shipped[0].name).write_text("my edits")
    assert cli.main(["notebooks", str(target)]) == 1          # edits are not lost silently
    assert "pass --force to replace them" in capsys.readouterr().err
    assert (target / shipped[0].name).read_text() == "my edits"
    assert cli.main(["notebooks", str(target), "--force"]) == 0
    assert (target / shipped[0].name).read_bytes() == shipped[0].read_bytes()


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """``dpnb doctor | true``: the pipe's reader is gone before anything is written."""
    process = subprocess.Popen([sys.executable, "-m", "dpnb", "doctor"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=60) == 1, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_a_programs_own_errors_show_as_python_shows_them(tmp_path):
    """`dpnb run`: the program's uncaught error (a missing module or a dpnb error too) is its
    traceback from its own frames on and status 1, not a one-line message of the command."""
    program = tmp_path / "prog.py"
    program.write_text("import dpnb\n\ndef load():\n    import tqdm_is_not_here\n\nload()\n")
    done = subprocess.run([sys.executable, "-m", "dpnb", "run", str(program)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):", done.stderr
    assert lines[1] == f'  File "{program}", line 6, in <module>', done.stderr
    assert lines[-1] == "ModuleNotFoundError: No module named 'tqdm_is_not_here'"
    assert "runpy" not in done.stderr and "pip install" not in done.stderr
